"""Primitives that the generic VJP rules emit (sum_to_like, conv grads, pool grads, scatter-adds...).

MLX differentiates models with ``mx.vjp`` and never needs these itself; they exist so every core
primitive runs here too (a user may call them, and the conformance suite checks them against NumPy).
Where a helper is the transpose of a linear forward op it is computed as ``mx.vjp`` of that op.

Example:
    >>> sum_to_like(mx.ones((2, 3, 4)), mx.zeros((3, 1))).tolist()
    [[8.0], [8.0], [8.0]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mithril.primitives.rules import broadcast_sum_axes

from . import _conv, _pool
from .losses import log_probabilities
from .nn import attention_probs
from .reductions import softmax

__all__ = [
    "sum_to_like", "reshape_like", "broadcast_to_like", "linear_grad_weight",
    "conv1d_grad_input", "conv2d_grad_input", "conv1d_grad_weight", "conv2d_grad_weight",
    "max_pool2d_grad", "avg_pool2d_grad", "embedding_grad", "index_grad", "gather_grad",
    "attention_weights", "cross_entropy_grad",
]  # fmt: skip

Array = mx.array
_FLOATS = (mx.float16, mx.bfloat16, mx.float32, mx.float64)


def _transpose_of(forward: Callable[[Array], Array], like: Array, output_grad: Array) -> Array:
    """``output_grad`` pulled back through the linear map ``forward`` at an input shaped like ``like``."""
    _, (grad,) = mx.vjp(forward, [mx.zeros(like.shape, dtype=output_grad.dtype)], [output_grad])
    return grad


def sum_to_like(input: Array, like: Array) -> Array:
    """Sum ``input`` over its broadcast axes (extra leading ones, and those where ``like`` has size 1)."""
    shape = tuple(like.shape)
    if tuple(input.shape) == shape:
        return input
    axes = broadcast_sum_axes(input.shape, shape)
    if axes is None:  # input broadcasts up to like
        return mx.broadcast_to(input, shape)
    return mx.reshape(mx.sum(input, axis=list(axes), keepdims=True), shape) if axes else mx.reshape(input, shape)


def reshape_like(input: Array, like: Array) -> Array:
    """``input.reshape(like.shape)``"""
    return mx.reshape(input, like.shape)


def broadcast_to_like(input: Array, like: Array) -> Array:
    """``mx.broadcast_to(input, like.shape)``"""
    return mx.broadcast_to(input, like.shape)


def linear_grad_weight(output_grad: Array, input: Array) -> Array:
    """``output_grad[..., d]^T @ input[..., k]`` summed over all leading axes -> ``[d, k]``."""
    d, k = output_grad.shape[-1], input.shape[-1]
    return mx.matmul(mx.reshape(output_grad, (-1, d)).T, mx.reshape(input, (-1, k)))


def conv1d_grad_input(
    output_grad: Array, weight: Array, like: Array, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Gradient of ``conv1d`` with respect to its input, shaped like ``like``."""
    return _conv.conv_grad_input(
        output_grad, weight, like, stride=stride, padding=padding, dilation=dilation, groups=groups
    )


def conv2d_grad_input(
    output_grad: Array, weight: Array, like: Array, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Gradient of ``conv2d`` with respect to its input, shaped like ``like``."""
    return _conv.conv_grad_input(
        output_grad, weight, like, stride=stride, padding=padding, dilation=dilation, groups=groups
    )


def conv1d_grad_weight(
    output_grad: Array, input: Array, like: Array, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Gradient of ``conv1d`` with respect to its weight, shaped like ``like``."""
    return _conv.conv_grad_weight(
        output_grad, input, like, stride=stride, padding=padding, dilation=dilation, groups=groups
    )


def conv2d_grad_weight(
    output_grad: Array, input: Array, like: Array, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Gradient of ``conv2d`` with respect to its weight, shaped like ``like``."""
    return _conv.conv_grad_weight(
        output_grad, input, like, stride=stride, padding=padding, dilation=dilation, groups=groups
    )


def max_pool2d_grad(
    output_grad: Array, input: Array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any
) -> Array:
    """Route ``output_grad`` to the arg-max of each window (ties: first), shaped like ``input``."""
    return _pool.max_pool_grad(
        output_grad, input, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation
    )


def avg_pool2d_grad(
    output_grad: Array,
    input: Array,
    *,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    count_include_pad: bool,
) -> Array:
    """Spread ``output_grad`` evenly over each window, shaped like ``input``."""
    return _pool.avg_pool_grad(
        output_grad, input, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
        count_include_pad=count_include_pad,
    )  # fmt: skip


def embedding_grad(output_grad: Array, input: Array, like: Array) -> Array:
    """Scatter-add of ``output_grad`` rows into zeros shaped like the weight, at the indices ``input``."""
    grad = mx.zeros(like.shape, dtype=output_grad.dtype)
    rows = mx.reshape(output_grad, (-1, *like.shape[1:]))
    return grad.at[mx.reshape(input, (-1,))].add(rows)


def index_grad(output_grad: Array, like: Array, *, key: Any) -> Array:
    """Zeros like ``like`` with ``output_grad`` placed at ``[key]`` (the transpose of ``input[key]``)."""
    return _transpose_of(lambda x: x[key], like, output_grad)


def gather_grad(output_grad: Array, index: Array, like: Array, *, axis: int) -> Array:
    """Zeros like ``like`` with ``output_grad`` added along ``axis`` at ``index`` (inverse of
    ``take_along_axis``; repeated indices accumulate)."""
    return _transpose_of(lambda x: mx.take_along_axis(x, index, axis=axis), like, output_grad)


def attention_weights(query: Array, key: Array, mask: Array | None, *, causal: bool, scale: float | None) -> Array:
    """``softmax(q @ k^T * scale + mask)`` with the masking rules of ``scaled_dot_product_attention``."""
    return attention_probs(query, key, mask, causal=causal, scale=scale)


def cross_entropy_grad(
    output_grad: Array, input: Array, target: Array, *, input_type: str, categorical: bool, eps: float
) -> Array:
    """``d cross_entropy / d input`` times ``output_grad`` [N, ...] (broadcast over class axis 1)."""
    dtype = input.dtype if input.dtype in _FLOATS else mx.float32
    if categorical:
        classes = mx.reshape(mx.arange(input.shape[1]), (1, -1, *(1,) * (input.ndim - 2)))
        target = (mx.expand_dims(target, 1) == classes).astype(dtype)
    if input_type == "logits":
        grad = softmax(input, axis=1) * mx.sum(target, axis=1, keepdims=True) - target
    elif input_type == "probs":
        grad = mx.where(input >= eps, -target / mx.maximum(input, eps), 0.0)
    else:
        log_probabilities(input, input_type, eps)  # validates input_type
        grad = -target
    return grad * mx.expand_dims(output_grad, 1)
