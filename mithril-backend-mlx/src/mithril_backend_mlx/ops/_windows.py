"""Sliding-window geometry shared by convolution and pooling: normalised attributes, output sizes,
padding and the strided slice each kernel offset reads.

Spatial axes are always the trailing ``n`` axes of an array.

Example:
    >>> g = Geometry.of((3, 3), stride=1, padding=1, dilation=1, size=(5, 5))
    >>> g.out
    (5, 5)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mithril.primitives.catalogue.nn import conv_geometry

__all__ = ["Geometry", "pad_spatial", "crop_spatial", "offset_slices"]


@dataclass(frozen=True)
class Geometry:
    """Kernel, stride, ``[(before, after)]`` padding, dilation and the input/output spatial sizes."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    dilation: tuple[int, ...]
    size: tuple[int, ...]
    out: tuple[int, ...]

    @classmethod
    def of(cls, kernel: Sequence[int], *, stride: Any, padding: Any, dilation: Any, size: Sequence[int]) -> Geometry:
        """Normalise the attributes with core's ``conv_geometry`` (``stride=None`` -> kernel size)."""
        kernel = tuple(int(k) for k in kernel)
        st, pads, dil = conv_geometry({"stride": stride, "padding": padding, "dilation": dilation}, kernel)
        out = tuple((s + b + a - d * (k - 1) - 1) // t + 1 for s, (b, a), d, k, t in zip(size, pads, dil, kernel, st))
        if any(o <= 0 for o in out):
            raise ValueError(f"window {kernel} (dilation {dil}) does not fit the padded input {tuple(size)} {pads}")
        pairs = tuple((int(b), int(a)) for b, a in pads)
        return cls(kernel, tuple(st), pairs, tuple(dil), tuple(int(s) for s in size), out)

    @property
    def padded(self) -> bool:
        return any(b or a for b, a in self.pads)

    @property
    def low(self) -> list[int]:
        return [b for b, _ in self.pads]

    @property
    def high(self) -> list[int]:
        return [a for _, a in self.pads]


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


def offset_slices(geometry: Geometry) -> Iterator[tuple[slice, ...]]:
    """For each kernel offset (row-major), the slices of the padded input it reads for all outputs."""
    for offset in itertools.product(*(range(k) for k in geometry.kernel)):
        yield tuple(
            slice(o * d, o * d + t * (m - 1) + 1, t)
            for o, d, t, m in zip(offset, geometry.dilation, geometry.stride, geometry.out)
        )
