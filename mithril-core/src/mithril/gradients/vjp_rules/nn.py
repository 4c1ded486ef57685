"""VJP rules for convolution, pooling, embedding and attention (through the gradient helper primitives)."""

from __future__ import annotations

import math

from ...compiler.graph import Value
from ..context import Cotangents, GradContext, VjpRule
from ._common import wants


def _conv(n: int, grad_input: str, grad_weight: str) -> VjpRule:
    def rule(ctx: GradContext) -> Cotangents:
        g, x, w = ctx.cotangent, ctx["input"], ctx["weight"]
        attrs = ctx.attrs
        grads = {}
        if wants(ctx, "input"):
            grads["input"] = getattr(ctx.ops, grad_input)(g, w, x, **attrs)
        if wants(ctx, "weight"):
            grads["weight"] = getattr(ctx.ops, grad_weight)(g, x, w, **attrs)
        if wants(ctx, "bias"):  # sum over batch and spatial axes: [N, O, *S] -> [O]
            grads["bias"] = ctx.ops.sum(g, axis=(0, *range(2, n + 2)))
        return grads

    rule.__name__ = f"conv{n}d"
    return rule


conv1d = _conv(1, "conv1d_grad_input", "conv1d_grad_weight")
conv2d = _conv(2, "conv2d_grad_input", "conv2d_grad_weight")


def max_pool2d(ctx: GradContext) -> Cotangents:
    """Ties inside a window go to the first maximum (the ``max_pool2d_grad`` helper's rule)."""
    return {"input": ctx.ops.max_pool2d_grad(ctx.cotangent, ctx["input"], **ctx.attrs)}


def avg_pool2d(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.avg_pool2d_grad(ctx.cotangent, ctx["input"], **ctx.attrs)}


def embedding(ctx: GradContext) -> Cotangents:
    """Scatter-add the cotangent rows into the table; the integer indices get no gradient."""
    return {"weight": ctx.ops.embedding_grad(ctx.cotangent, ctx["input"], ctx["weight"])}


def _attention_scale(ctx: GradContext) -> float | Value:
    """The ``scale`` attribute, or ``1/sqrt(d)`` with ``d`` the last dim of the query (static when known)."""
    if ctx.attrs["scale"] is not None:
        return float(ctx.attrs["scale"])
    q = ctx["query"]
    dims = q.shape.ints()
    if dims and dims[-1] is not None:
        return 1.0 / math.sqrt(dims[-1])
    d = ctx.ops.index(ctx.ops.shape(q), key=-1)
    scale: Value = ctx.ops.rsqrt(ctx.ops.cast(d, dtype="float"))
    return scale


def scaled_dot_product_attention(ctx: GradContext) -> Cotangents:
    """Recompute ``P = softmax(q k^T * scale + mask)`` and backpropagate through ``P @ v``; an additive
    (float) mask gets the scores' gradient, summed over the axes it was broadcast along (a bool mask gets
    none). Shapes: q ``[..., Lq, d]``, k ``[..., Lk, d]``, v ``[..., Lk, dv]``, g ``[..., Lq, dv]``."""
    g, q, k, v = ctx.cotangent, ctx["query"], ctx["key"], ctx["value"]
    ops = ctx.ops
    p = ops.attention_weights(q, k, ctx.inputs["mask"], causal=ctx.attrs["causal"], scale=ctx.attrs["scale"])
    grads = {}
    if wants(ctx, "value"):
        grads["value"] = ops.swapaxes(p) @ g  # [..., Lk, Lq] @ [..., Lq, dv] -> [..., Lk, dv]
    if wants(ctx, "query") or wants(ctx, "key") or wants(ctx, "mask"):
        dp = g @ ops.swapaxes(v)  # [..., Lq, dv] @ [..., dv, Lk] -> [..., Lq, Lk]
        ds = p * (dp - ops.sum(dp * p, axis=-1, keepdim=True))  # softmax VJP on the scores
        if wants(ctx, "mask"):
            grads["mask"] = ops.sum_to_like(ds, ctx["mask"])
        scale = _attention_scale(ctx)
        if wants(ctx, "query"):
            grads["query"] = ds @ k * scale  # [..., Lq, Lk] @ [..., Lk, d] -> [..., Lq, d]
        if wants(ctx, "key"):
            grads["key"] = ops.swapaxes(ds) @ q * scale  # [..., Lk, Lq] @ [..., Lq, d] -> [..., Lk, d]
    return grads


RULES = {
    "conv1d": conv1d,
    "conv2d": conv2d,
    "max_pool2d": max_pool2d,
    "avg_pool2d": avg_pool2d,
    "embedding": embedding,
    "scaled_dot_product_attention": scaled_dot_product_attention,
}
