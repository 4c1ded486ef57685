"""Shape manipulation, static indexing and array creation.

Creation ops take the backend (``uses_backend``) so floats get the backend dtype.

Example:
    >>> import numpy as np
    >>> [part.shape for part in split(np.zeros((6, 2)), sections=[1, 4], axis=0)]
    [(1, 2), (3, 2), (2, 2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from mithril.primitives import uses_backend
from mithril.primitives.rules import creation_kind

__all__ = [
    "reshape", "flatten", "transpose", "swapaxes", "squeeze", "unsqueeze", "broadcast_to", "concat",
    "split", "pad", "index", "gather", "arange", "ones", "zeros", "full", "zeros_like", "ones_like",
    "positions", "shape", "size",
]  # fmt: skip

Array = np.ndarray


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def reshape(input: Array, *, shape: Sequence[int | None]) -> Array:
    """``input.reshape(shape)``; a ``None`` entry keeps the input dim at that position."""
    target = tuple(input.shape[i] if s is None else int(s) for i, s in enumerate(shape))
    return np.reshape(input, target)


def flatten(input: Array, *, start_dim: int, end_dim: int) -> Array:
    """Merge axes ``start_dim..end_dim`` (``torch.flatten``)."""
    dims = input.shape
    if not dims:
        return np.reshape(input, (1,))
    start, end = start_dim % len(dims), end_dim % len(dims)
    return np.reshape(input, (*dims[:start], -1, *dims[end + 1 :]))


def transpose(input: Array, *, axes: Sequence[int] | None) -> Array:
    """``np.transpose(input, axes)``"""
    return np.transpose(input, None if axes is None else tuple(axes))


def swapaxes(input: Array, *, axis1: int, axis2: int) -> Array:
    """``np.swapaxes(input, axis1, axis2)``"""
    return np.swapaxes(input, axis1, axis2)


def squeeze(input: Array, *, axis: int | Sequence[int] | None) -> Array:
    """``np.squeeze(input, axis)``"""
    return np.squeeze(input, axis=_tuple(axis))


def unsqueeze(input: Array, *, axis: int | Sequence[int]) -> Array:
    """``np.expand_dims(input, axis)``"""
    return np.expand_dims(input, _tuple(axis))


def broadcast_to(input: Array, *, shape: Sequence[int]) -> Array:
    """``np.broadcast_to(input, shape)`` (a read-only view)."""
    return np.broadcast_to(input, tuple(shape))


def concat(*inputs: Array, n: int, axis: int) -> Array:
    """``np.concatenate([input_0, ..., input_{n-1}], axis)``"""
    return np.concatenate(inputs, axis=axis)


def split(input: Array, *, sections: int | Sequence[int], axis: int) -> tuple[Array, ...]:
    """``np.split(input, sections, axis)``: an equal-part count or a list of split indices."""
    return tuple(np.split(input, sections if isinstance(sections, int) else list(sections), axis=axis))


def pad(input: Array, *, pad_width: Sequence[Sequence[int]], value: float) -> Array:
    """``np.pad(input, pad_width, constant_values=value)``"""
    return np.pad(input, [tuple(p) for p in pad_width], constant_values=value)


def index(input: Array, *, key: Any) -> Array:
    """``input[key]`` with a static basic-indexing key (ints, slices, ``None``, ``...``)."""
    return input[key]


def gather(input: Array, index: Array, *, axis: int) -> Array:
    """``np.take_along_axis(input, index, axis)``"""
    return np.take_along_axis(input, index, axis=axis)


@uses_backend
def arange(backend: Any, *, start: float, stop: float | None, step: float) -> Array:
    """``np.arange(start, stop, step)``: backend float dtype if any bound is a float, else int64."""
    dtype = backend.native_dtype(creation_kind(None, start, stop, step, counting=True))
    return np.arange(start, stop, step, dtype=dtype) if stop is not None else np.arange(start, dtype=dtype)


@uses_backend
def ones(backend: Any, *, shape: Sequence[int], dtype: Any) -> Array:
    """``np.ones(shape)`` in ``dtype`` (default: the backend float dtype)."""
    return np.ones(tuple(shape), dtype=backend.native_dtype(creation_kind(dtype)))


@uses_backend
def zeros(backend: Any, *, shape: Sequence[int], dtype: Any) -> Array:
    """``np.zeros(shape)`` in ``dtype`` (default: the backend float dtype)."""
    return np.zeros(tuple(shape), dtype=backend.native_dtype(creation_kind(dtype)))


@uses_backend
def full(backend: Any, *, shape: Sequence[int], fill_value: Any, dtype: Any) -> Array:
    """``np.full(shape, fill_value)``; without ``dtype`` the kind of ``fill_value`` decides."""
    return np.full(tuple(shape), fill_value, dtype=backend.native_dtype(creation_kind(dtype, fill_value)))


def zeros_like(input: Array) -> Array:
    """``np.zeros_like(input)``"""
    return np.zeros_like(input)


def ones_like(input: Array) -> Array:
    """``np.ones_like(input)``"""
    return np.ones_like(input)


def positions(input: Array, *, axis: int) -> Array:
    """``np.arange(input.shape[axis])`` as int64."""
    return np.arange(np.shape(input)[axis], dtype=np.int64)


def shape(input: Array) -> Array:
    """``np.array(input.shape)`` as int64."""
    return np.array(np.shape(input), dtype=np.int64)


def size(input: Array) -> Array:
    """``np.array(input.size)`` as int64."""
    return np.array(np.size(input), dtype=np.int64)
