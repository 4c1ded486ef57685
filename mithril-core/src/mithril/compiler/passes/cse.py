"""Common-subexpression elimination: identical primitive calls on identical inputs are computed once."""

from __future__ import annotations

from typing import Any

from ..graph import Graph, Value

__all__ = ["eliminate_common_subexpressions"]


def _attr_key(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_attr_key(v) for v in value))
    if isinstance(value, dict):
        return tuple(sorted((k, _attr_key(v)) for k, v in value.items()))
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    try:
        hash(value)
        return value
    except TypeError:
        return ("id", id(value))


def _scalar_key(value: Value) -> Any:
    if value.is_constant and isinstance(value.const, (bool, int, float)):
        return ("const", type(value.const).__name__, value.const)
    return value.id


def eliminate_common_subexpressions(graph: Graph, outputs: dict[str, Value]) -> int:
    """Merge duplicate nodes; rewires consumers and named outputs. Returns the number removed."""
    seen: dict[Any, Any] = {}
    replace: dict[int, Value] = {}
    kept = []
    for node in graph.nodes:
        for key, value in node.inputs.items():
            if value is not None and value.id in replace:
                node.inputs[key] = replace[value.id]
        if node.spec.random:
            kept.append(node)
            continue
        signature = (
            node.spec.name,
            tuple((k, None if v is None else _scalar_key(v)) for k, v in node.inputs.items()),
            _attr_key(node.attrs),
        )
        twin = seen.get(signature)
        if twin is None:
            seen[signature] = node
            kept.append(node)
            continue
        for key, out in node.outputs.items():
            replace[out.id] = twin.outputs[key]
    for name, value in list(outputs.items()):
        if value.id in replace:
            outputs[name] = replace[value.id]
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept
    return removed
