"""Reductions over an axis (``None`` = all axes, a list = several) and the softmax family.

Integer and bool sums/products come back as int64 and arg-reductions as int64, as on NumPy.

Example:
    >>> import mlx.core as mx
    >>> sum(mx.ones((2, 3)), axis=0, keepdim=False)
    array([2, 2, 2], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

__all__ = ["sum", "mean", "max", "min", "prod", "argmax", "argmin", "var", "softmax", "log_softmax"]

Array = mx.array
Axis = Any  # None, an int, or a sequence of ints
_FLOATS = (mx.float16, mx.bfloat16, mx.float32, mx.float64)


def _axis(axis: Axis) -> int | list[int] | None:
    return list(axis) if isinstance(axis, (list, tuple)) else axis


def _int64(result: Array) -> Array:
    return result if result.dtype in _FLOATS or result.dtype == mx.int64 else result.astype(mx.int64)


def sum(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``mx.sum(input, axis, keepdims=keepdim)``; int and bool inputs sum to int64."""
    return _int64(mx.sum(input, axis=_axis(axis), keepdims=keepdim))


def mean(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``mx.mean(input, axis, keepdims=keepdim)``"""
    return mx.mean(input, axis=_axis(axis), keepdims=keepdim)


def max(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``mx.max(input, axis, keepdims=keepdim)``"""
    return mx.max(input, axis=_axis(axis), keepdims=keepdim)


def min(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``mx.min(input, axis, keepdims=keepdim)``"""
    return mx.min(input, axis=_axis(axis), keepdims=keepdim)


def prod(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``mx.prod(input, axis, keepdims=keepdim)``; int and bool inputs multiply to int64."""
    return _int64(mx.prod(input, axis=_axis(axis), keepdims=keepdim))


def _arg(fn: Any, input: Array, axis: int | None, keepdim: bool) -> Array:
    if axis is None:  # over the flattened input; keepdim keeps every axis as size 1 (NumPy)
        result = fn(mx.reshape(input, (-1,)), axis=0)
        return mx.reshape(result, (1,) * input.ndim).astype(mx.int64) if keepdim else result.astype(mx.int64)
    return fn(input, axis=axis, keepdims=keepdim).astype(mx.int64)


def argmax(input: Array, *, axis: int | None, keepdim: bool) -> Array:
    """``argmax`` as int64 (first of ties); ``axis=None`` is over the flattened input."""
    return _arg(mx.argmax, input, axis, keepdim)


def argmin(input: Array, *, axis: int | None, keepdim: bool) -> Array:
    """``argmin`` as int64 (first of ties); ``axis=None`` is over the flattened input."""
    return _arg(mx.argmin, input, axis, keepdim)


def var(input: Array, *, axis: Axis, keepdim: bool, correction: int) -> Array:
    """``mx.var(input, axis, keepdims=keepdim, ddof=correction)``"""
    return mx.var(input, axis=_axis(axis), keepdims=keepdim, ddof=correction)


def softmax(input: Array, *, axis: int) -> Array:
    """``exp(x - logsumexp(x, axis))`` (``mx.softmax``, accumulated in float32 for half inputs).

    >>> softmax(mx.array([0.0, 0.0]), axis=-1)
    array([0.5, 0.5], dtype=float32)
    """
    return mx.softmax(input, axis=axis, precise=True)


def log_softmax(input: Array, *, axis: int) -> Array:
    """``x - logsumexp(x, axis)``, computed stably."""
    return input - mx.logsumexp(input, axis=axis, keepdims=True)
