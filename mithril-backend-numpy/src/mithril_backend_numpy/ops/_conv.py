"""N-d grouped convolution (PyTorch semantics: NC..., weight ``[O, C/groups, *k]``) and its gradients.

Forward: im2col through a strided view (one copy) and one batched BLAS matmul; a 3x3 stride-1 convolution
over at least 8x8 outputs by Winograd F(2x2, 3x3) (:func:`_winograd`: 16 GEMMs with 2.25x fewer
multiplications; the transforms are a few passes of NumPy arithmetic). Gradient of the weight:
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

import threading
from functools import lru_cache
from typing import Any

import numpy as np
from mithril.errors import ShapeError
from mithril.extend import WindowGeometry, check_groups

from ._windows import Index, crop_spatial, pad_spatial, prod, window_view

__all__ = ["conv_forward", "conv_grad_input", "conv_grad_weight"]


SCRATCH_ARRAYS = 32
"""Work arrays each thread keeps between calls (:func:`_scratch`), the least recently used dropped first."""
_SCRATCH = threading.local()


def _scratch(key: tuple[Any, ...], shape: tuple[int, ...], dtype: Any) -> tuple[np.ndarray, bool]:
    """A work array of the calling thread, kept between calls (``key`` names its use and everything that
    decides which of its elements a use writes), and whether it is new (zeros) rather than reused (what
    the last use left). A new array of a few MB costs its page faults again on every call (measured:
    Winograd's input transform over 64 x 56x56 took 1.7 ms in new memory, 0.6 ms in reused). Never part
    of a result: the caller copies out of it."""
    cache: dict[tuple[Any, ...], np.ndarray] | None = getattr(_SCRATCH, "arrays", None)
    if cache is None:
        cache = _SCRATCH.arrays = {}
    full = (*key, shape, np.dtype(dtype).str)
    array = cache.pop(full, None)
    fresh = array is None
    if array is None:
        array = np.zeros(shape, dtype)
        while len(cache) >= SCRATCH_ARRAYS:
            cache.pop(next(iter(cache)))
    cache[full] = array  # the most recently used last
    return array, fresh


def _columns(x: np.ndarray, geometry: WindowGeometry, groups: int) -> np.ndarray:
    """im2col of ``x`` [N, C, *S] -> ``[N, groups, C/groups * prod(kernel), prod(out)]`` (one copy, into a
    :func:`_scratch` array: the caller only reads it)."""
    n_batch, channels = x.shape[:2]
    xp = _padded(x, geometry)
    grouped = xp.reshape(n_batch, groups, channels // groups, *xp.shape[2:])
    view = window_view(grouped, geometry)  # [N, g, Cg, *k, *out]
    cols, _ = _scratch(("cols", x.shape, geometry, groups), view.shape, x.dtype)
    np.copyto(cols, view)
    return cols.reshape(n_batch, groups, -1, prod(geometry.out))


def _padded(x: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    """``x`` with its spatial padding (zeros), in a :func:`_scratch` array (``x`` itself if unpadded)."""
    if not geometry.padded:
        return x
    xp, _ = _scratch(("padded", x.shape, geometry.pads), (*x.shape[:2], *geometry.padded_size), x.dtype)
    inner: Index = (..., *(slice(b, b + s) for s, (b, _) in zip(x.shape[2:], geometry.pads, strict=True)))
    xp[inner] = x  # the border keeps the zeros the array was made with
    return xp


WINOGRAD_MIN_TILES = 32
"""Winograd pays from this many 2x2 output tiles (8x8 outputs) on; below, im2col + one GEMM."""
WINOGRAD_MIN_CHANNELS = 16
"""... and from this many input and output channels: the transforms (NumPy passes, one thread) cost per
channel, the GEMMs (BLAS, all threads) save per pair of channels. Measured with 2 BLAS threads, 3x3 over
7x7 .. 56x56 (ResNet-18's): 256 channels 1.22 ms against im2col's 1.41, 128 channels 1.83 against 1.51;
with one thread Winograd wins from 64 channels."""
_WINOGRAD_G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
_WINOGRAD_BT = ((1.0, 0.0, -1.0, 0.0), (0.0, 1.0, 1.0, 0.0), (0.0, -1.0, 1.0, 0.0), (0.0, 1.0, 0.0, -1.0))
_WINOGRAD_AT = ((1.0, 1.0, 1.0, 0.0), (0.0, 1.0, -1.0, -1.0))


@lru_cache(maxsize=8)
def _winograd_transforms(dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The filter, input and output transforms as Kronecker products (``kron(G, G)`` [16, 9], ``kron(B^T,
    B^T)`` [16, 16], ``kron(A^T, A^T)`` [4, 16]) in ``dtype``, read-only, made once per dtype: three
    ``np.kron`` calls cost 0.15 ms, 1.5 ms of a ResNet-18 forward's 35."""
    g, bt, at = (np.kron(t, t).astype(dtype) for t in map(np.asarray, (_WINOGRAD_G, _WINOGRAD_BT, _WINOGRAD_AT)))
    for product in (g, bt, at):
        product.flags.writeable = False
    return g, bt, at


def _winograd_pays(x: np.ndarray, weight: np.ndarray, geometry: WindowGeometry, groups: int) -> bool:
    """A 3x3, stride-1, undilated, ungrouped 2-d float convolution over at least 8x8 outputs."""
    if weight.ndim != 4 or groups != 1 or x.dtype.kind != "f" or geometry.kernel != (3, 3):
        return False
    tiles = ((geometry.out[0] + 1) // 2) * ((geometry.out[1] + 1) // 2)
    return (
        geometry.stride == (1, 1)
        and geometry.dilation == (1, 1)
        and tiles >= WINOGRAD_MIN_TILES
        and min(x.shape[1], weight.shape[0]) >= WINOGRAD_MIN_CHANNELS
    )


def _winograd_tiles(x: np.ndarray, geometry: WindowGeometry, th: int, tw: int) -> np.ndarray:
    """Every 4x4 input tile ``d`` (tile (a, b) starts at padded row 2a, column 2b) as ``[16, C * N * th *
    tw]``, row ``4 i + j`` holding element (i, j) of every tile: one copy of a strided view of the padded
    input (4x the input; im2col's columns are 9x), into a :func:`_scratch` array."""
    n, c = x.shape[:2]
    (ph, _), (pw, _) = geometry.pads
    key = ("winograd", x.shape, geometry.pads)
    xp, _ = _scratch(key, (n, c, 2 * th + 2, 2 * tw + 2), x.dtype)  # zeros: the padding and past the last tile
    h, w = min(x.shape[2], 2 * th + 2 - ph), min(x.shape[3], 2 * tw + 2 - pw)
    xp[:, :, ph : ph + h, pw : pw + w] = x[:, :, :h, :w]
    sn, sc, sh, sw = xp.strides
    view = np.lib.stride_tricks.as_strided(xp, (4, 4, c, n, th, tw), (sh, sw, sc, sn, 2 * sh, 2 * sw), writeable=False)
    tiles, _ = _scratch((*key, "tiles"), view.shape, x.dtype)
    np.copyto(tiles, view)
    return tiles.reshape(16, -1)


def _winograd(x: np.ndarray, weight: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    """Winograd F(2x2, 3x3) (see :func:`_winograd_pays`), every step a BLAS product (on all of BLAS's
    threads; NumPy's passes would be one thread's): the filters ``G g G^T`` and the input tiles ``B^T d B``
    as products with Kronecker products of the transforms, 16 GEMMs ``[O, C] @ [C, N * tiles]`` (2.25x
    fewer multiplications than im2col's one GEMM), the 2x2 outputs of each tile ``A^T m A``, then one copy
    interleaving them. The same sums as the direct convolution up to rounding."""
    n, (o, c) = x.shape[0], weight.shape[:2]
    oh, ow = geometry.out
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    gg, bb, aa = _winograd_transforms(x.dtype)
    u = (gg @ weight.reshape(o * c, 9).T).reshape(16, o, c)  # G g G^T of each (o, c)
    key = ("winograd-out", x.shape, weight.shape, geometry.pads)
    v, _ = _scratch((*key, "v"), (16, c * n * th * tw), x.dtype)
    np.matmul(bb, _winograd_tiles(x, geometry, th, tw), out=v)  # B^T d B of each tile
    m, _ = _scratch((*key, "m"), (16, o, n * th * tw), x.dtype)
    np.matmul(u, v.reshape(16, c, n * th * tw), out=m)
    ys, _ = _scratch((*key, "y"), (4, o * n * th * tw), x.dtype)
    np.matmul(aa, m.reshape(16, -1), out=ys)  # A^T m A: output (a, b) of each tile in row 2a + b
    y = np.empty((n, o, 2 * th, 2 * tw), dtype=x.dtype)
    for ab, outputs in enumerate(ys.reshape(4, o, n, th, tw)):
        y[:, :, ab // 2 :: 2, ab % 2 :: 2] = outputs.transpose(1, 0, 2, 3)
    return y if (2 * th, 2 * tw) == (oh, ow) else np.ascontiguousarray(y[:, :, :oh, :ow])


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
    out: np.ndarray
    if _winograd_pays(x, weight, geometry, groups):
        out = _winograd(x, weight, geometry)
    else:
        w = weight.reshape(groups, out_channels // groups, -1)  # [g, Og, Cg * prod(k)]
        if geometry.pointwise:
            cols = x.reshape(n_batch, groups, channels // groups, -1)
        else:
            cols = _columns(x, geometry, groups)
        out = np.matmul(w, cols).reshape(n_batch, out_channels, *geometry.out)  # [N, g, Og, P] -> [N, O, *out]
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
    pads_fit = all(b <= k - 1 and a <= k - 1 for (b, a), k in zip(geometry.pads, geometry.kernel, strict=True))
    return stride_one and pads_fit and groups == 1 and not geometry.pointwise and prod(geometry.size) >= 2 * channels


def _grad_input_by_correlation(
    output_grad: np.ndarray, weight: np.ndarray, geometry: WindowGeometry, dtype: Any
) -> np.ndarray:
    """The input gradient of a stride-1 convolution is a convolution of the output gradient with the
    spatially flipped, in/out-transposed kernel, padded by ``kernel - 1 - pad`` on each side."""
    flipped = np.ascontiguousarray(
        np.flip(np.asarray(weight, dtype=dtype), axis=tuple(range(2, weight.ndim))).swapaxes(0, 1)
    )
    pads = [(k - 1 - b, k - 1 - a) for (b, a), k in zip(geometry.pads, geometry.kernel, strict=True)]
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
