"""2-d max/average pooling over the last two axes and their gradients, one vectorised strided slice
per kernel offset (no Python loop over output pixels); max pooling is separable (rows, then columns).

Example:
    >>> import numpy as np
    >>> max_pool(np.arange(16.0).reshape(4, 4), kernel_size=2, stride=None, padding=0, dilation=1)
    array([[ 5.,  7.],
           [13., 15.]])
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mithril.extend import WindowGeometry

from ._windows import Index, crop_spatial, pad_spatial

__all__ = ["avg_pool", "avg_pool_grad", "max_pool", "max_pool_grad"]


def _geometry(x: np.ndarray, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> WindowGeometry:
    return WindowGeometry.pool2d(
        np.shape(x), kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation
    )


def _lowest(dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def _float(x: np.ndarray) -> np.ndarray:
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def max_pool(x: np.ndarray, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> np.ndarray:
    """``torch.nn.functional.max_pool2d`` over the last two axes; padding reads as ``-inf``."""
    x = np.asarray(x)
    geometry = _geometry(x, kernel_size, stride, padding, dilation)
    xp = pad_spatial(x, geometry.pads, _lowest(x.dtype)) if geometry.padded else x
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = geometry.kernel, geometry.stride, geometry.dilation, geometry.out
    # separable: the maximum over each row's kw window offsets, then over kh of those rows (kh + kw passes
    # instead of kh * kw; the first of equal values in row-major window order wins, as in one pass)
    rows = xp[..., : (ow - 1) * sw + 1 : sw].copy()
    for j in range(1, kw):
        np.maximum(rows, xp[..., j * dw : j * dw + (ow - 1) * sw + 1 : sw], out=rows)
    out = rows[..., : (oh - 1) * sh + 1 : sh, :].copy()
    for i in range(1, kh):
        np.maximum(out, rows[..., i * dh : i * dh + (oh - 1) * sh + 1 : sh, :], out=out)
    return out


def _count(geometry: WindowGeometry, count_include_pad: bool, dtype: np.dtype) -> Any:
    """The divisor of each output: the window size, or the number of unpadded elements it covers."""
    if count_include_pad or not geometry.padded:
        return dtype.type(np.prod(geometry.kernel))
    ones = pad_spatial(np.ones(geometry.size, dtype=dtype), geometry.pads)
    count = np.zeros(geometry.out, dtype=dtype)
    for _, window in geometry.offset_slices():
        count += ones[window]
    return count


def avg_pool(
    x: np.ndarray, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any, count_include_pad: bool
) -> np.ndarray:
    """``torch.nn.functional.avg_pool2d`` over the last two axes (padding counts as zeros when
    ``count_include_pad``)."""
    x = _float(np.asarray(x))
    geometry = _geometry(x, kernel_size, stride, padding, dilation)
    xp = pad_spatial(x, geometry.pads)
    windows = geometry.offset_slices()
    first: Index = (..., *next(windows)[1])  # the first kernel offset's values start the sum
    total = xp[first].copy()
    for _, window in windows:
        inner: Index = (..., *window)
        np.add(total, xp[inner], out=total)
    total /= _count(geometry, count_include_pad, x.dtype)
    return total


def max_pool_grad(
    output_grad: np.ndarray, x: np.ndarray, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any
) -> np.ndarray:
    """Route each output gradient to the first arg-max (row-major) of its window; shaped like ``x``."""
    x = np.asarray(x)
    geometry = _geometry(x, kernel_size, stride, padding, dilation)
    xp = pad_spatial(x, geometry.pads, _lowest(x.dtype)) if geometry.padded else x
    best = max_pool(x, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)
    grad = np.broadcast_to(_float(np.asarray(output_grad)), best.shape)
    dxp = np.zeros(xp.shape, dtype=grad.dtype)
    pending = np.ones(best.shape, dtype=bool)  # windows whose arg-max is not found yet
    for _, window in geometry.offset_slices():
        inner: Index = (..., *window)
        hit = xp[inner] == best
        hit &= pending
        pending &= ~hit
        dxp[inner] += np.where(hit, grad, 0)
    return np.ascontiguousarray(crop_spatial(dxp, geometry.pads))


def avg_pool_grad(
    output_grad: np.ndarray,
    x: np.ndarray,
    *,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    count_include_pad: bool,
) -> np.ndarray:
    """Spread each output gradient evenly over its window; shaped like ``x``."""
    x = np.asarray(x)
    geometry = _geometry(x, kernel_size, stride, padding, dilation)
    grad = _float(np.asarray(output_grad))
    grad = grad / _count(geometry, count_include_pad, grad.dtype)
    padded_shape = (*x.shape[:-2], *geometry.padded_size)
    dxp = np.zeros(padded_shape, dtype=grad.dtype)
    for _, window in geometry.offset_slices():
        inner: Index = (..., *window)
        dxp[inner] += grad
    return np.ascontiguousarray(crop_spatial(dxp, geometry.pads))
