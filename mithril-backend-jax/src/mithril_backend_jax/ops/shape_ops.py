"""Shape manipulation, static indexing and array creation.

Creation ops take the backend (``uses_backend``) so floats get the backend dtype and ints its int dtype.

Example:
    >>> import jax.numpy as jnp
    >>> [part.shape for part in split(jnp.zeros((6, 2)), sections=[1, 4], axis=0)]
    [(1, 2), (3, 2), (2, 2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from mithril.primitives import uses_backend
from mithril.primitives.rules import creation_kind

__all__ = [
    "reshape", "flatten", "transpose", "swapaxes", "squeeze", "unsqueeze", "broadcast_to", "concat",
    "split", "pad", "index", "gather", "arange", "ones", "zeros", "full", "zeros_like", "ones_like",
    "positions", "shape", "size",
]  # fmt: skip

Array = jax.Array


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def reshape(input: Array, *, shape: Sequence[int | None]) -> Array:
    """``input.reshape(shape)``; a ``None`` entry keeps the input dim at that position."""
    target = tuple(jnp.shape(input)[i] if s is None else int(s) for i, s in enumerate(shape))
    return jnp.reshape(input, target)


def flatten(input: Array, *, start_dim: int, end_dim: int) -> Array:
    """Merge axes ``start_dim..end_dim`` (``torch.flatten``)."""
    dims = jnp.shape(input)
    if not dims:
        return jnp.reshape(input, (1,))
    start, end = start_dim % len(dims), end_dim % len(dims)
    return jnp.reshape(input, (*dims[:start], -1, *dims[end + 1 :]))


def transpose(input: Array, *, axes: Sequence[int] | None) -> Array:
    """``jnp.transpose(input, axes)``"""
    return jnp.transpose(input, None if axes is None else tuple(axes))


def swapaxes(input: Array, *, axis1: int, axis2: int) -> Array:
    """``jnp.swapaxes(input, axis1, axis2)``"""
    return jnp.swapaxes(input, axis1, axis2)


def squeeze(input: Array, *, axis: int | Sequence[int] | None) -> Array:
    """``jnp.squeeze(input, axis)``"""
    return jnp.squeeze(input, axis=_tuple(axis))


def unsqueeze(input: Array, *, axis: int | Sequence[int]) -> Array:
    """``jnp.expand_dims(input, axis)``"""
    return jnp.expand_dims(input, _tuple(axis))


def broadcast_to(input: Array, *, shape: Sequence[int]) -> Array:
    """``jnp.broadcast_to(input, shape)``"""
    return jnp.broadcast_to(input, tuple(shape))


def concat(*inputs: Array, n: int, axis: int) -> Array:
    """``jnp.concatenate([input_0, ..., input_{n-1}], axis)``"""
    return jnp.concatenate(inputs, axis=axis)


def split(input: Array, *, sections: int | Sequence[int], axis: int) -> tuple[Array, ...]:
    """``jnp.split(input, sections, axis)``: an equal-part count or a list of split indices."""
    return tuple(jnp.split(input, sections if isinstance(sections, int) else list(sections), axis=axis))


def pad(input: Array, *, pad_width: Sequence[Sequence[int]], value: float) -> Array:
    """``jnp.pad(input, pad_width, constant_values=value)``"""
    return jnp.pad(input, [tuple(p) for p in pad_width], constant_values=value)


def index(input: Array, *, key: Any) -> Array:
    """``input[key]`` with a static basic-indexing key (ints, slices, ``None``, ``...``)."""
    return jnp.asarray(input)[key]


def gather(input: Array, index: Array, *, axis: int) -> Array:
    """``jnp.take_along_axis(input, index, axis)``"""
    return jnp.take_along_axis(input, index, axis=axis)


@uses_backend
def arange(backend: Any, *, start: float, stop: float | None, step: float) -> Array:
    """``jnp.arange(start, stop, step)``: backend float dtype if any bound is a float, else its int dtype."""
    dtype = backend.native_dtype(creation_kind(None, start, stop, step, counting=True))
    return jnp.arange(start, stop, step, dtype=dtype) if stop is not None else jnp.arange(start, dtype=dtype)


@uses_backend
def ones(backend: Any, *, shape: Sequence[int], dtype: Any) -> Array:
    """``jnp.ones(shape)`` in ``dtype`` (default: the backend float dtype)."""
    return jnp.ones(tuple(shape), dtype=backend.native_dtype(creation_kind(dtype)))


@uses_backend
def zeros(backend: Any, *, shape: Sequence[int], dtype: Any) -> Array:
    """``jnp.zeros(shape)`` in ``dtype`` (default: the backend float dtype)."""
    return jnp.zeros(tuple(shape), dtype=backend.native_dtype(creation_kind(dtype)))


@uses_backend
def full(backend: Any, *, shape: Sequence[int], fill_value: Any, dtype: Any) -> Array:
    """``jnp.full(shape, fill_value)``; without ``dtype`` the kind of ``fill_value`` decides."""
    return jnp.full(tuple(shape), fill_value, dtype=backend.native_dtype(creation_kind(dtype, fill_value)))


def zeros_like(input: Array) -> Array:
    """``jnp.zeros_like(input)``"""
    return jnp.zeros_like(input)


def ones_like(input: Array) -> Array:
    """``jnp.ones_like(input)``"""
    return jnp.ones_like(input)


@uses_backend
def positions(backend: Any, input: Array, *, axis: int) -> Array:
    """``arange(input.shape[axis])`` in the backend's int dtype (the length is static under ``jax.jit``)."""
    return jnp.arange(jnp.shape(input)[axis], dtype=backend.native_dtype("int"))


@uses_backend
def shape(backend: Any, input: Array) -> Array:
    """``array(input.shape)`` in the backend's int dtype (static under ``jax.jit``)."""
    return jnp.array(jnp.shape(input), dtype=backend.native_dtype("int"))


@uses_backend
def size(backend: Any, input: Array) -> Array:
    """``array(input.size)`` in the backend's int dtype."""
    return jnp.array(jnp.size(input), dtype=backend.native_dtype("int"))
