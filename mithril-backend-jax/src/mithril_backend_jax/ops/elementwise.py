"""Elementwise unary and broadcasting binary primitives.

Python scalars combined with arrays are weakly typed (a float32 array times ``2.0`` stays float32).
Transcendental functions of int/bool inputs return the backend float dtype.

Example:
    >>> import jax.numpy as jnp
    >>> relu(jnp.array([-1.0, 2.0]))
    Array([0., 2.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from mithril.primitives import uses_backend

from ._util import as_float, is_float

__all__ = [
    "neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "square", "sin", "cos", "tanh", "sigmoid",
    "relu", "leaky_relu", "gelu", "softplus", "erf", "floor", "isnan", "nan_to_num", "logical_not", "cast",
    "add", "subtract", "multiply", "divide", "floor_divide", "power", "minimum", "maximum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "where",
]  # fmt: skip

Array = jax.Array


# -- unary -----------------------------------------------------------------------------------------
def neg(input: Array) -> Array:
    """``-input``"""
    return jnp.negative(input)


def abs(input: Array) -> Array:
    """``jnp.abs(input)``"""
    return jnp.abs(input)


def sign(input: Array) -> Array:
    """``jnp.sign(input)``"""
    return jnp.sign(input)


@uses_backend
def exp(backend: Any, input: Array) -> Array:
    """``jnp.exp(input)``"""
    return jnp.exp(as_float(backend, input))


@uses_backend
def log(backend: Any, input: Array) -> Array:
    """``jnp.log(input)``"""
    return jnp.log(as_float(backend, input))


@uses_backend
def sqrt(backend: Any, input: Array) -> Array:
    """``jnp.sqrt(input)``"""
    return jnp.sqrt(as_float(backend, input))


@uses_backend
def rsqrt(backend: Any, input: Array) -> Array:
    """``1 / sqrt(input)`` (``lax.rsqrt``)."""
    return jax.lax.rsqrt(as_float(backend, input))


def square(input: Array) -> Array:
    """``input * input``"""
    return jnp.square(input)


@uses_backend
def sin(backend: Any, input: Array) -> Array:
    """``jnp.sin(input)``"""
    return jnp.sin(as_float(backend, input))


@uses_backend
def cos(backend: Any, input: Array) -> Array:
    """``jnp.cos(input)``"""
    return jnp.cos(as_float(backend, input))


@uses_backend
def tanh(backend: Any, input: Array) -> Array:
    """``jnp.tanh(input)``"""
    return jnp.tanh(as_float(backend, input))


@uses_backend
def sigmoid(backend: Any, input: Array) -> Array:
    """``jax.nn.sigmoid(input)`` (stable for large negative inputs)."""
    return jax.nn.sigmoid(as_float(backend, input))


def relu(input: Array) -> Array:
    """``max(input, 0)``; the gradient at 0 is 0."""
    return jax.nn.relu(input) if is_float(input) else jnp.maximum(input, 0)


def leaky_relu(input: Array, *, slope: float) -> Array:
    """``where(input > 0, input, slope * input)``"""
    return jnp.where(input > 0, input, jnp.multiply(input, slope))


@uses_backend
def gelu(backend: Any, input: Array, *, approximate: bool) -> Array:
    """``x * Phi(x)`` with the exact (erf) CDF, or the tanh approximation when ``approximate``."""
    return jax.nn.gelu(as_float(backend, input), approximate=bool(approximate))


@uses_backend
def softplus(backend: Any, input: Array) -> Array:
    """``logaddexp(input, 0)``"""
    return jnp.logaddexp(as_float(backend, input), 0)


@uses_backend
def erf(backend: Any, input: Array) -> Array:
    """The error function (``jax.lax.erf``)."""
    return jax.lax.erf(as_float(backend, input))


def floor(input: Array) -> Array:
    """``jnp.floor(input)``"""
    return jnp.floor(input)


def isnan(input: Array) -> Array:
    """``jnp.isnan(input)``"""
    return jnp.isnan(input)


def nan_to_num(input: Array, *, nan: float, posinf: float | None, neginf: float | None) -> Array:
    """``jnp.nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)``"""
    return jnp.nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)


def logical_not(input: Array) -> Array:
    """``jnp.logical_not(input)``"""
    return jnp.logical_not(input)


@uses_backend
def cast(backend: Any, input: Array, *, dtype: Any) -> Array:
    """``input.astype(dtype)``; a kind (``"float"``, ``"int"``, ``"bool"``) maps to the backend's dtype."""
    return jnp.asarray(input).astype(backend.native_dtype(dtype))


# -- binary (NumPy broadcasting) -------------------------------------------------------------------
def add(left: Array, right: Array) -> Array:
    """``left + right``"""
    return jnp.add(left, right)


def subtract(left: Array, right: Array) -> Array:
    """``left - right``"""
    return jnp.subtract(left, right)


def multiply(left: Array, right: Array) -> Array:
    """``left * right``"""
    return jnp.multiply(left, right)


@uses_backend
def divide(backend: Any, left: Array, right: Array) -> Array:
    """``left / right`` (true division); ints divide into the backend's float dtype."""
    if is_float(left) or is_float(right):
        return jnp.true_divide(left, right)
    return jnp.true_divide(as_float(backend, left), as_float(backend, right))


def floor_divide(left: Array, right: Array) -> Array:
    """``left // right``"""
    return jnp.floor_divide(left, right)


def power(left: Array, right: Array) -> Array:
    """``left ** right``"""
    return jnp.power(left, right)


def minimum(left: Array, right: Array) -> Array:
    """``jnp.minimum(left, right)``"""
    return jnp.minimum(left, right)


def maximum(left: Array, right: Array) -> Array:
    """``jnp.maximum(left, right)``"""
    return jnp.maximum(left, right)


def equal(left: Array, right: Array) -> Array:
    """``left == right``"""
    return jnp.equal(left, right)


def not_equal(left: Array, right: Array) -> Array:
    """``left != right``"""
    return jnp.not_equal(left, right)


def less(left: Array, right: Array) -> Array:
    """``left < right``"""
    return jnp.less(left, right)


def less_equal(left: Array, right: Array) -> Array:
    """``left <= right``"""
    return jnp.less_equal(left, right)


def greater(left: Array, right: Array) -> Array:
    """``left > right``"""
    return jnp.greater(left, right)


def greater_equal(left: Array, right: Array) -> Array:
    """``left >= right``"""
    return jnp.greater_equal(left, right)


def logical_and(left: Array, right: Array) -> Array:
    """``jnp.logical_and(left, right)``"""
    return jnp.logical_and(left, right)


def logical_or(left: Array, right: Array) -> Array:
    """``jnp.logical_or(left, right)``"""
    return jnp.logical_or(left, right)


def logical_xor(left: Array, right: Array) -> Array:
    """``jnp.logical_xor(left, right)``"""
    return jnp.logical_xor(left, right)


def where(condition: Array, left: Array, right: Array) -> Array:
    """``jnp.where(condition, left, right)``"""
    return jnp.where(condition, left, right)
