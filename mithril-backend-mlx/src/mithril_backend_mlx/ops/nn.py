"""Neural-network primitives: convolution, pooling, embedding, attention and random sampling.

Convolutions go through ``mx.conv_general`` (channels-last inside the op, NCHW outside); random
primitives draw from the backend's ``mx.random`` key (one split per draw; under ``mx.compile`` the key
is an argument of the compiled function).

Example:
    >>> conv2d(mx.ones((1, 1, 3, 3)), mx.ones((1, 1, 3, 3)), None, stride=1, padding=0, dilation=1, groups=1)
    array([[[[9]]]], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import mlx.core as mx
from mithril.primitives import uses_backend

from . import _conv, _pool
from .reductions import softmax

__all__ = [
    "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "embedding", "scaled_dot_product_attention",
    "dropout_mask", "randn", "randint",
]  # fmt: skip

Array = mx.array


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
    return mx.take(weight, input, axis=0)


def attention_probs(query: Array, key: Array, mask: Array | None, *, causal: bool, scale: float | None) -> Array:
    """``softmax(q @ k^T * scale + mask)``: a bool mask keeps True, a float mask is added, ``causal``
    masks ``j > i`` (top-left aligned, like torch); ``scale`` defaults to ``1/sqrt(d)``."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = mx.matmul(query, mx.swapaxes(key, -1, -2)) * scale
    if mask is not None:
        scores = mx.where(mask, scores, float("-inf")) if mask.dtype == mx.bool_ else scores + mask
    if causal:
        lq, lk = scores.shape[-2:]
        above = mx.triu(mx.ones((lq, lk), dtype=mx.bool_), k=1)
        scores = mx.where(above, float("-inf"), scores)
    return softmax(scores, axis=-1)


def scaled_dot_product_attention(
    query: Array, key: Array, value: Array, mask: Array | None, *, causal: bool, scale: float | None
) -> Array:
    """``softmax(q @ k^T * scale + mask) @ v`` with torch's masking rules (see :func:`attention_probs`).

    >>> q = mx.ones((1, 2, 4))
    >>> scaled_dot_product_attention(q, q, q, None, causal=True, scale=None).shape
    (1, 2, 4)
    """
    return mx.matmul(attention_probs(query, key, mask, causal=causal, scale=scale), value)


@uses_backend
def dropout_mask(backend: Any, input: Array, *, p: float, training: bool) -> Array:
    """Keep-mask scaled by ``1/(1-p)`` (zeros where dropped) shaped like ``input``; ones when not training."""
    dtype = backend.native_dtype("float")
    shape = tuple(input.shape)
    if not training or p == 0:
        return mx.ones(shape, dtype=dtype)
    if p >= 1:
        return mx.zeros(shape, dtype=dtype)
    keep = mx.random.uniform(shape=shape, key=backend.next_key()) >= p
    return keep.astype(dtype) * (1.0 / (1.0 - p))


@uses_backend
def randn(backend: Any, *, shape: Any) -> Array:
    """Standard normal samples of ``shape`` in the backend float dtype (drawn in float32)."""
    return mx.random.normal(tuple(shape), key=backend.next_key()).astype(backend.native_dtype("float"))


@uses_backend
def randint(backend: Any, *, low: int, high: int, shape: Any) -> Array:
    """Integers uniform in ``[low, high)`` of ``shape`` (int64)."""
    return mx.random.randint(low, high, tuple(shape), dtype=mx.int64, key=backend.next_key())
