"""VJP rules for reductions and the softmax family.

Choices (documented once here):
- ``max``/``min``: the cotangent is shared equally by all elements equal to the extremum (as JAX does):
  ``g * (x == out) / count(x == out)``.
- ``prod``: ``g * out / x``, which assumes no zero in the reduced input (a zero gives nan/inf).
- ``var``: ``g * 2 (x - mean) / (N - correction)``.
"""

from __future__ import annotations

from ..context import Cotangents, GradContext
from ._common import as_float, reduced_axes, reduced_count, unreduce


def sum(ctx: GradContext) -> Cotangents:  # shadows the builtin: named after the primitive
    return {"input": ctx.ops.broadcast_to_like(unreduce(ctx, ctx.cotangent), ctx["input"])}


def mean(ctx: GradContext) -> Cotangents:
    g = unreduce(ctx, ctx.cotangent) / reduced_count(ctx)
    return {"input": ctx.ops.broadcast_to_like(g, ctx["input"])}


def _extremum(ctx: GradContext) -> Cotangents:
    x = ctx["input"]
    hit = as_float(ctx, ctx.ops.equal(x, unreduce(ctx, ctx.output)))  # 1.0 at every extremum
    count = ctx.ops.sum(hit, axis=reduced_axes(ctx), keepdim=True)
    return {"input": hit * (unreduce(ctx, ctx.cotangent) / count)}


def max(ctx: GradContext) -> Cotangents:
    return _extremum(ctx)


def min(ctx: GradContext) -> Cotangents:
    return _extremum(ctx)


def prod(ctx: GradContext) -> Cotangents:
    x = ctx["input"]
    return {"input": unreduce(ctx, ctx.cotangent) * unreduce(ctx, ctx.output) / x}


def var(ctx: GradContext) -> Cotangents:
    x = ctx["input"]
    centred = x - ctx.ops.mean(x, axis=ctx.attrs["axis"], keepdim=True)
    return {"input": unreduce(ctx, ctx.cotangent) * 2.0 * centred / (reduced_count(ctx) - ctx.attrs["correction"])}


def softmax(ctx: GradContext) -> Cotangents:
    g, y, axis = ctx.cotangent, ctx.output, ctx.attrs["axis"]
    return {"input": y * (g - ctx.ops.sum(g * y, axis=axis, keepdim=True))}


def log_softmax(ctx: GradContext) -> Cotangents:
    g, y, axis = ctx.cotangent, ctx.output, ctx.attrs["axis"]
    return {"input": g - ctx.ops.exp(y) * ctx.ops.sum(g, axis=axis, keepdim=True)}


RULES = {rule.__name__: rule for rule in (sum, mean, max, min, prod, var, softmax, log_softmax)}
