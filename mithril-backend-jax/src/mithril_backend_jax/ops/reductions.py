"""Reductions over an axis (``None`` = all axes, a list = several) and the softmax family.

``mean`` and ``var`` of int/bool inputs return the backend float dtype; ``argmax``/``argmin`` return the
backend's int dtype (int32, or int64 on a float64 backend).

Example:
    >>> import jax.numpy as jnp
    >>> sum(jnp.ones((2, 3)), axis=0, keepdim=False)
    Array([2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from mithril.primitives import uses_backend

from ._util import as_float

__all__ = ["sum", "mean", "max", "min", "prod", "argmax", "argmin", "var", "softmax", "log_softmax"]

Array = jax.Array
Axis = Any  # None, an int, or a sequence of ints


def _axis(axis: Axis) -> int | tuple[int, ...] | None:
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def sum(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``jnp.sum(input, axis, keepdims=keepdim)``"""
    return jnp.sum(input, axis=_axis(axis), keepdims=keepdim)


@uses_backend
def mean(backend: Any, input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``jnp.mean(input, axis, keepdims=keepdim)``"""
    return jnp.mean(as_float(backend, input), axis=_axis(axis), keepdims=keepdim)


def max(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``jnp.max(input, axis, keepdims=keepdim)``"""
    return jnp.max(input, axis=_axis(axis), keepdims=keepdim)


def min(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``jnp.min(input, axis, keepdims=keepdim)``"""
    return jnp.min(input, axis=_axis(axis), keepdims=keepdim)


def prod(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``jnp.prod(input, axis, keepdims=keepdim)``"""
    return jnp.prod(input, axis=_axis(axis), keepdims=keepdim)


@uses_backend
def argmax(backend: Any, input: Array, *, axis: int | None, keepdim: bool) -> Array:
    """``jnp.argmax(input, axis, keepdims=keepdim)``; ``axis=None`` is over the flattened input."""
    return jnp.argmax(input, axis=axis, keepdims=keepdim).astype(backend.native_dtype("int"))


@uses_backend
def argmin(backend: Any, input: Array, *, axis: int | None, keepdim: bool) -> Array:
    """``jnp.argmin(input, axis, keepdims=keepdim)``; ``axis=None`` is over the flattened input."""
    return jnp.argmin(input, axis=axis, keepdims=keepdim).astype(backend.native_dtype("int"))


@uses_backend
def var(backend: Any, input: Array, *, axis: Axis, keepdim: bool, correction: int) -> Array:
    """``jnp.var(input, axis, keepdims=keepdim, ddof=correction)``"""
    return jnp.var(as_float(backend, input), axis=_axis(axis), keepdims=keepdim, ddof=correction)


def softmax(input: Array, *, axis: int) -> Array:
    """``exp(x - logsumexp(x, axis))``, computed stably (``jax.nn.softmax``)."""
    return jax.nn.softmax(input, axis=axis)


def log_softmax(input: Array, *, axis: int) -> Array:
    """``x - logsumexp(x, axis)``, computed stably (``jax.nn.log_softmax``)."""
    return jax.nn.log_softmax(input, axis=axis)
