"""Constant folding: evaluate nodes whose inputs are all constants, once, at compile time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..graph import Graph

__all__ = ["fold_constants"]


def fold_constants(graph: Graph, evaluate: Callable[[str, list[Any], dict[str, Any]], Any]) -> int:
    """Replace constant-input nodes by their values; returns how many nodes were folded.

    ``evaluate(primitive, inputs, attrs)`` runs one primitive (the backend's ``evaluate_constant``); when
    it returns ``NotImplemented`` the node is kept. Random primitives are never folded.
    """
    kept = []
    folded = 0
    for node in graph.nodes:
        inputs = list(node.inputs.values())
        if node.spec.random or node.spec.name == "lambda" or not all(v is None or v.is_constant for v in inputs):
            kept.append(node)
            continue
        result = evaluate(node.spec.name, [None if v is None else v.const for v in inputs], node.attrs)
        if result is NotImplemented:
            kept.append(node)
            continue
        values = result if node.spec.returns_tuple else (result,)
        # Only arithmetic on Python numbers stays weakly typed; a creation primitive (no inputs, e.g.
        # ``ones(shape=())``) makes an array of the backend's dtype even when it is 0-d.
        numbers = any(v is not None for v in inputs) and all(v is None or _is_number(v.const) for v in inputs)
        for out, value in zip(node.outputs.values(), values, strict=True):
            out.const = _as_number(value) if numbers else value
            out.producer = None
        folded += 1
    graph.nodes = kept
    return folded


def _is_number(value: Any) -> bool:
    # exact types: NumPy's float64 scalar subclasses float but carries a dtype, as a 0-d array does
    return type(value) in (bool, int, float)


def _as_number(value: Any) -> Any:
    """A 0-d result computed from Python numbers only, as a Python number: weakly typed like the literals it
    came from, so a folded ``1.0 - lr * weight_decay`` scales a float32 tensor without promoting it to
    float64 (NumPy promotes by a 0-d array's dtype, never by a Python float's)."""
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        return value.item()
    return value
