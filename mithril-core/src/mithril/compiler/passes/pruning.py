"""Dead-node pruning: keep only nodes that the requested outputs depend on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..graph import Graph, Node, Value

__all__ = ["live_nodes", "prune"]


def live_nodes(nodes: Sequence[Node], needed: Iterable[Value]) -> list[Node]:
    """The nodes (in order) that the ``needed`` values depend on."""
    live = {v.id for v in needed}
    kept = []
    for node in reversed(nodes):
        if any(out.id in live for out in node.outputs.values()):
            kept.append(node)
            live.update(v.id for v in node.inputs.values() if v is not None)
    return kept[::-1]


def prune(graph: Graph, needed: Iterable[Value]) -> int:
    """Drop nodes none of whose outputs reach ``needed``; returns the number removed."""
    kept = live_nodes(graph.nodes, needed)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept
    return removed
