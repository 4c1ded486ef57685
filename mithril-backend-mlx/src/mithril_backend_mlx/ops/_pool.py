"""2-d max/average pooling over the last two axes, one strided slice per kernel offset (no loop over
output pixels); gradients are ``mx.vjp`` of these.

Example:
    >>> max_pool(mx.arange(16.0).reshape(4, 4), kernel_size=2, stride=None, padding=0, dilation=1).tolist()
    [[5.0, 7.0], [13.0, 15.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
from mithril.extend import WindowGeometry

__all__ = ["avg_pool", "max_pool"]

_FLOATS = (mx.float16, mx.bfloat16, mx.float32, mx.float64)


def pad_spatial(x: mx.array, pads: Sequence[tuple[int, int]], value: Any = 0) -> mx.array:
    """``x`` with its trailing axes padded by ``pads`` (``x`` itself when there is no padding)."""
    if not any(b or a for b, a in pads):
        return x
    return mx.pad(x, [(0, 0)] * (x.ndim - len(pads)) + [(b, a) for b, a in pads], constant_values=value)


def _geometry(x: mx.array, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> WindowGeometry:
    return WindowGeometry.pool2d(x.shape, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)


def _lowest(dtype: Any) -> Any:
    if dtype in _FLOATS:
        return float("-inf")
    if dtype == mx.bool_:
        return False
    return mx.iinfo(dtype).min


def _float(x: mx.array) -> mx.array:
    return x if x.dtype in _FLOATS else x.astype(mx.float32)


def max_pool(x: mx.array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> mx.array:
    """``torch.nn.functional.max_pool2d`` over the last two axes; padding reads as ``-inf``."""
    geometry = _geometry(x, kernel_size, stride, padding, dilation)
    xp = pad_spatial(x, geometry.pads, _lowest(x.dtype))
    windows = geometry.offset_slices()
    out = xp[(..., *next(windows)[1])]  # the first kernel offset's values, then the maximum with the others
    for _, window in windows:
        out = mx.maximum(out, xp[(..., *window)])
    return out


def _count(geometry: WindowGeometry, count_include_pad: bool, dtype: Any) -> float | mx.array:
    """The divisor of each output: the window size, or the number of unpadded elements it covers."""
    if count_include_pad or not geometry.padded:
        return float(geometry.kernel[0] * geometry.kernel[1])
    ones = pad_spatial(mx.ones(geometry.size, dtype=dtype), geometry.pads)
    count = mx.zeros(geometry.out, dtype=dtype)
    for _, window in geometry.offset_slices():
        count = count + ones[window]
    return count


def avg_pool(
    x: mx.array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any, count_include_pad: bool
) -> mx.array:
    """``torch.nn.functional.avg_pool2d`` over the last two axes (padding counts as zeros when
    ``count_include_pad``)."""
    x = _float(x)
    geometry = _geometry(x, kernel_size, stride, padding, dilation)
    xp = pad_spatial(x, geometry.pads)
    windows = geometry.offset_slices()
    total = xp[(..., *next(windows)[1])]  # the first kernel offset's values start the sum
    for _, window in windows:
        total = total + xp[(..., *window)]
    return total / _count(geometry, count_include_pad, x.dtype)

