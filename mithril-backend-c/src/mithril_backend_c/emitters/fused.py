"""Emitting fused units: the :class:`Unit` that :func:`~mithril_backend_c.fusion.plan` groups nodes into,
and the C of its elementwise chain (:func:`chain_lines`), alone (:func:`elementwise_group`) or as a
convolution's epilogue (:func:`~mithril_backend_c.emitters.nn.conv_forward` reads operands at
:func:`pixel_strides`).

Each member computes the C expression its own emitter would (:data:`~.elementwise.EXPRESSIONS`), rounded
to its own type, in the same order, so fusion never changes the arithmetic. This module is not an op
table: none of its names is a primitive's emitter.

Example (a unit of ``add`` then ``relu`` on ``[4, 8]`` values; the sum stays in a register)::

    lines = elementwise_group(ctx, Unit([add_node, relu_node], stored=[relu_node.output]))
    # for (long i1 = lo; i1 < hi; i1++) { float e1 = (float)(p1[i1] + p2[i1]); ... p0[i1] = e2; }
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mithril.extend import Node, Value

from ..context import Ctx, broadcast_strides, contiguous_strides
from .elementwise import EXPRESSIONS

__all__ = ["Unit", "chain_lines", "elementwise_group", "pixel_strides"]


@dataclass
class Unit:
    """Nodes emitted as one block: a single node, or a fused group (``anchor`` is its convolution).

    >>> Unit([]).fused
    False
    """

    nodes: list[Node]
    anchor: Node | None = None
    stored: list[Value] = field(default_factory=list)

    @property
    def fused(self) -> bool:
        return len(self.nodes) > 1

    @property
    def members(self) -> list[Node]:
        """The elementwise nodes (all nodes but the anchor)."""
        return self.nodes[1:] if self.anchor is not None else self.nodes

    @property
    def produced(self) -> set[int]:
        return {v.id for n in self.nodes for v in n.outputs.values()}

    @property
    def inputs(self) -> list[Value]:
        """Values read by the unit and computed outside it (in first-use order, each once)."""
        inside, seen, result = self.produced, set(), []
        for node in self.nodes:
            for value in node.inputs.values():
                if value is not None and value.id not in inside and value.id not in seen:
                    seen.add(value.id)
                    result.append(value)
        return result

    @property
    def label(self) -> str:
        head = self.nodes[0]
        text = f"{head.spec.name}{' @ ' + head.path if head.path else ''}"
        if self.fused:
            text += " + " + ", ".join(n.spec.name for n in self.nodes[1:])
        return text


def pixel_strides(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, int, int] | None:
    """Element strides ``(batch, channel, pixel)`` reading ``shape`` broadcast to a convolution output
    ``[N, O, *spatial]``, or ``None`` when its spatial axes cannot be read as one flat pixel axis
    (e.g. broadcast along the height only).

    >>> pixel_strides((4, 1, 1), (1, 4, 3, 3)), pixel_strides((1, 4, 3, 3), (1, 4, 3, 3))
    ((0, 1, 0), (36, 9, 1))
    """
    strides = broadcast_strides(shape, out_shape)
    spatial = [(s, n) for s, n in zip(strides[2:], out_shape[2:], strict=True) if n != 1]
    if not spatial:
        return strides[0], strides[1], 0
    pixel = expected = spatial[-1][0]
    for s, n in reversed(spatial):
        if s != expected:
            return None
        expected *= n
    return strides[0], strides[1], pixel


def chain_lines(ctx: Ctx, unit: Unit, index_of: Callable[[Value], str], env: dict[int, str] | None = None) -> list[str]:
    """C statements computing the unit's elementwise members for one element: each result goes to a
    local (``env``: value id -> C expression, pre-filled with e.g. the convolution's value), stored ones
    also to memory at ``index_of(value)``; inputs from outside are read at ``index_of(value)``, each once,
    into a local before the expression that uses it."""
    env = dict(env or {})
    stored = {v.id for v in unit.stored}
    lines = []
    for node in unit.members:
        inputs, expr = EXPRESSIONS[node.spec.name](ctx, node)
        for value in inputs:
            # unconditional loads (each input read once): GCC 12 -O3 -march=native vectorised a load inside
            # '?:' or '||' as a masked load at the wrong address; the root fix is toolchain.flags()'s
            # -fno-tree-loop-if-convert, which this form alone did not replace (where's fused backward)
            if value.id not in env:
                env[value.id] = ctx.fresh("in")
                lines.append(f"{ctx.ct(value)} {env[value.id]} = {ctx.elem(value, index_of(value))};")
        args = [env[v.id] for v in inputs]
        ct = ctx.ct(node.output)
        name = ctx.fresh("e")
        lines.append(f"{ct} {name} = ({ct})({expr(*args)});")
        env[node.output.id] = name
        if node.output.id in stored:
            lines.append(f"{ctx.p(node.output)}[{index_of(node.output)}] = {name};")
    return lines


def elementwise_group(ctx: Ctx, unit: Unit) -> list[str]:
    """One loop nest over the group's shape computing every member (parallel when large)."""
    shape = ctx.shape(unit.nodes[-1].output)
    external = [v for v in unit.inputs if ctx.lit(v) is None]
    operands = [(0, contiguous_strides(shape)) for _ in unit.stored]
    operands += [(0, broadcast_strides(ctx.shape(v), shape)) for v in external]
    keys = [v.id for v in unit.stored] + [v.id for v in external]

    def body(idx: list[str]) -> list[str]:
        where = dict(zip(keys, idx, strict=True))
        return chain_lines(ctx, unit, lambda v: where.get(v.id, "0"))

    return ctx.parallel_loops(shape, operands, body)
