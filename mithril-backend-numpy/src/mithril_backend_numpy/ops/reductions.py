"""Reductions over an axis (``None`` = all axes, a list = several) and the softmax family.

Example:
    >>> import numpy as np
    >>> sum(np.ones((2, 3)), axis=0, keepdim=False)
    array([2., 2., 2.])
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["sum", "mean", "max", "min", "prod", "argmax", "argmin", "var", "softmax", "log_softmax"]

Array = np.ndarray
Axis = Any  # None, an int, or a sequence of ints


def _axis(axis: Axis) -> int | tuple[int, ...] | None:
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def sum(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``np.sum(input, axis, keepdims=keepdim)``"""
    return np.sum(input, axis=_axis(axis), keepdims=keepdim)


def mean(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``np.mean(input, axis, keepdims=keepdim)``"""
    return np.mean(input, axis=_axis(axis), keepdims=keepdim)


def max(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``np.max(input, axis, keepdims=keepdim)``"""
    return np.max(input, axis=_axis(axis), keepdims=keepdim)


def min(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``np.min(input, axis, keepdims=keepdim)``"""
    return np.min(input, axis=_axis(axis), keepdims=keepdim)


def prod(input: Array, *, axis: Axis, keepdim: bool) -> Array:
    """``np.prod(input, axis, keepdims=keepdim)``"""
    return np.prod(input, axis=_axis(axis), keepdims=keepdim)


def argmax(input: Array, *, axis: int | None, keepdim: bool) -> Array:
    """``np.argmax(input, axis, keepdims=keepdim)`` as int64; ``axis=None`` is over the flattened input."""
    return np.argmax(input, axis=axis, keepdims=keepdim).astype(np.int64, copy=False)


def argmin(input: Array, *, axis: int | None, keepdim: bool) -> Array:
    """``np.argmin(input, axis, keepdims=keepdim)`` as int64; ``axis=None`` is over the flattened input."""
    return np.argmin(input, axis=axis, keepdims=keepdim).astype(np.int64, copy=False)


def var(input: Array, *, axis: Axis, keepdim: bool, correction: int) -> Array:
    """``np.var(input, axis, keepdims=keepdim, ddof=correction)``"""
    return np.var(input, axis=_axis(axis), keepdims=keepdim, ddof=correction)


def softmax(input: Array, *, axis: int) -> Array:
    """``exp(x - logsumexp(x, axis))``, computed stably (max subtracted first).

    >>> softmax(np.array([0.0, 0.0]), axis=-1)
    array([0.5, 0.5])
    """
    shifted = np.exp(input - np.max(input, axis=axis, keepdims=True))
    shifted /= np.sum(shifted, axis=axis, keepdims=True)
    return shifted


def log_softmax(input: Array, *, axis: int) -> Array:
    """``x - logsumexp(x, axis)``, computed stably."""
    shifted = input - np.max(input, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
