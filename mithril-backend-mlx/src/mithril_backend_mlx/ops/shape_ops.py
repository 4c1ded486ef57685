"""Shape manipulation, static indexing and array creation.

Creation ops take the backend (``uses_backend``) so floats get the backend dtype and ints int64.

Example:
    >>> import mlx.core as mx
    >>> [part.shape for part in split(mx.zeros((6, 2)), sections=[1, 4], axis=0)]
    [(1, 2), (3, 2), (2, 2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
from mithril.primitives import uses_backend
from mithril.primitives.rules import creation_kind

__all__ = [
    "reshape", "flatten", "transpose", "swapaxes", "squeeze", "unsqueeze", "broadcast_to", "concat",
    "split", "pad", "index", "gather", "arange", "ones", "zeros", "full", "zeros_like", "ones_like",
    "positions", "shape", "size",
]  # fmt: skip

Array = mx.array


def _list(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def reshape(input: Array, *, shape: Sequence[int | None]) -> Array:
    """``input.reshape(shape)``; a ``None`` entry keeps the input dim at that position."""
    target = [input.shape[i] if s is None else int(s) for i, s in enumerate(shape)]
    return mx.reshape(input, target)


def flatten(input: Array, *, start_dim: int, end_dim: int) -> Array:
    """Merge axes ``start_dim..end_dim`` (``torch.flatten``)."""
    dims = input.shape
    if not dims:
        return mx.reshape(input, (1,))
    start, end = start_dim % len(dims), end_dim % len(dims)
    return mx.reshape(input, (*dims[:start], -1, *dims[end + 1 :]))


def transpose(input: Array, *, axes: Sequence[int] | None) -> Array:
    """``mx.transpose(input, axes)`` (``None`` reverses the axes; negative axes allowed)."""
    if axes is None:
        return mx.transpose(input)
    return mx.transpose(input, [a % input.ndim for a in axes])


def swapaxes(input: Array, *, axis1: int, axis2: int) -> Array:
    """``mx.swapaxes(input, axis1, axis2)``"""
    return mx.swapaxes(input, axis1, axis2)


def squeeze(input: Array, *, axis: int | Sequence[int] | None) -> Array:
    """``mx.squeeze(input, axis)``"""
    return mx.squeeze(input, axis=_list(axis))


def unsqueeze(input: Array, *, axis: int | Sequence[int]) -> Array:
    """``mx.expand_dims(input, axis)``"""
    return mx.expand_dims(input, _list(axis))


def broadcast_to(input: Array, *, shape: Sequence[int]) -> Array:
    """``mx.broadcast_to(input, shape)``"""
    return mx.broadcast_to(input, list(shape))


def concat(*inputs: Array, n: int, axis: int) -> Array:
    """``mx.concatenate([input_0, ..., input_{n-1}], axis)``"""
    return mx.concatenate(list(inputs), axis=axis)


def split(input: Array, *, sections: int | Sequence[int], axis: int) -> tuple[Array, ...]:
    """``mx.split(input, sections, axis)``: an equal-part count or a list of split indices."""
    return tuple(mx.split(input, sections if isinstance(sections, int) else list(sections), axis=axis))


def pad(input: Array, *, pad_width: Sequence[Sequence[int]], value: float) -> Array:
    """``mx.pad(input, pad_width, constant_values=value)``"""
    return mx.pad(input, [tuple(p) for p in pad_width], constant_values=value)


def index(input: Array, *, key: Any) -> Array:
    """``input[key]`` with a static basic-indexing key (ints, slices, ``None``, ``...``)."""
    return input[key]


def gather(input: Array, index: Array, *, axis: int) -> Array:
    """``mx.take_along_axis(input, index, axis)``"""
    return mx.take_along_axis(input, index, axis=axis)


@uses_backend
def arange(backend: Any, *, start: float, stop: float | None, step: float) -> Array:
    """``arange(start, stop, step)``: backend float dtype if any bound is a float, else int64."""
    dtype = backend.native_dtype(creation_kind(None, start, stop, step, counting=True))
    work = mx.float32 if dtype in (mx.float16, mx.bfloat16) else dtype  # count in float32, then round
    values = mx.arange(start, stop, step, dtype=work) if stop is not None else mx.arange(start, dtype=work)
    return values.astype(dtype)


@uses_backend
def ones(backend: Any, *, shape: Sequence[int], dtype: Any) -> Array:
    """``mx.ones(shape)`` in ``dtype`` (default: the backend float dtype)."""
    return mx.ones(list(shape), dtype=backend.native_dtype(creation_kind(dtype)))


@uses_backend
def zeros(backend: Any, *, shape: Sequence[int], dtype: Any) -> Array:
    """``mx.zeros(shape)`` in ``dtype`` (default: the backend float dtype)."""
    return mx.zeros(list(shape), dtype=backend.native_dtype(creation_kind(dtype)))


@uses_backend
def full(backend: Any, *, shape: Sequence[int], fill_value: Any, dtype: Any) -> Array:
    """``mx.full(shape, fill_value)``; without ``dtype`` the kind of ``fill_value`` decides."""
    return mx.full(list(shape), fill_value, dtype=backend.native_dtype(creation_kind(dtype, fill_value)))


def zeros_like(input: Array) -> Array:
    """``mx.zeros_like(input)``"""
    return mx.zeros_like(input)


def ones_like(input: Array) -> Array:
    """``mx.ones_like(input)``"""
    return mx.ones_like(input)


def positions(input: Array, *, axis: int) -> Array:
    """``arange(input.shape[axis])`` as int64."""
    return mx.arange(input.shape[axis], dtype=mx.int64)


def shape(input: Array) -> Array:
    """``input.shape`` as an int64 array."""
    return mx.array(list(input.shape), dtype=mx.int64)


def size(input: Array) -> Array:
    """``input.size`` as an int64 scalar array."""
    return mx.array(input.size, dtype=mx.int64)
