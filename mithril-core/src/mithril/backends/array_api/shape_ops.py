"""Shape and creation primitives. Creation ops take the backend (``uses_backend``) so floats get the
backend's float dtype and ints its int dtype.

Example:
    >>> import numpy as np
    >>> from mithril.backends.array_api import Binding
    >>> build(Binding(np, {}))["flatten"](np.ones((2, 3, 4)), start_dim=1, end_dim=-1).shape
    (2, 12)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...numerics import dtype_constant as dtype_constant_value
from ...primitives import uses_backend
from ...primitives.shape_rules import broadcast_sum_axes, creation_kind
from ._binding import Binding, Impl

__all__ = ["build"]


def build(b: Binding) -> dict[str, Impl]:
    """The shape and creation implementations bound to ``b.xp``."""
    return _layout(b) | _creation(b) | _like(b)


def _layout(b: Binding) -> dict[str, Impl]:
    """Reshaping, reordering, joining, splitting and indexing."""
    xp, seq, axes = b.xp, b.sequence, b.axes
    reshape_, transpose_, squeeze_, expand_dims = xp.reshape, xp.transpose, xp.squeeze, xp.expand_dims
    broadcast_to_, concatenate, split_, pad_ = xp.broadcast_to, xp.concatenate, xp.split, xp.pad
    take_along_axis = xp.take_along_axis

    def reshape(input: Any, *, shape: Sequence[int | None]) -> Any:
        """``input.reshape(shape)``; a ``None`` entry keeps the input dim at that position."""
        dims = input.shape
        return reshape_(input, seq(dims[i] if s is None else int(s) for i, s in enumerate(shape)))

    def flatten(input: Any, *, start_dim: int, end_dim: int) -> Any:
        """Merge axes ``start_dim..end_dim`` (``torch.flatten``)."""
        dims = tuple(input.shape)
        if not dims:
            return reshape_(input, seq((1,)))
        start, end = start_dim % len(dims), end_dim % len(dims)
        return reshape_(input, seq((*dims[:start], -1, *dims[end + 1 :])))

    def transpose(input: Any, *, axes: Sequence[int] | None) -> Any:
        """``transpose(input, axes)`` (``None`` reverses the axes; negative axes allowed)."""
        if axes is None:
            return transpose_(input)
        return transpose_(input, seq(a % input.ndim for a in axes))

    def swapaxes(input: Any, *, axis1: int, axis2: int) -> Any:
        """``swapaxes(input, axis1, axis2)``"""
        return xp.swapaxes(input, axis1, axis2)

    def squeeze(input: Any, *, axis: int | Sequence[int] | None) -> Any:
        """``squeeze(input, axis)``"""
        return squeeze_(input, axis=axes(axis))

    def unsqueeze(input: Any, *, axis: int | Sequence[int]) -> Any:
        """``expand_dims(input, axis)``"""
        return expand_dims(input, axes(axis))

    def broadcast_to(input: Any, *, shape: Sequence[int]) -> Any:
        """``broadcast_to(input, shape)``"""
        return broadcast_to_(input, seq(shape))

    def concat(*inputs: Any, n: int, axis: int) -> Any:
        """``concatenate([input_0, ..., input_{n-1}], axis)``"""
        return concatenate(list(inputs), axis=axis)

    def split(input: Any, *, sections: int | Sequence[int], axis: int) -> tuple[Any, ...]:
        """``split(input, sections, axis)``: an equal-part count or a list of split indices."""
        return tuple(split_(input, sections if isinstance(sections, int) else list(sections), axis=axis))

    def pad(input: Any, *, pad_width: Sequence[Sequence[int]], value: float) -> Any:
        """``pad(input, pad_width, constant_values=value)``"""
        return pad_(input, [tuple(p) for p in pad_width], constant_values=value)

    def index(input: Any, *, key: Any) -> Any:
        """``input[key]`` with a static basic-indexing key (ints, slices, ``None``, ``...``)."""
        return input[key]

    def gather(input: Any, index: Any, *, axis: int) -> Any:
        """``take_along_axis(input, index, axis)``"""
        return take_along_axis(input, index, axis=axis)

    def dynamic_update_slice(input: Any, update: Any, start: Any, *, axis: int) -> Any:
        """``input`` with ``update`` written at ``start .. start + T - 1`` along ``axis`` (``T`` = its size
        there): a ``where`` over the input of the update's rows taken at ``slot - start``."""
        axis %= input.ndim
        size, length = input.shape[axis], update.shape[axis]
        offsets = xp.arange(size) - reshape_(start, seq((1,)))  # [size]: slot - start
        hit = (offsets >= 0) & (offsets < length)
        taken = xp.take(update, xp.clip(offsets, 0, length - 1), axis=axis).astype(input.dtype)
        column = seq(size if i == axis else 1 for i in range(input.ndim))
        return xp.where(reshape_(hit, column), taken, input)

    functions = (
        reshape,
        flatten,
        transpose,
        swapaxes,
        squeeze,
        unsqueeze,
        broadcast_to,
        concat,
        split,
        pad,
        index,
        gather,
        dynamic_update_slice,
    )
    return {f.__name__: f for f in functions}


def _creation(b: Binding) -> dict[str, Impl]:
    """New arrays: ranges, constants, and arrays of another array's shape or dtype."""
    xp, seq = b.xp, b.sequence
    arange_, array, ones_, zeros_, full_ = xp.arange, xp.array, xp.ones, xp.zeros, xp.full

    @uses_backend
    def arange(backend: Any, *, start: float, stop: float | None, step: float) -> Any:
        """``arange(start, stop, step)``: backend float dtype if any bound is a float, else its int dtype."""
        dtype = backend.native_dtype(creation_kind(None, start, stop, step, counting=True))
        return arange_(start, stop, step, dtype=dtype) if stop is not None else arange_(start, dtype=dtype)

    @uses_backend
    def ones(backend: Any, *, shape: Sequence[int], dtype: Any) -> Any:
        """``ones(shape)`` in ``dtype`` (default: the backend float dtype)."""
        return ones_(seq(shape), dtype=backend.native_dtype(creation_kind(dtype)))

    @uses_backend
    def zeros(backend: Any, *, shape: Sequence[int], dtype: Any) -> Any:
        """``zeros(shape)`` in ``dtype`` (default: the backend float dtype)."""
        return zeros_(seq(shape), dtype=backend.native_dtype(creation_kind(dtype)))

    @uses_backend
    def full(backend: Any, *, shape: Sequence[int], fill_value: Any, dtype: Any) -> Any:
        """``full(shape, fill_value)``; without ``dtype`` the kind of ``fill_value`` decides."""
        return full_(seq(shape), fill_value, dtype=backend.native_dtype(creation_kind(dtype, fill_value)))

    @uses_backend
    def dtype_constant(backend: Any, input: Any, *, constant: str) -> Any:
        """Mithril's per-dtype ``constant`` (:func:`mithril.numerics.dtype_constant`) as a 0-d array of
        ``input``'s float dtype, or the backend's float dtype for int and bool input."""
        dtype = input.dtype if b.is_float(input) else backend.native_dtype()
        return full_((), dtype_constant_value(constant, dtype), dtype=dtype)

    @uses_backend
    def positions(backend: Any, input: Any, *, axis: int) -> Any:
        """``arange(input.shape[axis])`` in the backend's int dtype (static under a JIT)."""
        return arange_(input.shape[axis], dtype=backend.native_dtype("int"))

    @uses_backend
    def shape(backend: Any, input: Any) -> Any:
        """``input.shape`` as an array of the backend's int dtype."""
        return array(list(input.shape), dtype=backend.native_dtype("int"))

    @uses_backend
    def size(backend: Any, input: Any) -> Any:
        """``input.size`` as a 0-d array of the backend's int dtype."""
        return array(input.size, dtype=backend.native_dtype("int"))

    functions = (arange, ones, zeros, full, dtype_constant, positions, shape, size)
    return {f.__name__: f for f in functions} | {"zeros_like": xp.zeros_like, "ones_like": xp.ones_like}


def _like(b: Binding) -> dict[str, Impl]:
    """Summing, reshaping or broadcasting to another array's shape (gradient helpers)."""
    xp, seq, axes = b.xp, b.sequence, b.axes
    reshape_, broadcast_to_, sum_ = xp.reshape, xp.broadcast_to, xp.sum

    def sum_to_like(input: Any, like: Any) -> Any:
        """Sum ``input`` over its broadcast axes (extra leading ones, and those where ``like`` has size 1)."""
        shape, given = tuple(like.shape), tuple(getattr(input, "shape", ()))
        if given == shape:
            return input
        summed = broadcast_sum_axes(given, shape)
        if summed is None:  # input broadcasts up to like
            return broadcast_to_(input, seq(shape))
        return reshape_(sum_(input, axis=axes(summed), keepdims=True) if summed else input, seq(shape))

    def reshape_like(input: Any, like: Any) -> Any:
        """``input.reshape(like.shape)``"""
        return reshape_(input, seq(like.shape))

    def broadcast_to_like(input: Any, like: Any) -> Any:
        """``broadcast_to(input, like.shape)``"""
        return broadcast_to_(input, seq(like.shape))

    return {f.__name__: f for f in (sum_to_like, reshape_like, broadcast_to_like)}
