"""Fusion of elementwise chains into one loop, and of a convolution with the elementwise chain that
follows it (BatchNorm in inference mode, bias, residual add, ReLU ...) into its GEMM's epilogue.

:func:`plan` groups the flat graph's nodes into :class:`Unit` s, each emitted as one block of C:

- a single node, emitted by its own emitter;
- an *elementwise group*: a chain of elementwise primitives with one output shape (each member reads a
  value of the group), computed in one loop nest with the intermediates in registers;
- a *convolution group*: a ``conv1d``/``conv2d`` followed by such a chain on its output: the chain runs on
  each block of output pixels right after the GEMM computed it, while the block is in cache.

A member's result is *stored* (written to memory) only when a node outside the group, or the caller,
reads it. Fusion never changes the arithmetic: each member computes the same C expression, rounded to
its own type, in the same order as its own emitter would (:data:`~mithril_backend_c.emitters.elementwise.EXPRESSIONS`).

A group is emitted where its last member was; nodes between its members that read none of its values
are emitted before it (a node that reads one closes the group first), so every value a member reads is
computed before the group runs.

Units and their C live one layer down, in :mod:`~mithril_backend_c.emitters.fused` (``Unit`` is
re-exported here); this module only decides the grouping.

Example (the ops BatchNorm2d + ReLU leave after a convolution become one unit)::

    units = plan(nodes, returned, ctx, emitters)
    [u.label for u in units if u.fused]   # ['conv2d @ conv1 + subtract, multiply, multiply, add, relu']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mithril.extend import Node, Value

from .context import Ctx
from .emitters import elementwise, nn
from .emitters.fused import Unit, pixel_strides

__all__ = ["CONV_ANCHORS", "Unit", "plan"]

CONV_ANCHORS = frozenset({"conv1d", "conv2d"})
"""Primitives that can take an elementwise epilogue."""


def _elementwise(ctx: Ctx, node: Node, emitters: Mapping[str, Callable[..., list[str]]]) -> bool:
    name = node.spec.name
    return (
        name in elementwise.EXPRESSIONS
        and emitters.get(name) is elementwise.EMITTERS[name]  # not overridden by another plugin
        and len(node.outputs) == 1
        and not node.spec.random
    )


def _conv_anchor(ctx: Ctx, node: Node, emitters: Mapping[str, Callable[..., list[str]]]) -> bool:
    name = node.spec.name
    if name not in CONV_ANCHORS or emitters.get(name) is not getattr(nn, name):
        return False
    values = [v for v in (*node.inputs.values(), node.output) if v is not None]
    return all(ctx.ct(v) == ctx.real for v in values)


@dataclass
class _Group:
    unit: Unit
    shape: tuple[int, ...]


def plan(
    nodes: Sequence[Node],
    returned: set[int],
    ctx: Ctx,
    emitters: Mapping[str, Callable[..., list[str]]],
    *,
    single_output: bool = False,
) -> list[Unit]:
    """The nodes as units in emission order (see the module docstring).

    ``single_output``: cut groups so that each one's last member is its only stored value (ggml builds a
    group as one custom op, which has one result)."""
    stored = _stored_values(nodes, returned)
    units: list[Unit] = []
    for entry in _grouped(nodes, ctx, emitters):
        if isinstance(entry, Unit):
            units.append(entry)
        else:
            units += _group_units(entry.unit, stored, single_output)
    return units


def _grouped(nodes: Sequence[Node], ctx: Ctx, emitters: Mapping[str, Callable[..., list[str]]]) -> list[Unit | _Group]:
    """The nodes in emission order: lone nodes as units, fusable chains as groups (each where its last
    member was: a node reading an open group's value either joins it or closes it first)."""
    order: list[Unit | _Group] = []
    open_groups: list[_Group] = []

    def close(group: _Group) -> None:
        open_groups.remove(group)
        order.append(group)

    for node in nodes:
        reads = {v.id for v in node.inputs.values() if v is not None}
        touching = [g for g in open_groups if reads & g.unit.produced]
        elementwise = _elementwise(ctx, node, emitters)
        target = None
        if elementwise:
            target = next((g for g in reversed(touching) if _accepts(ctx, g, node)), None)
        for group in touching:
            if group is not target:
                close(group)
        if target is not None:
            target.unit.nodes.append(node)
        elif elementwise or _conv_anchor(ctx, node, emitters):
            unit = Unit([node], anchor=None if elementwise else node)
            open_groups.append(_Group(unit, ctx.shape(node.output)))
        else:
            order.append(Unit([node]))
    for group in list(open_groups):
        close(group)
    return order


def _accepts(ctx: Ctx, group: _Group, node: Node) -> bool:
    """Whether elementwise ``node`` can join ``group``: the same output shape and, after a convolution,
    a float result and operands the epilogue can read per output pixel."""
    if ctx.shape(node.output) != group.shape:
        return False
    if group.unit.anchor is None:
        return True
    if ctx.ct(node.output) != ctx.real:
        return False
    inside = group.unit.produced
    return all(
        ctx.lit(v) is not None or pixel_strides(ctx.shape(v), group.shape) is not None
        for v in node.inputs.values()
        if v is not None and v.id not in inside
    )


def _stored_values(nodes: Sequence[Node], returned: set[int]) -> Callable[[list[Node]], list[Value]]:
    """A function giving the values of a group's ``members`` that must be written to memory: those the
    caller or a node outside the group reads."""
    consumers: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        for value in node.inputs.values():
            if value is not None:
                consumers.setdefault(value.id, []).append(i)
    position = {node.id: i for i, node in enumerate(nodes)}

    def stored(members: list[Node]) -> list[Value]:
        inside = {position[n.id] for n in members}
        return [
            value
            for node in members
            for value in node.outputs.values()
            if value.id in returned or any(c not in inside for c in consumers.get(value.id, []))
        ]

    return stored


def _group_units(group: Unit, stored: Callable[[list[Node]], list[Value]], single_output: bool) -> list[Unit]:
    """The units a group becomes: itself, or (``single_output``) the pieces ending at each value read
    outside it; a piece of one node (or, cut, with another result than its last) is node by node."""
    pieces = [group.nodes]
    if single_output:  # cut after every member read outside: each piece has its last result only
        cuts = {v.id for v in stored(group.nodes)}
        pieces, current = [], []
        for node in group.nodes:
            current.append(node)
            if node.output.id in cuts:
                pieces.append(current)
                current = []
        pieces += [current] if current else []
    units = []
    for piece in pieces:
        results = stored(piece)
        if len(piece) == 1 or (single_output and [v.id for v in results] != [piece[-1].output.id]):
            units += [Unit([node]) for node in piece]  # a lone node: its own emitter
        else:
            anchor = piece[0] if piece[0] is group.anchor else None
            units.append(Unit(piece, anchor=anchor, stored=results))
    return units
