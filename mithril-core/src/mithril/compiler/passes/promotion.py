"""Integer promotion: float-producing primitives (``divide``, ``exp``, ``mean``...) given int or bool
values compute in the backend's float dtype on every backend, as NumPy does, instead of each framework's
own default float."""

from __future__ import annotations

from ...primitives import shape_rules
from ..graph import Graph

__all__ = ["promote_integer_inputs"]


def promote_integer_inputs(graph: Graph) -> int:
    """Insert ``cast(dtype="float")`` before int/bool value inputs of primitives whose result is always
    float. Index-like inputs (``Embedding`` ids, ``cross_entropy`` targets, masks) are left alone: only
    the inputs a primitive differentiates through are values. Returns the number of casts added."""
    added = 0
    nodes, graph.nodes = graph.nodes, []
    for node in nodes:
        if node.spec.type_rule is shape_rules.float_result:
            for key in node.spec.differentiable_keys(node.attrs):
                value = node.inputs.get(key)
                if (
                    value is not None
                    and value.kind in ("int", "bool")
                    and value.kind not in node.spec.input_kinds.get(key, ())
                ):
                    node.inputs[key] = graph.emit("cast", value, dtype="float", path=node.path)  # type: ignore[assignment]
                    added += 1
        graph.nodes.append(node)
    return added
