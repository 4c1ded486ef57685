"""Elementwise unary and broadcasting binary primitives, once for every array namespace.

A primitive the namespace has under the same meaning is the namespace's function itself; the others
are composed from namespace functions bound when the table is built.

Example:
    >>> import numpy as np
    >>> from mithril.backends.array_api import Binding
    >>> ops = build(Binding(np, {}))
    >>> ops["softplus"](np.array([0.0])).round(4).tolist(), ops["equal"] is np.equal
    ([0.6931], True)
"""

from __future__ import annotations

import math
from typing import Any

from ...primitives import uses_backend
from ._binding import Binding, Impl

__all__ = ["build", "sign_keeping_nan"]

_DIRECT = {
    "neg": "negative", "abs": "abs", "sign": "sign", "exp": "exp", "log": "log", "log1p": "log1p",
    "sqrt": "sqrt", "square": "square", "sin": "sin", "cos": "cos", "tanh": "tanh", "floor": "floor",
    "isnan": "isnan", "nan_to_num": "nan_to_num", "logical_not": "logical_not",
    "add": "add", "subtract": "subtract", "multiply": "multiply", "floor_divide": "floor_divide",
    "power": "power", "minimum": "minimum", "maximum": "maximum", "equal": "equal", "not_equal": "not_equal",
    "less": "less", "less_equal": "less_equal", "greater": "greater", "greater_equal": "greater_equal",
    "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor", "where": "where",
    "stop_gradient": "stop_gradient",
}  # fmt: skip
"""Primitive -> the namespace function that computes it (same arguments, NumPy semantics)."""

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT_HALF = 1 / math.sqrt(2.0)


def sign_keeping_nan(b: Binding) -> Impl:
    """``sign`` that maps NaN to NaN, as NumPy does, for namespaces whose ``sign`` gives 0 (MLX, torch).

    >>> import numpy as np
    >>> sign_keeping_nan(Binding(np, {}))(np.array([np.nan, -2.0])).tolist()
    [nan, -1.0]
    """
    where, isnan, sign_, is_float = b.xp.where, b.xp.isnan, b.xp.sign, b.is_float

    def sign(input: Any) -> Any:
        """``sign(input)``; NaN stays NaN."""
        return where(isnan(input), input, sign_(input)) if is_float(input) else sign_(input)

    return sign


def stop_gradient(input: Any) -> Any:
    """``input`` itself: a namespace without autograd (NumPy) has no gradient to stop; autograd backends
    override it (``jax.lax.stop_gradient``, ``Tensor.detach``, ``mx.stop_gradient``).

    >>> stop_gradient(3.0)
    3.0
    """
    return input


def build(b: Binding) -> dict[str, Impl]:
    """The elementwise implementations bound to ``b.xp`` (see the module docstring)."""
    xp = b.xp
    table: dict[str, Impl] = {name: getattr(xp, fn) for name, fn in _DIRECT.items() if hasattr(xp, fn)}
    maximum, where, multiply, tanh, exp, abs_ = xp.maximum, xp.where, xp.multiply, xp.tanh, xp.exp, xp.abs
    logaddexp, sqrt = xp.logaddexp, xp.sqrt
    reciprocal: Impl = getattr(xp, "reciprocal", None) or (lambda input: 1.0 / input)
    is_float = b.is_float

    rsqrt: Impl | None = getattr(xp, "rsqrt", None)
    if rsqrt is None:

        def rsqrt(input: Any) -> Any:
            """``1 / sqrt(input)``"""
            return reciprocal(sqrt(input))

    def sigmoid(input: Any) -> Any:
        """``1 / (1 + exp(-input))``, without overflow and accurate for large negative inputs."""
        e = exp(-abs_(input))
        return where(input >= 0, 1 / (1 + e), e / (1 + e))

    def relu(input: Any) -> Any:
        """``maximum(input, 0)``"""
        return maximum(input, 0)

    def leaky_relu(input: Any, *, slope: float) -> Any:
        """``where(input > 0, input, slope * input)``"""
        return where(input > 0, input, multiply(input, slope))

    erf = b.pick("erf", getattr(xp, "erf", None))

    def gelu(input: Any, *, approximate: bool) -> Any:
        """``x * Phi(x)`` with the exact (erf) CDF, or the tanh approximation when ``approximate``."""
        if approximate:
            return 0.5 * input * (1 + tanh(_SQRT_2_OVER_PI * (input + 0.044715 * (input * input * input))))
        return 0.5 * input * (1 + erf(input * _SQRT_HALF))

    def softplus(input: Any) -> Any:
        """``logaddexp(input, 0)``"""
        return logaddexp(input, 0.0)

    @uses_backend
    def cast(backend: Any, input: Any, *, dtype: Any) -> Any:
        """``input.astype(dtype)``; a kind (``"float"``, ``"int"``, ``"bool"``) maps to the backend's dtype."""
        if hasattr(input, "astype"):
            return input.astype(backend.native_dtype(dtype))
        return backend.array(input, dtype)

    def cast_like(input: Any, like: Any) -> Any:
        """``input.astype(like.dtype)``"""
        return input.astype(like.dtype)

    @uses_backend
    def divide(backend: Any, left: Any, right: Any) -> Any:
        """``left / right`` (true division); ints divide into the backend's float dtype."""
        if is_float(left) or is_float(right):
            return left / right
        return backend.array(left, "float") / backend.array(right, "float")

    table.update(rsqrt=rsqrt, sigmoid=getattr(xp, "sigmoid", sigmoid), relu=relu, leaky_relu=leaky_relu)
    table.update(softplus=softplus, cast=cast, cast_like=cast_like, divide=divide)
    table.setdefault("stop_gradient", stop_gradient)
    if erf is not None:
        table.update(erf=erf, gelu=gelu)
    return table
