"""N-d grouped convolution (PyTorch semantics: NC..., weight ``[O, C/groups, *k]``) and its gradients.

Forward: im2col through a strided view (one copy) and one batched BLAS matmul. Gradient of the weight:
the same columns times the output gradient, with batch and pixels merged into one GEMM. Gradient of the
input: weight^T times the output gradient (one GEMM), then col2im as one strided slice-add per kernel
offset. A 1x1 / stride 1 / unpadded kernel skips im2col entirely.

Example:
    >>> import numpy as np
    >>> x, w = np.ones((1, 2, 4, 4), np.float32), np.ones((3, 2, 3, 3), np.float32)
    >>> conv_forward(x, w, None, stride=1, padding=1, dilation=1, groups=1)[0, 0, 1, 1]
    np.float32(18.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mithril.errors import ShapeError
from mithril.extend import WindowGeometry, check_groups

from ._windows import crop_spatial, pad_spatial, prod, window_view

__all__ = ["conv_forward", "conv_grad_input", "conv_grad_weight"]


def _columns(x: np.ndarray, geometry: WindowGeometry, groups: int) -> np.ndarray:
    """im2col of ``x`` [N, C, *S] -> ``[N, groups, C/groups * prod(kernel), prod(out)]`` (one copy)."""
    n_batch, channels = x.shape[:2]
    xp = pad_spatial(x, geometry.pads)
    grouped = xp.reshape(n_batch, groups, channels // groups, *xp.shape[2:])
    view = window_view(grouped, geometry)  # [N, g, Cg, *k, *out]
    return view.reshape(n_batch, groups, -1, prod(geometry.out))


def conv_forward(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> np.ndarray:
    """``torch.nn.functional.conv{n}d(x, weight, bias, stride, padding, dilation, groups)``."""
    dtype = np.result_type(x, weight)
    x, weight = np.asarray(x, dtype=dtype), np.asarray(weight, dtype=dtype)
    n = weight.ndim - 2
    n_batch, channels = x.shape[:2]
    out_channels = weight.shape[0]
    check_groups(channels, out_channels, groups)
    geometry = WindowGeometry.of(weight.shape[2:], stride=stride, padding=padding, dilation=dilation, size=x.shape[2:])
    w = weight.reshape(groups, out_channels // groups, -1)  # [g, Og, Cg * prod(k)]
    if geometry.pointwise:
        cols = x.reshape(n_batch, groups, channels // groups, -1)
    else:
        cols = _columns(x, geometry, groups)
    out: np.ndarray = np.matmul(w, cols).reshape(n_batch, out_channels, *geometry.out)  # [N, g, Og, P] -> [N, O, *out]
    if bias is not None:
        out += np.asarray(bias, dtype=dtype).reshape(out_channels, *(1,) * n)
    return out


def conv_grad_weight(
    output_grad: np.ndarray, x: np.ndarray, like: np.ndarray, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> np.ndarray:
    """Gradient of a convolution with respect to its weight, shaped like ``like``."""
    dtype = np.result_type(output_grad, x)
    x = np.asarray(x, dtype=dtype)
    n_batch, channels = x.shape[:2]
    out_channels = like.shape[0]
    check_groups(channels, out_channels, groups)
    geometry = WindowGeometry.of(like.shape[2:], stride=stride, padding=padding, dilation=dilation, size=x.shape[2:])
    if geometry.out != tuple(output_grad.shape[2:]):
        raise ShapeError(f"conv_grad_weight: output_grad spatial shape {output_grad.shape[2:]} != {geometry.out}")
    og = out_channels // groups
    if n_batch == 1:
        gy = output_grad.reshape(groups, og, -1)
        cols = x.reshape(groups, channels // groups, -1) if geometry.pointwise else _columns(x, geometry, groups)[0]
    else:
        # batch and pixels merged into one GEMM per group: [g, Og, N*P] @ [g, N*P, K]
        gy = np.moveaxis(output_grad.reshape(n_batch, groups, og, -1), 0, 2).reshape(groups, og, -1)
        xp = pad_spatial(x, geometry.pads)
        grouped = xp.reshape(n_batch, groups, channels // groups, *xp.shape[2:])
        view = window_view(grouped, geometry, lead_order=(1, 2, 0))  # [g, Cg, N, *k, *out]
        view = np.moveaxis(view, 2, 2 + len(geometry.kernel))  # [g, Cg, *k, N, *out]
        cols = view.reshape(groups, -1, n_batch * prod(geometry.out))
    grad: np.ndarray = np.matmul(gy.astype(dtype, copy=False), np.swapaxes(cols, -1, -2))  # [g, Og, K]
    return grad.reshape(like.shape)


def _full_correlation_pays(geometry: WindowGeometry, channels: int, groups: int) -> bool:
    """Stride-1, undilated, ungrouped convolutions over images with many more pixels than channels are
    faster as one correlation (im2col + one GEMM) than as a GEMM followed by a col2im slice-add per kernel
    offset (measured: 0.7x the time at 64 channels x 56x56, 1.2-1.7x slower at 256+ channels x 14x14)."""
    stride_one = all(s == 1 for s in geometry.stride) and all(d == 1 for d in geometry.dilation)
    pads_fit = all(b <= k - 1 and a <= k - 1 for (b, a), k in zip(geometry.pads, geometry.kernel))
    return stride_one and pads_fit and groups == 1 and not geometry.pointwise and prod(geometry.size) >= 2 * channels


def _grad_input_by_correlation(
    output_grad: np.ndarray, weight: np.ndarray, geometry: WindowGeometry, dtype: Any
) -> np.ndarray:
    """The input gradient of a stride-1 convolution is a convolution of the output gradient with the
    spatially flipped, in/out-transposed kernel, padded by ``kernel - 1 - pad`` on each side."""
    flipped = np.ascontiguousarray(
        np.flip(np.asarray(weight, dtype=dtype), axis=tuple(range(2, weight.ndim))).swapaxes(0, 1)
    )
    pads = [(k - 1 - b, k - 1 - a) for (b, a), k in zip(geometry.pads, geometry.kernel)]
    return conv_forward(
        np.asarray(output_grad, dtype=dtype), flipped, None, stride=1, padding=pads, dilation=1, groups=1
    )


def conv_grad_input(
    output_grad: np.ndarray,
    weight: np.ndarray,
    like: np.ndarray,
    *,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
) -> np.ndarray:
    """Gradient of a convolution with respect to its input, shaped like ``like`` (col2im)."""
    dtype = np.result_type(output_grad, weight)
    n_batch, channels = like.shape[:2]
    out_channels = weight.shape[0]
    check_groups(channels, out_channels, groups)
    geometry = WindowGeometry.of(
        weight.shape[2:], stride=stride, padding=padding, dilation=dilation, size=like.shape[2:]
    )
    if geometry.out != tuple(output_grad.shape[2:]):
        raise ShapeError(f"conv_grad_input: output_grad spatial shape {output_grad.shape[2:]} != {geometry.out}")
    if _full_correlation_pays(geometry, channels, groups):
        return _grad_input_by_correlation(output_grad, weight, geometry, dtype)
    w_t = np.swapaxes(np.asarray(weight, dtype=dtype).reshape(groups, out_channels // groups, -1), -1, -2)
    gy = np.asarray(output_grad, dtype=dtype).reshape(n_batch, groups, out_channels // groups, -1)
    dcols: np.ndarray = np.matmul(w_t, gy)  # [N, g, Cg * prod(k), P]
    if geometry.pointwise:
        return dcols.reshape(like.shape)
    dcols = dcols.reshape(n_batch, channels, *geometry.kernel, *geometry.out)
    padded_shape = (n_batch, channels, *geometry.padded_size)
    dxp = np.zeros(padded_shape, dtype=dtype)
    for offset, window in geometry.offset_slices():
        tap: tuple[slice | int, ...] = (slice(None), slice(None), *offset)  # annotated: see _windows.Index
        dxp[(slice(None), slice(None), *window)] += dcols[tap]
    return np.ascontiguousarray(crop_spatial(dxp, geometry.pads))
