"""Decomposition: a call of a primitive the backend does not implement, whose spec has a
``decomposition`` (a logical model of other primitives, see :class:`~mithril.primitives.PrimitiveSpec`),
is replaced by that model's nodes before anything else reads the graph, so the backward pass, the passes
and code generation see only primitives the backend has. C and GGML run ``lstm_recurrence`` this way.

Example:
    >>> import mithril as ml
    >>> from mithril.models import ManyToMany, TorchLSTMCell
    >>> model = ManyToMany(TorchLSTMCell, hidden_size=4, length=3)
    >>> shapes = {"input": [2, 3, 5]}
    >>> ml.compile(model, ml.NumpyBackend(), shapes=shapes).primitive_count < \\
    ...     ml.compile(model, ml.CBackend(), shapes=shapes).primitive_count      # doctest: +SKIP
    True
"""

from __future__ import annotations

from typing import Any

from ...errors import UnsupportedPrimitiveError
from ...primitives.registry import resolve_target
from ..flatten import flatten
from ..graph import Graph, Node, Value

__all__ = ["decompose"]


def decompose(graph: Graph, has_implementation: Any) -> int:
    """Splice in the decomposition of every call of a primitive for which ``has_implementation(name)``
    is false and whose spec has one (recursively: a decomposition may use decomposed primitives).
    Returns the number of calls replaced."""
    replaced = 0
    while True:
        todo = [n for n in graph.nodes if n.spec.decomposition is not None and not has_implementation(n.spec.name)]
        if not todo:
            return replaced
        graph.recheck()  # shapes as far as they are known now (a decomposition may depend on them)
        graph.solve()
        nodes, graph.nodes = graph.nodes, []
        for node in nodes:
            if node in todo:
                _splice(graph, node)
            else:
                graph.nodes.append(node)
        replaced += len(todo)
        graph.recheck()


def _splice(graph: Graph, node: Node) -> None:
    """Append the nodes of ``node``'s decomposition to ``graph``, reading ``node``'s inputs and writing
    its output values."""
    spec = node.spec
    where = f"{node.path or '<root>'} ({spec.name})"
    shapes = {key: None if value is None else value.find().shape.ints() for key, value in node.inputs.items()}
    model = resolve_target(spec.decomposition)(dict(node.attrs), shapes)
    flat = flatten(model, graph.registry)
    outer: dict[int, Value | None] = {}
    for key, value in flat.inputs.items():
        if key not in node.inputs:
            raise UnsupportedPrimitiveError(
                f"{where}: the decomposition of {spec.name!r} reads {key!r}, which is not one of the primitive's "
                f"inputs {tuple(node.inputs)}"
            )
        outer[value.id] = node.inputs[key]
    missing = set(node.outputs) - set(flat.outputs)
    if missing:
        raise UnsupportedPrimitiveError(
            f"{where}: the decomposition of {spec.name!r} lacks output(s) {sorted(missing)}"
        )
    for key, value in flat.outputs.items():
        if key in node.outputs:
            outer[value.id] = node.outputs[key]

    def mapped(value: Value) -> Value | None:
        if value.id not in outer:
            outer[value.id] = graph.constant(value.const) if value.is_constant else graph.new_value(kind=value.kind)
        return outer[value.id]

    for inner in flat.graph.nodes:
        inputs = {k: None if v is None else mapped(v) for k, v in inner.inputs.items()}
        outputs = {k: mapped(v) for k, v in inner.outputs.items()}
        path = ".".join(p for p in (node.path, inner.path) if p)
        graph.add_node(inner.spec, dict(inner.attrs), inputs, outputs, path)  # type: ignore[arg-type]
