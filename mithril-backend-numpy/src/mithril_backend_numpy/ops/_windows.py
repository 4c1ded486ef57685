"""Sliding-window machinery shared by convolution and pooling: geometry, padding, im2col and the
kernel-offset slices used to scatter gradients back (col2im).

Spatial axes are always the trailing ``n`` axes of an array.

Example:
    >>> import numpy as np
    >>> g = Geometry.of((3, 3), stride=1, padding=1, dilation=1, size=(5, 5))
    >>> g.out
    (5, 5)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mithril.primitives.catalogue.nn import conv_geometry

__all__ = ["Geometry", "pad_spatial", "crop_spatial", "window_view", "offset_slices"]


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
        return cls(kernel, tuple(st), tuple(tuple(p) for p in pads), tuple(dil), tuple(size), out)  # type: ignore[arg-type]

    @property
    def padded(self) -> bool:
        return any(b or a for b, a in self.pads)

    @property
    def pointwise(self) -> bool:
        """A 1x1 kernel with stride 1 and no padding: the convolution is a plain matmul."""
        return not self.padded and all(k == 1 for k in self.kernel) and all(s == 1 for s in self.stride)


def pad_spatial(x: np.ndarray, pads: Sequence[tuple[int, int]], value: float = 0) -> np.ndarray:
    """``x`` with its trailing axes padded by ``pads`` (a fresh array; ``x`` itself when no padding)."""
    if not any(b or a for b, a in pads):
        return x
    n = len(pads)
    shape = (*x.shape[:-n], *(s + b + a for s, (b, a) in zip(x.shape[-n:], pads)))
    out = np.full(shape, value, dtype=x.dtype) if value else np.zeros(shape, dtype=x.dtype)
    out[(..., *(slice(b, b + s) for s, (b, _) in zip(x.shape[-n:], pads)))] = x
    return out


def crop_spatial(x: np.ndarray, pads: Sequence[tuple[int, int]]) -> np.ndarray:
    """Inverse of :func:`pad_spatial` (a view)."""
    if not any(b or a for b, a in pads):
        return x
    n = len(pads)
    return x[(..., *(slice(b, s - a) for s, (b, a) in zip(x.shape[-n:], pads)))]


def window_view(xp: np.ndarray, geometry: Geometry, lead_order: Sequence[int] | None = None) -> np.ndarray:
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
        *(d * s for d, s in zip(geometry.dilation, spatial)),
        *(t * s for t, s in zip(geometry.stride, spatial)),
    )
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def offset_slices(geometry: Geometry) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """For each kernel offset (row-major), the slices of the padded input it reads for all outputs."""
    for offset in np.ndindex(*geometry.kernel):
        yield (
            offset,
            tuple(
                slice(o * d, o * d + t * (m - 1) + 1, t)
                for o, d, t, m in zip(offset, geometry.dilation, geometry.stride, geometry.out)
            ),
        )


def prod(values: Sequence[int]) -> int:
    return math.prod(values)
