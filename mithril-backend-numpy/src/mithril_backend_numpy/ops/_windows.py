"""Sliding-window array machinery shared by convolution and pooling: padding and im2col views.

The geometry itself (normalised attributes, output sizes, kernel-offset slices) is core's
:class:`~mithril.primitives.geometry.WindowGeometry`. Spatial axes are always the trailing ``n`` axes.

Example:
    >>> import numpy as np
    >>> pad_spatial(np.ones((1, 2)), ((1, 0),)).tolist()
    [[0.0, 1.0, 1.0]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import EllipsisType

import numpy as np
from mithril.extend import WindowGeometry

__all__ = ["Index", "crop_spatial", "pad_spatial", "prod", "window_view"]

Index = tuple[EllipsisType | slice, ...]
"""``x[(..., *slices)]``: the trailing axes sliced (annotating the key spares mypy inferring it from the
first of ``ndarray.__getitem__``'s overloads)."""


def pad_spatial(x: np.ndarray, pads: Sequence[tuple[int, int]], value: float = 0) -> np.ndarray:
    """``x`` with its trailing axes padded by ``pads`` (a fresh array; ``x`` itself when no padding)."""
    if not any(b or a for b, a in pads):
        return x
    n = len(pads)
    shape = (*x.shape[:-n], *(s + b + a for s, (b, a) in zip(x.shape[-n:], pads, strict=True)))
    out = np.full(shape, value, dtype=x.dtype) if value else np.zeros(shape, dtype=x.dtype)
    inner: Index = (..., *(slice(b, b + s) for s, (b, _) in zip(x.shape[-n:], pads, strict=True)))
    out[inner] = x
    return out


def crop_spatial(x: np.ndarray, pads: Sequence[tuple[int, int]]) -> np.ndarray:
    """Inverse of :func:`pad_spatial` (a view)."""
    if not any(b or a for b, a in pads):
        return x
    n = len(pads)
    inner: Index = (..., *(slice(b, s - a) for s, (b, a) in zip(x.shape[-n:], pads, strict=True)))
    return x[inner]


def window_view(xp: np.ndarray, geometry: WindowGeometry, lead_order: Sequence[int] | None = None) -> np.ndarray:
    """A read-only strided view of the windows of padded ``xp``: ``[*lead, *kernel, *out]``.

    ``lead_order`` permutes the leading axes (other layouts: :func:`numpy.moveaxis` on the view).
    """
    n = len(geometry.kernel)
    lead_shape, lead_strides = xp.shape[:-n], xp.strides[:-n]
    if lead_order is not None:
        lead_shape = tuple(lead_shape[i] for i in lead_order)
        lead_strides = tuple(lead_strides[i] for i in lead_order)
    spatial = xp.strides[-n:]
    shape = (*lead_shape, *geometry.kernel, *geometry.out)
    strides = (
        *lead_strides,
        *(d * s for d, s in zip(geometry.dilation, spatial, strict=True)),
        *(t * s for t, s in zip(geometry.stride, spatial, strict=True)),
    )
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def prod(values: Sequence[int]) -> int:
    return math.prod(values)
