"""Padding of the spatial (trailing ``n``) axes, shared by convolution and pooling.

The geometry itself (normalised attributes, output sizes, kernel-offset slices) is core's
:class:`~mithril.primitives.geometry.WindowGeometry`.

Example:
    >>> pad_spatial(mx.ones((1, 2)), ((1, 0),)).tolist()
    [[0.0, 1.0, 1.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx

__all__ = ["pad_spatial", "crop_spatial"]


def pad_spatial(x: mx.array, pads: Sequence[tuple[int, int]], value: Any = 0) -> mx.array:
    """``x`` with its trailing axes padded by ``pads`` (``x`` itself when there is no padding)."""
    if not any(b or a for b, a in pads):
        return x
    return mx.pad(x, [(0, 0)] * (x.ndim - len(pads)) + [tuple(p) for p in pads], constant_values=value)


def crop_spatial(x: mx.array, pads: Sequence[tuple[int, int]]) -> mx.array:
    """Inverse of :func:`pad_spatial`."""
    if not any(b or a for b, a in pads):
        return x
    n = len(pads)
    return x[(..., *(slice(b, s - a) for s, (b, a) in zip(x.shape[-n:], pads)))]
