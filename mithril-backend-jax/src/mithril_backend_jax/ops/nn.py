"""Neural-network primitives: convolution, pooling, embedding, attention and random sampling.

Random ops draw with ``backend.next_key()``: inside a jitted forward that is a split of the traced key
passed in on every call, so each evaluation draws fresh samples; eagerly it is a fresh key from the
backend state.

Example:
    >>> import jax.numpy as jnp
    >>> conv2d(jnp.ones((1, 1, 3, 3)), jnp.ones((1, 1, 3, 3)), None, stride=1, padding=0, dilation=1, groups=1)
    Array([[[[9.]]]], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from mithril.primitives import uses_backend

from . import _windows

__all__ = [
    "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "embedding", "scaled_dot_product_attention",
    "dropout_mask", "randn", "randint",
]  # fmt: skip

Array = jax.Array


def conv1d(
    input: Array, weight: Array, bias: Array | None, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """``torch.nn.functional.conv1d``: input [N, C, L], weight [O, C/groups, k], bias [O] or None."""
    return _windows.conv_forward(input, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv2d(
    input: Array, weight: Array, bias: Array | None, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """``torch.nn.functional.conv2d``: input [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] or None.

    ``padding``: an int, a pair, ``((top, bottom), (left, right))``, ``"valid"`` or ``"same"``.
    """
    return _windows.conv_forward(input, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def max_pool2d(input: Array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> Array:
    """torch ``max_pool2d`` over the last two axes; ``stride`` defaults to ``kernel_size``; pads with -inf."""
    return _windows.max_pool(input, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)


@uses_backend
def avg_pool2d(
    backend: Any, input: Array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any, count_include_pad: bool
) -> Array:
    """torch ``avg_pool2d`` over the last two axes; padding counts as zeros when ``count_include_pad``."""
    return _windows.avg_pool(
        input, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
        count_include_pad=count_include_pad, float_dtype=backend.native_dtype("float"),
    )  # fmt: skip


def embedding(input: Array, weight: Array) -> Array:
    """``weight[input]``: rows of ``weight`` [num_embeddings, dim] picked by integer indices."""
    return jnp.take(weight, input, axis=0)


def attention_probs(query: Array, key: Array, mask: Array | None, *, causal: bool, scale: float | None) -> Array:
    """``softmax(q @ k^T * scale + mask)``: a bool mask keeps True, a float mask is added, ``causal``
    masks ``j > i`` (top-left aligned, like torch); ``scale`` defaults to ``1/sqrt(d)``."""
    scale = 1.0 / math.sqrt(jnp.shape(query)[-1]) if scale is None else float(scale)
    scores = jnp.matmul(query, jnp.swapaxes(key, -1, -2)) * scale
    if mask is not None:
        mask = jnp.asarray(mask)
        scores = jnp.where(mask, scores, -jnp.inf) if mask.dtype == jnp.bool_ else scores + mask
    if causal:
        lq, lk = scores.shape[-2:]
        scores = jnp.where(jnp.triu(jnp.ones((lq, lk), dtype=bool), k=1), -jnp.inf, scores)
    return jax.nn.softmax(scores, axis=-1)


def scaled_dot_product_attention(
    query: Array, key: Array, value: Array, mask: Array | None, *, causal: bool, scale: float | None
) -> Array:
    """``softmax(q @ k^T * scale + mask) @ v`` with torch's masking rules (see :func:`attention_probs`)."""
    return jnp.matmul(attention_probs(query, key, mask, causal=causal, scale=scale), value)


@uses_backend
def dropout_mask(backend: Any, input: Array, *, p: float, training: bool) -> Array:
    """Keep-mask scaled by ``1/(1-p)`` (zeros where dropped) shaped like ``input``; ones when not training."""
    dtype = backend.native_dtype("float")
    shape = jnp.shape(input)
    if not training or p == 0:
        return jnp.ones(shape, dtype=dtype)
    if p >= 1:
        return jnp.zeros(shape, dtype=dtype)
    keep = jax.random.uniform(backend.next_key(), shape, dtype=jnp.float32) >= p
    return keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))


@uses_backend
def randn(backend: Any, *, shape: Any) -> Array:
    """Standard normal samples of ``shape`` in the backend float dtype."""
    return jax.random.normal(backend.next_key(), tuple(shape), dtype=backend.native_dtype("float"))


@uses_backend
def randint(backend: Any, *, low: int, high: int, shape: Any) -> Array:
    """Integers uniform in ``[low, high)`` of ``shape`` (the backend's int dtype)."""
    return jax.random.randint(backend.next_key(), tuple(shape), low, high, dtype=backend.native_dtype("int"))
