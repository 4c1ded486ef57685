"""VJP rules for elementwise unary and broadcasting binary primitives.

Choices (documented once here):
- ``minimum``/``maximum``: on ties the cotangent is split half to each side (as JAX and PyTorch do).
- ``abs``: ``g * sign(x)``, so the gradient at 0 is 0. ``relu``/``leaky_relu``: the gradient at 0 is the
  left-hand one (0 / ``slope``).
- ``power``: d/d right = ``g * out * log(left)`` where ``left > 0`` and 0 elsewhere (a negative base has no
  real log; at 0 the limit is taken as 0, like JAX). d/d left = ``g * right * left ** (right - 1)``.
- ``nan_to_num``: the cotangent passes where the value was kept (``output == input``), 0 where a nan or
  an infinity was replaced.
- ``cast``: float -> float casts pass the cotangent through (cast back to float); casts to or from
  int/bool have no gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ...compiler.graph import Value
from ..context import Cotangents, GradContext
from ._common import unbroadcast

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# -- unary -----------------------------------------------------------------------------------------
def neg(ctx: GradContext) -> Cotangents:
    return {"input": -ctx.cotangent}


def abs(ctx: GradContext) -> Cotangents:  # shadows the builtin: named after the primitive
    return {"input": ctx.cotangent * ctx.ops.sign(ctx["input"])}


def exp(ctx: GradContext) -> Cotangents:
    return {"input": ctx.cotangent * ctx.output}


def log(ctx: GradContext) -> Cotangents:
    return {"input": ctx.cotangent / ctx["input"]}


def log1p(ctx: GradContext) -> Cotangents:
    return {"input": ctx.cotangent / (ctx["input"] + 1.0)}


def sqrt(ctx: GradContext) -> Cotangents:
    return {"input": ctx.cotangent * 0.5 / ctx.output}


def rsqrt(ctx: GradContext) -> Cotangents:  # d x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
    out = ctx.output
    return {"input": ctx.cotangent * -0.5 * out * out * out}


def square(ctx: GradContext) -> Cotangents:
    return {"input": ctx.cotangent * 2.0 * ctx["input"]}


def sin(ctx: GradContext) -> Cotangents:
    return {"input": ctx.cotangent * ctx.ops.cos(ctx["input"])}


def cos(ctx: GradContext) -> Cotangents:
    return {"input": -ctx.cotangent * ctx.ops.sin(ctx["input"])}


def tanh(ctx: GradContext) -> Cotangents:
    out = ctx.output
    return {"input": ctx.cotangent * (1.0 - out * out)}


def sigmoid(ctx: GradContext) -> Cotangents:
    out = ctx.output
    return {"input": ctx.cotangent * out * (1.0 - out)}


def relu(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.where(ctx.ops.greater(ctx["input"], 0.0), ctx.cotangent, 0.0)}


def leaky_relu(ctx: GradContext) -> Cotangents:
    g = ctx.cotangent
    return {"input": ctx.ops.where(ctx.ops.greater(ctx["input"], 0.0), g, g * ctx.attrs["slope"])}


def gelu(ctx: GradContext) -> Cotangents:
    g, x = ctx.cotangent, ctx["input"]
    if ctx.attrs["approximate"]:  # 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3)
        t = ctx.ops.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
        du = _SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
        return {"input": g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)}
    cdf = 0.5 * (1.0 + ctx.ops.erf(x * _INV_SQRT_2))  # Phi(x)
    pdf = _INV_SQRT_2PI * ctx.ops.exp(-0.5 * x * x)  # phi(x)
    return {"input": g * (cdf + x * pdf)}


def softplus(ctx: GradContext) -> Cotangents:
    return {"input": ctx.cotangent * ctx.ops.sigmoid(ctx["input"])}


def erf(ctx: GradContext) -> Cotangents:
    x = ctx["input"]
    return {"input": ctx.cotangent * _TWO_OVER_SQRT_PI * ctx.ops.exp(-(x * x))}


def nan_to_num(ctx: GradContext) -> Cotangents:
    kept = ctx.ops.equal(ctx.output, ctx["input"])
    return {"input": ctx.ops.where(kept, ctx.cotangent, 0.0)}


def cast(ctx: GradContext) -> Cotangents:
    if ctx["input"].kind != "float" or ctx.output.kind != "float":
        return {"input": None}
    return {"input": ctx.ops.cast(ctx.cotangent, dtype="float")}


def cast_like(ctx: GradContext) -> Cotangents:
    if ctx["input"].kind != "float" or ctx.output.kind != "float":
        return {"input": None}
    return {"input": ctx.ops.cast_like(ctx.cotangent, ctx["input"])}


# -- binary (broadcasting: each cotangent is summed back to its input's shape) ---------------------
def add(ctx: GradContext) -> Cotangents:
    g = ctx.cotangent
    return unbroadcast(ctx, left=lambda: g, right=lambda: g)


def subtract(ctx: GradContext) -> Cotangents:
    g = ctx.cotangent
    grads = unbroadcast(ctx, left=lambda: g, right=lambda: g)
    if grads["right"] is not None:  # negate after reducing: a broadcast right side is the smaller tensor
        grads["right"] = -grads["right"]
    return grads


def multiply(ctx: GradContext) -> Cotangents:
    g, left, right = ctx.cotangent, ctx["left"], ctx["right"]
    return unbroadcast(ctx, left=lambda: g * right, right=lambda: g * left)


def divide(ctx: GradContext) -> Cotangents:
    g, right = ctx.cotangent, ctx["right"]
    return unbroadcast(ctx, left=lambda: g / right, right=lambda: -g * ctx.output / right)


def power(ctx: GradContext) -> Cotangents:
    g, left, right = ctx.cotangent, ctx["left"], ctx["right"]

    def d_right() -> Value:
        positive = ctx.ops.greater(left, 0.0)
        safe_log = ctx.ops.log(ctx.ops.where(positive, left, 1.0))  # 0 where left <= 0
        d: Value = g * ctx.output * safe_log
        return d

    return unbroadcast(ctx, left=lambda: g * right * left ** (right - 1), right=d_right)


def _extremum(ctx: GradContext, wins: Callable[[Value, Value], Value]) -> Cotangents:
    """``wins(left, right)`` is where left is strictly chosen; ties split the cotangent in half."""
    g, left, right = ctx.cotangent, ctx["left"], ctx["right"]
    share = ctx.ops.where(wins(left, right), 1.0, ctx.ops.where(ctx.ops.equal(left, right), 0.5, 0.0))
    return unbroadcast(ctx, left=lambda: g * share, right=lambda: g * (1.0 - share))


def minimum(ctx: GradContext) -> Cotangents:
    return _extremum(ctx, ctx.ops.less)


def maximum(ctx: GradContext) -> Cotangents:
    return _extremum(ctx, ctx.ops.greater)


def where(ctx: GradContext) -> Cotangents:
    g, cond = ctx.cotangent, ctx["condition"]
    return unbroadcast(ctx, left=lambda: ctx.ops.where(cond, g, 0.0), right=lambda: ctx.ops.where(cond, 0.0, g))


RULES = {
    rule.__name__: rule
    for rule in (
        neg, abs, exp, log, log1p, sqrt, rsqrt, square, sin, cos, tanh, sigmoid, relu, leaky_relu, gelu, softplus,
        erf, nan_to_num, cast, cast_like, add, subtract, multiply, divide, power, minimum, maximum, where,
    )
}
