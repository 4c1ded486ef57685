"""Neural-network primitives: convolution, pooling, embedding, attention and random sampling.

Convolutions are im2col + BLAS (see ``_conv``); pooling loops over kernel offsets, never over pixels.

Example:
    >>> import numpy as np
    >>> conv2d(np.ones((1, 1, 3, 3)), np.ones((1, 1, 3, 3)), None, stride=1, padding=0, dilation=1, groups=1)
    array([[[[9.]]]])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from mithril.primitives import uses_backend

from . import _conv, _pool
from .reductions import softmax

__all__ = [
    "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "embedding", "scaled_dot_product_attention",
    "dropout_mask", "randn", "randint",
]  # fmt: skip

Array = np.ndarray


def conv1d(
    input: Array, weight: Array, bias: Array | None, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """``torch.nn.functional.conv1d``: input [N, C, L], weight [O, C/groups, k], bias [O] or None."""
    return _conv.conv_forward(input, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv2d(
    input: Array, weight: Array, bias: Array | None, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """``torch.nn.functional.conv2d``: input [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] or None.

    ``padding``: an int, a pair, ``((top, bottom), (left, right))``, ``"valid"`` or ``"same"``.
    """
    return _conv.conv_forward(input, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def max_pool2d(input: Array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> Array:
    """torch ``max_pool2d`` over the last two axes; ``stride`` defaults to ``kernel_size``; pads with -inf."""
    return _pool.max_pool(input, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)


def avg_pool2d(
    input: Array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any, count_include_pad: bool
) -> Array:
    """torch ``avg_pool2d`` over the last two axes; padding counts as zeros when ``count_include_pad``."""
    return _pool.avg_pool(
        input,
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        count_include_pad=count_include_pad,
    )


def embedding(input: Array, weight: Array) -> Array:
    """``weight[input]``: rows of ``weight`` [num_embeddings, dim] picked by integer indices."""
    return np.take(weight, input, axis=0)


def attention_probs(query: Array, key: Array, mask: Array | None, *, causal: bool, scale: float | None) -> Array:
    """``softmax(q @ k^T * scale + mask)``: a bool mask keeps True, a float mask is added, ``causal``
    masks ``j > i`` (top-left aligned, like torch); ``scale`` defaults to ``1/sqrt(d)``."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = np.matmul(query, np.swapaxes(key, -1, -2))
    scores *= scores.dtype.type(scale) if scores.dtype.kind == "f" else scale
    if mask is not None:
        mask = np.asarray(mask)
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    if causal:
        lq, lk = scores.shape[-2:]
        scores = np.where(np.triu(np.ones((lq, lk), dtype=bool), k=1), -np.inf, scores)
    return softmax(scores, axis=-1)


def scaled_dot_product_attention(
    query: Array, key: Array, value: Array, mask: Array | None, *, causal: bool, scale: float | None
) -> Array:
    """``softmax(q @ k^T * scale + mask) @ v`` with torch's masking rules (see :func:`attention_probs`).

    >>> q = np.ones((1, 2, 4))
    >>> scaled_dot_product_attention(q, q, q, None, causal=True, scale=None).shape
    (1, 2, 4)
    """
    return np.matmul(attention_probs(query, key, mask, causal=causal, scale=scale), value)


@uses_backend
def dropout_mask(backend: Any, input: Array, *, p: float, training: bool) -> Array:
    """Keep-mask scaled by ``1/(1-p)`` (zeros where dropped) shaped like ``input``; ones when not training."""
    dtype = backend.native_dtype("float")
    shape = np.shape(input)
    if not training or p == 0:
        return np.ones(shape, dtype=dtype)
    if p >= 1:
        return np.zeros(shape, dtype=dtype)
    keep = backend.rng.random(shape, dtype=np.float32) >= p
    return keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))


@uses_backend
def randn(backend: Any, *, shape: Any) -> Array:
    """Standard normal samples of ``shape`` in the backend float dtype."""
    dtype = backend.native_dtype("float")
    draw = dtype if dtype in (np.float32, np.float64) else np.float32
    return backend.rng.standard_normal(tuple(shape), dtype=draw).astype(dtype, copy=False)


@uses_backend
def randint(backend: Any, *, low: int, high: int, shape: Any) -> Array:
    """Integers uniform in ``[low, high)`` of ``shape`` (int64)."""
    return backend.rng.integers(low, high, tuple(shape), dtype=np.int64)
