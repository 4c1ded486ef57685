"""Dead-node pruning: keep only nodes that the requested outputs depend on."""

from __future__ import annotations

from collections.abc import Iterable

from ..graph import Graph, Value

__all__ = ["prune"]


def prune(graph: Graph, needed: Iterable[Value]) -> int:
    """Drop nodes none of whose outputs reach ``needed``; returns the number removed."""
    live = {v.id for v in needed}
    kept = []
    for node in reversed(graph.nodes):
        if any(out.id in live for out in node.outputs.values()):
            kept.append(node)
            live.update(v.id for v in node.inputs.values() if v is not None)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    return removed
