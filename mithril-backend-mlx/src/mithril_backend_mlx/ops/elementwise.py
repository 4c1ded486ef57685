"""Elementwise unary and broadcasting binary primitives in ``mlx.core``.

Python scalars combined with arrays keep the array's dtype (MLX weak scalars); comparisons give bool.

Example:
    >>> import mlx.core as mx
    >>> relu(mx.array([-1.0, 2.0]))
    array([0, 2], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import mlx.core as mx
from mithril.primitives import uses_backend

__all__ = [
    "neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "square", "sin", "cos", "tanh", "sigmoid",
    "relu", "leaky_relu", "gelu", "softplus", "erf", "floor", "isnan", "nan_to_num", "logical_not", "cast",
    "add", "subtract", "multiply", "divide", "floor_divide", "power", "minimum", "maximum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "where",
]  # fmt: skip

Array = mx.array
_FLOATS = (mx.float16, mx.bfloat16, mx.float32, mx.float64)


def _is_float_array(value: Any) -> bool:
    return isinstance(value, mx.array) and value.dtype in _FLOATS


# -- unary -----------------------------------------------------------------------------------------
def neg(input: Array) -> Array:
    """``-input``"""
    return mx.negative(input)


def abs(input: Array) -> Array:
    """``mx.abs(input)``"""
    return mx.abs(input)


def sign(input: Array) -> Array:
    """``np.sign(input)``: NaN stays NaN (``mx.sign`` gives 0 for NaN).

    >>> sign(mx.array([float("nan"), -2.0, 0.0])).tolist()
    [nan, -1.0, 0.0]
    """
    if input.dtype not in _FLOATS:
        return mx.sign(input)
    return mx.where(mx.isnan(input), input, mx.sign(input))


def exp(input: Array) -> Array:
    """``mx.exp(input)``"""
    return mx.exp(input)


def log(input: Array) -> Array:
    """``mx.log(input)``"""
    return mx.log(input)


def sqrt(input: Array) -> Array:
    """``mx.sqrt(input)``"""
    return mx.sqrt(input)


def rsqrt(input: Array) -> Array:
    """``mx.rsqrt(input)``"""
    return mx.rsqrt(input)


def square(input: Array) -> Array:
    """``input * input``"""
    return mx.square(input)


def sin(input: Array) -> Array:
    """``mx.sin(input)``"""
    return mx.sin(input)


def cos(input: Array) -> Array:
    """``mx.cos(input)``"""
    return mx.cos(input)


def tanh(input: Array) -> Array:
    """``mx.tanh(input)``"""
    return mx.tanh(input)


def sigmoid(input: Array) -> Array:
    """``1 / (1 + exp(-input))`` (``mx.sigmoid``, stable for large ``|input|``)."""
    return mx.sigmoid(input)


def relu(input: Array) -> Array:
    """``mx.maximum(input, 0)``"""
    return mx.maximum(input, 0)


def leaky_relu(input: Array, *, slope: float) -> Array:
    """``where(input > 0, input, slope * input)``"""
    return mx.where(input > 0, input, input * slope)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(input: Array, *, approximate: bool) -> Array:
    """``x * Phi(x)`` with the exact (erf) CDF, or the tanh approximation when ``approximate``.

    >>> round(gelu(mx.array(1.0), approximate=False).item(), 5)
    0.84134
    """
    if approximate:
        inner = _SQRT_2_OVER_PI * (input + 0.044715 * (input * input * input))
        return 0.5 * input * (1 + mx.tanh(inner))
    return 0.5 * input * (1 + mx.erf(input * (1 / math.sqrt(2.0))))


def softplus(input: Array) -> Array:
    """``mx.logaddexp(input, 0)``"""
    return mx.logaddexp(input, 0.0)


def erf(input: Array) -> Array:
    """``mx.erf(input)``"""
    return mx.erf(input)


def floor(input: Array) -> Array:
    """``mx.floor(input)``"""
    return mx.floor(input)


def isnan(input: Array) -> Array:
    """``mx.isnan(input)``"""
    return mx.isnan(input)


def nan_to_num(input: Array, *, nan: float, posinf: float | None, neginf: float | None) -> Array:
    """``mx.nan_to_num`` (``None`` infinities -> the dtype's largest finite values, as in NumPy)."""
    return mx.nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)


def logical_not(input: Array) -> Array:
    """``mx.logical_not(input)``"""
    return mx.logical_not(input)


@uses_backend
def cast(backend: Any, input: Array, *, dtype: Any) -> Array:
    """``input.astype(dtype)``; a kind (``"float"``, ``"int"``, ``"bool"``) maps to the backend's dtype.

    >>> from mithril_backend_mlx import MlxBackend
    >>> cast(MlxBackend(), mx.array([1, 2]), dtype="float").dtype
    mlx.core.float32
    """
    return mx.array(input).astype(backend.native_dtype(dtype))


# -- binary (NumPy broadcasting) -------------------------------------------------------------------
def add(left: Array, right: Array) -> Array:
    """``left + right``"""
    return mx.add(left, right)


def subtract(left: Array, right: Array) -> Array:
    """``left - right``"""
    return mx.subtract(left, right)


def multiply(left: Array, right: Array) -> Array:
    """``left * right``"""
    return mx.multiply(left, right)


@uses_backend
def divide(backend: Any, left: Array, right: Array) -> Array:
    """``left / right`` (true division); ints divide into the backend's float dtype.

    >>> from mithril_backend_mlx import MlxBackend
    >>> divide(MlxBackend(), mx.array([1, 2]), mx.array([2, 4])).dtype
    mlx.core.float32
    """
    if _is_float_array(left) or _is_float_array(right):
        return mx.divide(left, right)
    dtype = backend.native_dtype("float")
    return mx.divide(mx.array(left).astype(dtype), mx.array(right).astype(dtype))


def floor_divide(left: Array, right: Array) -> Array:
    """``left // right`` (rounds toward -inf, for ints and floats), with NumPy's (and Python's) answers
    for infinities: ``inf // 2`` is NaN and ``-2 // inf`` is ``-1`` (``mx.floor_divide`` gives ``inf``, ``-0``).

    >>> floor_divide(mx.array([float("inf"), -2.0, 7.0]), mx.array([2.0, float("inf"), 2.0])).tolist()
    [nan, -1.0, 3.0]
    """
    result = mx.floor_divide(left, right)
    if result.dtype not in _FLOATS:
        return result
    left, right = (v if isinstance(v, mx.array) else mx.array(v, dtype=result.dtype) for v in (left, right))
    result = mx.where(mx.isinf(left) & (right != 0), mx.array(float("nan"), dtype=result.dtype), result)
    opposite = mx.isinf(right) & mx.isfinite(left) & (left != 0) & ((left < 0) != (right < 0))
    return mx.where(opposite, mx.array(-1.0, dtype=result.dtype), result)


def power(left: Array, right: Array) -> Array:
    """``left ** right``"""
    return mx.power(left, right)


def minimum(left: Array, right: Array) -> Array:
    """``mx.minimum(left, right)``"""
    return mx.minimum(left, right)


def maximum(left: Array, right: Array) -> Array:
    """``mx.maximum(left, right)``"""
    return mx.maximum(left, right)


def equal(left: Array, right: Array) -> Array:
    """``left == right``"""
    return mx.equal(left, right)


def not_equal(left: Array, right: Array) -> Array:
    """``left != right``"""
    return mx.not_equal(left, right)


def less(left: Array, right: Array) -> Array:
    """``left < right``"""
    return mx.less(left, right)


def less_equal(left: Array, right: Array) -> Array:
    """``left <= right``"""
    return mx.less_equal(left, right)


def greater(left: Array, right: Array) -> Array:
    """``left > right``"""
    return mx.greater(left, right)


def greater_equal(left: Array, right: Array) -> Array:
    """``left >= right``"""
    return mx.greater_equal(left, right)


def logical_and(left: Array, right: Array) -> Array:
    """``mx.logical_and(left, right)``"""
    return mx.logical_and(left, right)


def logical_or(left: Array, right: Array) -> Array:
    """``mx.logical_or(left, right)``"""
    return mx.logical_or(left, right)


def logical_xor(left: Array, right: Array) -> Array:
    """``mx.logical_xor(left, right)``"""
    return mx.logical_xor(left, right)


def where(condition: Array, left: Array, right: Array) -> Array:
    """``mx.where(condition, left, right)``"""
    return mx.where(condition, left, right)
