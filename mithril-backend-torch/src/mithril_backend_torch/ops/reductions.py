"""Reductions over an axis (``None`` = all axes, a list = several) and the softmax family.

Example:
    >>> import torch
    >>> sum(torch.ones(2, 3), axis=0, keepdim=False)
    tensor([2., 2., 2.])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from mithril.extend import uses_backend

Tensor = torch.Tensor
Axis = Any  # None, an int, or a sequence of ints


def _dims(axis: Axis) -> int | tuple[int, ...] | None:
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def sum(input: Tensor, *, axis: Axis, keepdim: bool) -> Tensor:
    """``np.sum(input, axis, keepdims=keepdim)`` (bools sum to int64)."""
    return torch.sum(input, dim=_dims(axis), keepdim=keepdim)


@uses_backend
def mean(backend: Any, input: Tensor, *, axis: Axis, keepdim: bool) -> Tensor:
    """``np.mean(input, axis, keepdims=keepdim)``; integer inputs average in the backend float dtype."""
    if not input.is_floating_point():
        input = input.to(backend.native_dtype("float"))
    return torch.mean(input, dim=_dims(axis), keepdim=keepdim)


def max(input: Tensor, *, axis: Axis, keepdim: bool) -> Tensor:
    """``np.max(input, axis, keepdims=keepdim)``"""
    dims = _dims(axis)
    return torch.amax(input, dim=() if dims is None else dims, keepdim=keepdim)


def min(input: Tensor, *, axis: Axis, keepdim: bool) -> Tensor:
    """``np.min(input, axis, keepdims=keepdim)``"""
    dims = _dims(axis)
    return torch.amin(input, dim=() if dims is None else dims, keepdim=keepdim)


def prod(input: Tensor, *, axis: Axis, keepdim: bool) -> Tensor:
    """``np.prod(input, axis, keepdims=keepdim)`` (torch reduces one axis at a time)."""
    dims = _dims(axis)
    if dims is None:
        out = torch.prod(input)
        return out.reshape((1,) * input.ndim) if keepdim else out
    if isinstance(dims, int):
        return torch.prod(input, dim=dims, keepdim=keepdim)
    axes = sorted({d % input.ndim for d in dims}, reverse=True)
    out = input
    for d in axes:
        out = torch.prod(out, dim=d, keepdim=True)
    return out if keepdim else out.squeeze(tuple(axes))


def _arg(fn: Callable[..., Tensor], input: Tensor, axis: int | None, keepdim: bool) -> Tensor:
    if axis is None:
        out = fn(input.reshape(-1), dim=0)
        return out.reshape((1,) * input.ndim) if keepdim else out
    return fn(input, dim=axis, keepdim=keepdim)


def argmax(input: Tensor, *, axis: int | None, keepdim: bool) -> Tensor:
    """``np.argmax(input, axis, keepdims=keepdim)`` as int64; ``axis=None`` is over the flattened input."""
    return _arg(torch.argmax, input, axis, keepdim)


def argmin(input: Tensor, *, axis: int | None, keepdim: bool) -> Tensor:
    """``np.argmin(input, axis, keepdims=keepdim)`` as int64; ``axis=None`` is over the flattened input."""
    return _arg(torch.argmin, input, axis, keepdim)


def var(input: Tensor, *, axis: Axis, keepdim: bool, correction: int) -> Tensor:
    """``np.var(input, axis, keepdims=keepdim, ddof=correction)``"""
    return torch.var(input, dim=_dims(axis), correction=correction, keepdim=keepdim)


def softmax(input: Tensor, *, axis: int) -> Tensor:
    """``exp(x - logsumexp(x, axis))``, computed stably.

    >>> softmax(torch.tensor([0.0, 0.0]), axis=-1)
    tensor([0.5000, 0.5000])
    """
    return torch.softmax(input, dim=axis)


def log_softmax(input: Tensor, *, axis: int) -> Tensor:
    """``x - logsumexp(x, axis)``, computed stably."""
    return torch.log_softmax(input, dim=axis)
