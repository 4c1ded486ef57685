"""2-d max/average pooling over the last two axes and their gradients, one strided slice per kernel
offset (no loop over output pixels).

Example:
    >>> max_pool(mx.arange(16.0).reshape(4, 4), kernel_size=2, stride=None, padding=0, dilation=1).tolist()
    [[5.0, 7.0], [13.0, 15.0]]
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mithril.primitives.geometry import WindowGeometry

from ._windows import crop_spatial, pad_spatial

__all__ = ["max_pool", "avg_pool", "max_pool_grad", "avg_pool_grad"]

_FLOATS = (mx.float16, mx.bfloat16, mx.float32, mx.float64)


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
    out = None
    for _, window in geometry.offset_slices():
        values = xp[(..., *window)]
        out = values if out is None else mx.maximum(out, values)
    return out


def _count(geometry: WindowGeometry, count_include_pad: bool, dtype: Any) -> Any:
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
    total = None
    for _, window in geometry.offset_slices():
        values = xp[(..., *window)]
        total = values if total is None else total + values
    return total / _count(geometry, count_include_pad, x.dtype)


def max_pool_grad(
    output_grad: mx.array, x: mx.array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any
) -> mx.array:
    """Route each output gradient to the first arg-max (row-major) of its window; shaped like ``x``."""
    geometry = _geometry(x, kernel_size, stride, padding, dilation)
    xp = pad_spatial(x, geometry.pads, _lowest(x.dtype))
    best = max_pool(x, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)
    grad = mx.broadcast_to(_float(output_grad), best.shape)
    dxp = mx.zeros(xp.shape, dtype=grad.dtype)
    pending = mx.ones(best.shape, dtype=mx.bool_)  # windows whose arg-max is not found yet
    for _, window in geometry.offset_slices():
        hit = mx.logical_and(xp[(..., *window)] == best, pending)
        pending = mx.logical_and(pending, mx.logical_not(hit))
        dxp = dxp.at[(..., *window)].add(mx.where(hit, grad, 0))
    return crop_spatial(dxp, geometry.pads)


def avg_pool_grad(
    output_grad: mx.array,
    x: mx.array,
    *,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    count_include_pad: bool,
) -> mx.array:
    """Spread each output gradient evenly over its window; shaped like ``x``."""
    geometry = _geometry(x, kernel_size, stride, padding, dilation)
    grad = _float(output_grad)
    grad = grad / _count(geometry, count_include_pad, grad.dtype)
    padded_shape = (*x.shape[:-2], *geometry.padded_size)
    dxp = mx.zeros(padded_shape, dtype=grad.dtype)
    for _, window in geometry.offset_slices():
        dxp = dxp.at[(..., *window)].add(grad)
    return crop_spatial(dxp, geometry.pads)
