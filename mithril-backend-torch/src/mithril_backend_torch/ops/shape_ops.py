"""Shape manipulation, static indexing and array creation.

Creation ops take the backend (``uses_backend``) so floats get the backend dtype and land on its device.

Example:
    >>> import torch
    >>> [tuple(part.shape) for part in split(torch.zeros(6, 2), sections=[1, 4], axis=0)]
    [(1, 2), (3, 2), (2, 2)]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from mithril.errors import ShapeError
from mithril.extend import dtype_constant as dtype_constant_value
from mithril.extend import rules, uses_backend

Tensor = torch.Tensor


def reshape(input: Tensor, *, shape: Sequence[int | None]) -> Tensor:
    """``input.reshape(shape)``; a ``None`` entry keeps the input dim at that position."""
    target = tuple(input.shape[i] if s is None else int(s) for i, s in enumerate(shape))
    return torch.reshape(input, target)


def flatten(input: Tensor, *, start_dim: int, end_dim: int) -> Tensor:
    """Merge axes ``start_dim..end_dim`` (``torch.flatten``)."""
    return torch.flatten(input, start_dim, end_dim) if input.ndim else input.reshape(1)


def transpose(input: Tensor, *, axes: Sequence[int] | None) -> Tensor:
    """``np.transpose(input, axes)`` (``None`` reverses the axes)."""
    # a tuple, not a range: torch.compile traces permute(*range(...)) wrongly
    return input.permute(tuple(range(input.ndim - 1, -1, -1)) if axes is None else tuple(axes))


def swapaxes(input: Tensor, *, axis1: int, axis2: int) -> Tensor:
    """``np.swapaxes(input, axis1, axis2)``"""
    return torch.swapaxes(input, axis1, axis2)


def _size_one_axes(input: Tensor, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None:
        return tuple(i for i, n in enumerate(input.shape) if n == 1)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if input.shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} has size {input.shape[a]}, not 1 (shape {tuple(input.shape)})")
    return tuple(a % input.ndim for a in axes)


def squeeze(input: Tensor, *, axis: int | Sequence[int] | None) -> Tensor:
    """``np.squeeze(input, axis)`` (an axis that is not of size 1 is an error, as in NumPy)."""
    return torch.squeeze(input, _size_one_axes(input, axis))


def unsqueeze(input: Tensor, *, axis: int | Sequence[int]) -> Tensor:
    """``np.expand_dims(input, axis)``: ``axis`` positions refer to the result."""
    if isinstance(axis, int):
        return torch.unsqueeze(input, axis)
    rank = input.ndim + len(axis)
    out = input
    for a in sorted(a % rank for a in axis):
        out = torch.unsqueeze(out, a)
    return out


def broadcast_to(input: Tensor, *, shape: Sequence[int]) -> Tensor:
    """``np.broadcast_to(input, shape)`` (a view)."""
    return torch.broadcast_to(input, tuple(shape))


def concat(*inputs: Tensor, n: int, axis: int) -> Tensor:
    """``np.concatenate([input_0, ..., input_{n-1}], axis)``"""
    return torch.cat(inputs, dim=axis)


def split(input: Tensor, *, sections: int | Sequence[int], axis: int) -> tuple[Tensor, ...]:
    """``np.split(input, sections, axis)``: an equal-part count or a list of split indices."""
    if isinstance(sections, int):
        if input.shape[axis] % sections:
            raise ShapeError(f"split: axis {axis} of size {input.shape[axis]} does not split into {sections} parts")
        return tuple(torch.split(input, input.shape[axis] // sections, dim=axis))
    # torch.split (sizes) rather than tensor_split: its backward writes each part's gradient into one
    # buffer instead of adding a zero-filled full-size tensor per part
    bounds = [0, *(int(s) for s in sections), input.shape[axis]]
    if all(0 <= a <= b for a, b in itertools.pairwise(bounds)):
        return tuple(torch.split(input, [b - a for a, b in itertools.pairwise(bounds)], dim=axis))
    return tuple(torch.tensor_split(input, [int(s) for s in sections], dim=axis))


def pad(input: Tensor, *, pad_width: Sequence[Sequence[int]], value: float) -> Tensor:
    """``np.pad(input, pad_width, constant_values=value)``"""
    flat = [int(v) for before_after in reversed(pad_width) for v in before_after]  # last axis first
    return F.pad(input, flat, mode="constant", value=value)


def _positive_key(key: Any, shape: Sequence[int]) -> tuple[Any, tuple[int, ...]]:
    """A basic-indexing key without negative steps, and the input axes to flip first.

    ``x[key] == x.flip(axes)[new_key]`` (torch slicing has no negative steps).

    >>> _positive_key(slice(4, 0, -2), (6, 3))
    ((slice(1, 4, 2),), (0,))
    """
    items = list(key) if isinstance(key, tuple) else [key]
    if not any(isinstance(k, slice) and k.step is not None and k.step < 0 for k in items):
        return key, ()
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if Ellipsis in items:
        pos = items.index(Ellipsis)
        items[pos : pos + 1] = [slice(None)] * (len(shape) - used)
    flips: list[int] = []
    out: list[Any] = []
    axis = 0
    for item in items:
        if item is None:
            out.append(None)
            continue
        if isinstance(item, slice) and item.step is not None and item.step < 0:
            size = shape[axis]
            positions = range(*item.indices(size))
            if len(positions) == 0:
                item = slice(0, 0)
            else:
                item = slice(size - 1 - positions[0], size - positions[-1], -item.step)
            flips.append(axis)
        out.append(item)
        axis += 1
    return tuple(out), tuple(flips)


def index(input: Tensor, *, key: Any) -> Tensor:
    """``input[key]`` with a static basic-indexing key (ints, slices incl. negative steps, ``None``, ``...``)."""
    key, flips = _positive_key(key, input.shape)
    return (input.flip(flips) if flips else input)[key]


def gather(input: Tensor, index: Tensor, *, axis: int) -> Tensor:
    """``np.take_along_axis(input, index, axis)``"""
    return torch.take_along_dim(input, index, dim=axis)


def dynamic_update_slice(input: Tensor, update: Tensor, start: Tensor, *, axis: int) -> Tensor:
    """``input`` with ``update`` written at ``start .. start + T - 1`` along ``axis`` (``index_copy``: no
    host sync for ``start``)."""
    slots = start.reshape(1) + torch.arange(update.shape[axis], device=update.device, dtype=start.dtype)
    return input.index_copy(axis, slots, update.to(input.dtype))


@uses_backend
def arange(backend: Any, *, start: float, stop: float | None, step: float) -> Tensor:
    """``np.arange(start, stop, step)``: backend float dtype if any bound is a float, else int64."""
    dtype = backend.native_dtype(rules.creation_kind(None, start, stop, step, counting=True))
    if stop is None:
        start, stop = 0, start
    return torch.arange(start, stop, step, dtype=dtype, device=backend.torch_device)


@uses_backend
def ones(backend: Any, *, shape: Sequence[int], dtype: Any) -> Tensor:
    """``np.ones(shape)`` in ``dtype`` (default: the backend float dtype)."""
    return torch.ones(tuple(shape), dtype=backend.native_dtype(rules.creation_kind(dtype)), device=backend.torch_device)


@uses_backend
def zeros(backend: Any, *, shape: Sequence[int], dtype: Any) -> Tensor:
    """``np.zeros(shape)`` in ``dtype`` (default: the backend float dtype)."""
    dtype = backend.native_dtype(rules.creation_kind(dtype))
    return torch.zeros(tuple(shape), dtype=dtype, device=backend.torch_device)


@uses_backend
def full(backend: Any, *, shape: Sequence[int], fill_value: Any, dtype: Any) -> Tensor:
    """``np.full(shape, fill_value)``; without ``dtype`` the kind of ``fill_value`` decides."""
    target = backend.native_dtype(rules.creation_kind(dtype, fill_value))
    return torch.full(tuple(shape), fill_value, dtype=target, device=backend.torch_device)


def zeros_like(input: Tensor) -> Tensor:
    """``np.zeros_like(input)``"""
    return torch.zeros_like(input)


def ones_like(input: Tensor) -> Tensor:
    """``np.ones_like(input)``"""
    return torch.ones_like(input)


@uses_backend
def dtype_constant(backend: Any, input: Any, *, constant: str) -> Tensor:
    """Mithril's per-dtype ``constant`` (:func:`mithril.numerics.dtype_constant`) as a 0-d tensor of ``input``'s
    float dtype on its device (the backend's float dtype and device for int, bool or Python input)."""
    if isinstance(input, Tensor) and input.is_floating_point():
        dtype, device = input.dtype, input.device
    else:
        dtype, device = backend.native_dtype(), getattr(input, "device", backend.torch_device)
    return torch.full((), dtype_constant_value(constant, dtype), dtype=dtype, device=device)


def positions(input: Tensor, *, axis: int) -> Tensor:
    """``arange(input.shape[axis])`` as int64."""
    return torch.arange(input.shape[axis], dtype=torch.int64, device=input.device)


def shape(input: Tensor) -> Tensor:
    """``np.array(input.shape)`` as int64."""
    return torch.tensor(tuple(input.shape), dtype=torch.int64, device=input.device)


def size(input: Tensor) -> Tensor:
    """``np.array(input.size)`` as int64."""
    return torch.tensor(input.numel(), dtype=torch.int64, device=input.device)


def sum_to_like(input: Tensor, like: Tensor) -> Tensor:
    """Sum ``input`` over its broadcast axes (extra leading ones, and those where ``like`` has size 1)."""
    shape = tuple(like.shape)
    if tuple(input.shape) == shape:
        return input
    summed = rules.broadcast_sum_axes(input.shape, shape)
    if summed is None:  # input broadcasts up to like
        return torch.broadcast_to(input, shape)
    return torch.sum(input, dim=summed, keepdim=True).reshape(shape) if summed else input.reshape(shape)


def reshape_like(input: Tensor, like: Tensor) -> Tensor:
    """``input.reshape(like.shape)``"""
    return torch.reshape(input, like.shape)


def broadcast_to_like(input: Tensor, like: Tensor) -> Tensor:
    """``np.broadcast_to(input, like.shape)``"""
    return torch.broadcast_to(input, like.shape)
