"""Host values: shape arithmetic runs in Python, or is folded when the shapes are static.

A primitive that takes a run-time shape or bound (``reshape_to``, ``randn_of``, ``arange_between``: see
:attr:`~mithril.primitives.spec.PrimitiveSpec.host_inputs`) needs Python ints, also under ``jax.jit`` and
``torch.compile``. This pass finds the calls computing them (``shape``/``size`` of a tensor, ``index`` of
that, integer arithmetic on them, ``to_tuple``: the names in
:data:`~mithril.primitives.host.HOST_OPERATIONS`) and

1. folds them where the shapes are known when compiling (a static input shape gives a constant tuple);
2. turns a variant whose host inputs all folded into its base primitive with those values as attributes
   (``reshape_to(x, (6, 4))`` becomes ``reshape(x, shape=(6, 4))``), so backends without host code (C,
   GGML) run models whose shapes are static;
3. names the rest ``host_<primitive>``: generated code calls the Python operation instead of the
   backend's array operation (``host_multiply(B, L)`` multiplies two Python ints).

Calls whose results nothing host-side reads stay array operations, as before.

Example:
    >>> import mithril as ml
    >>> from mithril.models import IOKey, Linear, Model
    >>> model = Model()
    >>> model |= Linear(8)(input=IOKey("input"), output="h")
    >>> B, L = model.h.shape[0], model.h.shape[1]
    >>> model |= Linear(2)(input=model.h.reshape((B * L, 8)), output=IOKey("flat"))
    >>> pm = ml.compile(model, ml.NumpyBackend(), jit=False)
    >>> "reshape(h, shape=(-1, 8))" in pm.source  # B * L never computed: no host code at all
    True
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...primitives.host import HOST_OPERATIONS, HOST_PREFIX, as_host_value, base_attributes
from ..graph import Graph, Node, Value

__all__ = ["place_on_host", "positions_from_shapes"]

_FROM_SHAPES = frozenset({"shape", "size"})


def place_on_host(graph: Graph) -> int:
    """Fold, specialise and rename the host calls of ``graph`` (see the module doc); returns how many calls
    run on the host."""
    host = _host_nodes(graph)
    kept: list[Node] = []
    for node in graph.nodes:
        if node.id in host and _fold(node):
            continue
        kept.append(node)
    graph.nodes = kept
    specialised = False
    for node in graph.nodes:
        if node.spec.variant_of is not None and all(_is_constant(node.inputs.get(k)) for k in node.spec.host_inputs):
            _specialise(graph, node)
            specialised = True
        elif node.id in host:
            node.spec = replace(node.spec, name=HOST_PREFIX + node.spec.name)
    if specialised:  # the base primitives know their output dims now: so do the calls after them
        for node in graph.nodes:
            graph.reinfer(node)
        graph.solve()
    return sum(node.spec.name.startswith(HOST_PREFIX) for node in graph.nodes)


def positions_from_shapes(graph: Graph) -> int:
    """``arange(0, x.shape[i], 1)`` with its bound computed from a shape (``Arange().connect(stop=n)`` where
    ``n`` was connected to ``x.shape[i]``) becomes ``positions(x, axis=i)``: the same values, and shape
    inference then knows the result's length *is* that dim of ``x`` (T5's relative positions line up with
    the scores they are added to). Returns how many calls were rewritten."""
    producer = {v.id: node for node in graph.nodes for v in node.outputs.values()}
    rewritten = 0
    for node in graph.nodes:
        if node.spec.name != "arange_between":
            continue
        start, stop, step = (node.inputs.get(k) for k in ("start", "stop", "step"))
        if not (_is_constant(start) and _is_constant(step) and stop is not None):
            continue
        if as_host_value(start.const) != 0 or as_host_value(step.const) != 1:  # type: ignore[union-attr]
            continue
        index = producer.get(stop.id)
        shape = producer.get(index.inputs["input"].id) if index is not None and index.spec.name == "index" else None  # type: ignore[union-attr]
        if shape is None or shape.spec.name != "shape" or not isinstance(index.attrs["key"], int):  # type: ignore[union-attr]
            continue
        node.spec = graph.registry.primitive("positions")
        node.attrs = {"axis": index.attrs["key"]}  # type: ignore[union-attr]
        node.inputs = {"input": shape.inputs["input"]}
        graph.reinfer(node)
        rewritten += 1
    return rewritten


def _host_nodes(graph: Graph) -> set[int]:
    """Ids of the calls to run on the host: those computing a value some host input reads, through calls
    whose inputs are host values or constants."""
    producer = {v.id: node for node in graph.nodes for v in node.outputs.values()}
    hostable: set[int] = set()
    for node in graph.nodes:  # topological order: a call's producers come first
        if node.spec.name in _FROM_SHAPES or (
            node.spec.name in HOST_OPERATIONS
            and all(
                v is None or _is_constant(v) or (v.id in producer and producer[v.id].id in hostable)
                for v in node.inputs.values()
            )
        ):
            hostable.add(node.id)
    wanted: set[int] = set()
    pending = [
        v for node in graph.nodes for k, v in node.inputs.items() if k in node.spec.host_inputs and v is not None
    ]
    while pending:
        value = pending.pop()
        source = producer.get(value.id)
        if source is None or source.id not in hostable or source.id in wanted:
            continue
        wanted.add(source.id)
        if source.spec.name not in _FROM_SHAPES:
            pending.extend(v for v in source.inputs.values() if v is not None)
    return wanted


def _is_constant(value: Value | None) -> bool:
    return value is not None and value.is_constant and value.producer is None


def _fold(node: Node) -> bool:
    """Give the call's output its value when it is known now; ``True`` when it was folded."""
    name = node.spec.name
    if name in _FROM_SHAPES:
        dims = node.inputs["input"].shape.dims()  # type: ignore[union-attr]
        sizes = None if dims is None else [d.value for d in dims]
        if sizes is None or None in sizes:
            return False
        result: Any = tuple(sizes) if name == "shape" else _product(sizes)
    elif all(v is None or _is_constant(v) for v in node.inputs.values()):
        args = [None if v is None else as_host_value(v.const) for v in node.inputs.values()]
        result = HOST_OPERATIONS[name](*args, **node.attrs)
    else:
        return False
    out = node.outputs["output"]
    out.const, out.producer = result, None
    return True


def _specialise(graph: Graph, node: Node) -> None:
    """``reshape_to(x, <constant shape>)`` -> ``reshape(x, shape=...)``: the base primitive, its run-time
    attributes now known."""
    spec = node.spec
    base = graph.registry.primitive(spec.variant_of)
    attrs = base_attributes(spec, base, node.attrs, {k: node.inputs[k].const for k in spec.host_inputs})  # type: ignore[union-attr]
    node.spec = base
    node.attrs = base.resolve_attributes(attrs, node.path or spec.name)
    node.inputs = {k: v for k, v in node.inputs.items() if k not in spec.host_inputs}


def _product(sizes: list[Any]) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total
