"""VJP rules for the per-element losses (``input`` broadcasts against ``target`` where the spec allows)."""

from __future__ import annotations

from ..context import Cotangents, GradContext
from ._common import unbroadcast


def cross_entropy(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.cross_entropy_grad(ctx.cotangent, ctx["input"], ctx["target"], **ctx.attrs)}


def binary_cross_entropy(ctx: GradContext) -> Cotangents:
    """logits x: ``g * (sigmoid(x) - t)``; probabilities p: ``g * (p - t) / max(p (1 - p), eps)``."""
    g, x, t = ctx.cotangent, ctx["input"], ctx["target"]
    if ctx.attrs["input_type"] == "logits":
        return unbroadcast(ctx, input=lambda: g * (ctx.ops.sigmoid(x) - t))
    return unbroadcast(ctx, input=lambda: g * (x - t) / ctx.ops.maximum(x * (1.0 - x), ctx.attrs["eps"]))


def squared_error(ctx: GradContext) -> Cotangents:
    g, x, t = ctx.cotangent, ctx["input"], ctx["target"]
    d = g * 2.0 * (x - t)
    return unbroadcast(ctx, input=lambda: d, target=lambda: -d)


def absolute_error(ctx: GradContext) -> Cotangents:
    g, x, t = ctx.cotangent, ctx["input"], ctx["target"]
    d = g * ctx.ops.sign(x - t)
    return unbroadcast(ctx, input=lambda: d, target=lambda: -d)


RULES = {
    "cross_entropy": cross_entropy,
    "binary_cross_entropy": binary_cross_entropy,
    "squared_error": squared_error,
    "absolute_error": absolute_error,
}
