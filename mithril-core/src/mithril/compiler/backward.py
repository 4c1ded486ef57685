"""Symbolic reverse mode: append the backward pass to the graph using the registered VJP rules.

Manual-gradient backends (NumPy, C, GGML) evaluate the result like any other graph, so one set of
rules serves all of them; a backend may register a fused rule that overrides the generic one.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UnsupportedPrimitiveError
from ..gradients.context import GradContext
from .graph import Graph, Value

__all__ = ["build_backward"]


def build_backward(
    graph: Graph, wrt: Mapping[str, Value], cotangents: Mapping[str, tuple[Value, Value]], backend_name: str | None
) -> dict[str, Value]:
    """Emit nodes computing d(sum_k <cotangent_k, output_k>)/d(wrt) and return them by name.

    Args:
        wrt: parameter name -> forward value.
        cotangents: output name -> (forward output value, cotangent input value).
    """
    forward = list(graph.nodes)
    # values that depend on a parameter (only they need cotangents)
    active: set[int] = {v.id for v in wrt.values()}
    for node in forward:
        if any(v is not None and v.id in active for v in node.inputs.values()):
            active.update(out.id for out in node.outputs.values())

    grads: dict[int, Value] = {}

    def accumulate(value: Value, contribution: Value) -> None:
        existing = grads.get(value.id)
        grads[value.id] = contribution if existing is None else graph.emit("add", existing, contribution, path="grad")  # type: ignore[assignment]

    for output, cotangent in cotangents.values():
        if output.id in active:
            accumulate(output, cotangent)

    for node in reversed(forward):
        cots = {key: grads.get(out.id) for key, out in node.outputs.items()}
        if all(c is None for c in cots.values()):
            continue
        wanted = [
            k
            for k in node.spec.differentiable_keys(node.attrs)
            if node.inputs.get(k) is not None and node.inputs[k].id in active  # type: ignore[union-attr]
        ]
        if not wanted:
            continue
        rule = graph.registry.gradient(node.spec.name, backend_name)
        if rule is None:
            raise UnsupportedPrimitiveError(
                f"{node.path or '<root>'}: primitive {node.spec.name!r} has no gradient rule, so gradients cannot "
                f"flow through it on backend {backend_name!r}. Mark its inputs non-differentiable, compile with "
                "inference=True, or use an autograd backend (JAX, PyTorch, MLX)."
            )
        result = rule(GradContext(graph, node, cots))
        for key in wanted:
            contribution = result.get(key)
            if contribution is not None:
                accumulate(node.inputs[key], contribution)  # type: ignore[arg-type]

    out: dict[str, Value] = {}
    for name, value in wrt.items():
        grad = grads.get(value.id)
        out[name] = grad if grad is not None else graph.emit("zeros_like", value, path="grad")  # type: ignore[assignment]
    graph.solve()
    return out
