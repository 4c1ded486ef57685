"""Elementwise unary and broadcasting binary primitives.

Python scalars combined with float32 arrays stay float32 (NumPy 2 weak scalars).

Example:
    >>> import numpy as np
    >>> relu(np.array([-1.0, 2.0], dtype=np.float32))
    array([0., 2.], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from mithril.primitives import uses_backend

__all__ = [
    "neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "square", "sin", "cos", "tanh", "sigmoid",
    "relu", "leaky_relu", "gelu", "softplus", "erf", "floor", "isnan", "nan_to_num", "logical_not", "cast",
    "add", "subtract", "multiply", "divide", "floor_divide", "power", "minimum", "maximum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "where",
]  # fmt: skip

Array = np.ndarray


# -- unary -----------------------------------------------------------------------------------------
def neg(input: Array) -> Array:
    """``-input``"""
    return np.negative(input)


def abs(input: Array) -> Array:
    """``np.abs(input)``"""
    return np.abs(input)


def sign(input: Array) -> Array:
    """``np.sign(input)``"""
    return np.sign(input)


def exp(input: Array) -> Array:
    """``np.exp(input)``"""
    return np.exp(input)


def log(input: Array) -> Array:
    """``np.log(input)``"""
    return np.log(input)


def sqrt(input: Array) -> Array:
    """``np.sqrt(input)``"""
    return np.sqrt(input)


def rsqrt(input: Array) -> Array:
    """``1 / np.sqrt(input)``"""
    return np.reciprocal(np.sqrt(input))


def square(input: Array) -> Array:
    """``input * input``"""
    return np.square(input)


def sin(input: Array) -> Array:
    """``np.sin(input)``"""
    return np.sin(input)


def cos(input: Array) -> Array:
    """``np.cos(input)``"""
    return np.cos(input)


def tanh(input: Array) -> Array:
    """``np.tanh(input)``"""
    return np.tanh(input)


def sigmoid(input: Array) -> Array:
    """``1 / (1 + exp(-input))``, without overflow and accurate for large negative inputs.

    >>> float(sigmoid(np.array(0.0)))
    0.5
    """
    e = np.exp(-np.abs(input))
    return np.where(np.asarray(input) >= 0, 1 / (1 + e), e / (1 + e))


def relu(input: Array) -> Array:
    """``np.maximum(input, 0)``"""
    return np.maximum(input, 0)


def leaky_relu(input: Array, *, slope: float) -> Array:
    """``np.where(input > 0, input, slope * input)``"""
    return np.where(input > 0, input, np.multiply(input, slope))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(input: Array, *, approximate: bool) -> Array:
    """``x * Phi(x)`` with the exact (erf) CDF, or the tanh approximation when ``approximate``.

    >>> round(float(gelu(np.array(1.0), approximate=False)), 6)
    0.841345
    """
    x = np.asarray(input)
    if approximate:
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
        return 0.5 * x * (1 + np.tanh(inner))
    return 0.5 * x * (1 + erf(x * (1 / math.sqrt(2.0))))


def softplus(input: Array) -> Array:
    """``np.logaddexp(input, 0)``"""
    return np.logaddexp(input, 0)


# erf: a Taylor series near 0 (relative accuracy for tiny x) and, for |x| >= 0.5, erfc(z) =
# t * exp(-z^2 + C(2t - 1)) with t = 2 / (2 + z) and C a Chebyshev series (coefficients fitted to
# mpmath, max relative error of erfc ~1e-14; the scheme of Numerical Recipes 3rd ed. section 6.2).
_ERFC_CHEB = np.array([
    -0.6513268598908546, 0.6419697923564902, 0.019476473204186006, -0.009561514786808558,
    -0.0009465953444820756, 0.00036683949785255697, 4.2523324806903297e-05, -2.0278578113038765e-05,
    -1.624290005094429e-06, 1.3036558360146683e-06, 1.5626441015945222e-08, -8.523809615764015e-08,
    6.529054117268745e-09, 5.059343155620523e-09, -9.91364764860282e-10, -2.2736551939802576e-10,
    9.646646271536195e-11, 2.3939806454700454e-12, -6.887022729719846e-12, 8.943883877627868e-13,
    3.123663799590801e-13, -1.1281572376439708e-13, 5.662761075079358e-16,
])  # fmt: skip
_ERF_TAYLOR = [(-1) ** n / (math.factorial(n) * (2 * n + 1)) * 2 / math.sqrt(math.pi) for n in range(14)]


def _chebval(u: Array, coefficients: np.ndarray) -> Array:
    """Clenshaw evaluation of ``sum c_j T_j(u)`` in the dtype of ``u``."""
    b1 = np.zeros_like(u)
    b2 = np.zeros_like(u)
    u2 = 2 * u
    for c in coefficients[:0:-1]:
        b1, b2 = u2 * b1 - b2 + float(c), b1
    return u * b1 - b2 + float(coefficients[0])


def erf(input: Array) -> Array:
    """The error function, vectorised (abs. error ~1e-15 in float64; float32 stays float32).

    >>> round(float(erf(np.array(0.5))), 12)
    0.520499877813
    """
    x = np.asarray(input)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    work = x.astype(np.float32) if x.dtype == np.float16 else x
    z = np.abs(work)
    # small |x|: Taylor series in x^2 (Horner)
    x2 = z * z
    series = np.full_like(z, _ERF_TAYLOR[-1])
    for c in _ERF_TAYLOR[-2::-1]:
        series = series * x2 + c
    small = series * z
    # |x| >= 0.5: 1 - erfc(|x|)
    t = 2 / (2 + z)
    with np.errstate(under="ignore", over="ignore"):
        erfc = t * np.exp(-x2 + _chebval(2 * t - 1, _ERFC_CHEB))
    result = np.where(z < 0.5, small, 1 - erfc)
    return np.copysign(result, work).astype(x.dtype, copy=False)


def floor(input: Array) -> Array:
    """``np.floor(input)``"""
    return np.floor(input)


def isnan(input: Array) -> Array:
    """``np.isnan(input)``"""
    return np.isnan(input)


def nan_to_num(input: Array, *, nan: float, posinf: float | None, neginf: float | None) -> Array:
    """``np.nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)``"""
    return np.nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)


def logical_not(input: Array) -> Array:
    """``np.logical_not(input)``"""
    return np.logical_not(input)


@uses_backend
def cast(backend: Any, input: Array, *, dtype: Any) -> Array:
    """``input.astype(dtype)``; a kind (``"float"``, ``"int"``, ``"bool"``) maps to the backend's dtype.

    >>> from mithril_backend_numpy import NumpyBackend
    >>> cast(NumpyBackend(), np.array([1, 2]), dtype="float").dtype
    dtype('float32')
    """
    return np.asarray(input).astype(backend.native_dtype(dtype), copy=False)


# -- binary (NumPy broadcasting) -------------------------------------------------------------------
def add(left: Array, right: Array) -> Array:
    """``left + right``"""
    return np.add(left, right)


def subtract(left: Array, right: Array) -> Array:
    """``left - right``"""
    return np.subtract(left, right)


def multiply(left: Array, right: Array) -> Array:
    """``left * right``"""
    return np.multiply(left, right)


def _is_float(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind == "f"


@uses_backend
def divide(backend: Any, left: Array, right: Array) -> Array:
    """``left / right`` (true division); ints divide into the backend's float dtype.

    >>> from mithril_backend_numpy import NumpyBackend
    >>> divide(NumpyBackend(), np.array([1, 2]), np.array([2, 4])).dtype
    dtype('float32')
    """
    if _is_float(left) or _is_float(right):
        return np.true_divide(left, right)
    return np.true_divide(left, right, dtype=backend.native_dtype("float"))


def floor_divide(left: Array, right: Array) -> Array:
    """``left // right``"""
    return np.floor_divide(left, right)


def power(left: Array, right: Array) -> Array:
    """``left ** right``"""
    return np.power(left, right)


def minimum(left: Array, right: Array) -> Array:
    """``np.minimum(left, right)``"""
    return np.minimum(left, right)


def maximum(left: Array, right: Array) -> Array:
    """``np.maximum(left, right)``"""
    return np.maximum(left, right)


def equal(left: Array, right: Array) -> Array:
    """``left == right``"""
    return np.equal(left, right)


def not_equal(left: Array, right: Array) -> Array:
    """``left != right``"""
    return np.not_equal(left, right)


def less(left: Array, right: Array) -> Array:
    """``left < right``"""
    return np.less(left, right)


def less_equal(left: Array, right: Array) -> Array:
    """``left <= right``"""
    return np.less_equal(left, right)


def greater(left: Array, right: Array) -> Array:
    """``left > right``"""
    return np.greater(left, right)


def greater_equal(left: Array, right: Array) -> Array:
    """``left >= right``"""
    return np.greater_equal(left, right)


def logical_and(left: Array, right: Array) -> Array:
    """``np.logical_and(left, right)``"""
    return np.logical_and(left, right)


def logical_or(left: Array, right: Array) -> Array:
    """``np.logical_or(left, right)``"""
    return np.logical_or(left, right)


def logical_xor(left: Array, right: Array) -> Array:
    """``np.logical_xor(left, right)``"""
    return np.logical_xor(left, right)


def where(condition: Array, left: Array, right: Array) -> Array:
    """``np.where(condition, left, right)``"""
    return np.where(condition, left, right)
