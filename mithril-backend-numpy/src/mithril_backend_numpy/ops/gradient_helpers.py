"""Primitives that the generic VJP rules emit (sum_to_like, conv grads, pool grads, scatter-adds...).

Example:
    >>> import numpy as np
    >>> sum_to_like(np.ones((2, 3, 4)), np.zeros((3, 1))).tolist()
    [[8.0], [8.0], [8.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np
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

Array = np.ndarray


def sum_to_like(input: Array, like: Array) -> Array:
    """Sum ``input`` over its broadcast axes (extra leading ones, and those where ``like`` has size 1)."""
    input = np.asarray(input)
    shape = np.shape(like)
    if input.shape == shape:
        return input
    axes = broadcast_sum_axes(input.shape, shape)
    if axes is None:  # input broadcasts up to like
        return np.broadcast_to(input, shape)
    return np.sum(input, axis=axes, keepdims=True).reshape(shape) if axes else input.reshape(shape)


def reshape_like(input: Array, like: Array) -> Array:
    """``input.reshape(like.shape)``"""
    return np.reshape(input, np.shape(like))


def broadcast_to_like(input: Array, like: Array) -> Array:
    """``np.broadcast_to(input, like.shape)``"""
    return np.broadcast_to(input, np.shape(like))


def linear_grad_weight(output_grad: Array, input: Array) -> Array:
    """``output_grad[..., d]^T @ input[..., k]`` summed over all leading axes -> ``[d, k]``."""
    d, k = output_grad.shape[-1], input.shape[-1]
    return np.matmul(output_grad.reshape(-1, d).T, input.reshape(-1, k))


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
    grad = np.zeros(np.shape(like), dtype=output_grad.dtype)
    np.add.at(grad, np.ravel(input), output_grad.reshape(-1, *grad.shape[1:]))
    return grad


def index_grad(output_grad: Array, like: Array, *, key: Any) -> Array:
    """Zeros like ``like`` with ``output_grad`` placed at ``[key]`` (basic indexing never repeats)."""
    grad = np.zeros(np.shape(like), dtype=np.result_type(output_grad))
    grad[key] = output_grad
    return grad


def gather_grad(output_grad: Array, index: Array, like: Array, *, axis: int) -> Array:
    """Zeros like ``like`` with ``output_grad`` added along ``axis`` at ``index`` (inverse of
    ``take_along_axis``; repeated indices accumulate)."""
    grad = np.zeros(np.shape(like), dtype=output_grad.dtype)
    axis = axis % grad.ndim
    index = np.asarray(index)
    grid = list(np.ogrid[tuple(slice(n) for n in index.shape)])
    grid[axis] = index
    np.add.at(grad, tuple(grid), output_grad)
    return grad


def attention_weights(query: Array, key: Array, mask: Array | None, *, causal: bool, scale: float | None) -> Array:
    """``softmax(q @ k^T * scale + mask)`` with the masking rules of ``scaled_dot_product_attention``."""
    return attention_probs(query, key, mask, causal=causal, scale=scale)


def cross_entropy_grad(
    output_grad: Array, input: Array, target: Array, *, input_type: str, categorical: bool, eps: float
) -> Array:
    """``d cross_entropy / d input`` times ``output_grad`` [N, ...] (broadcast over class axis 1)."""
    input = np.asarray(input)
    if categorical:
        onehot = np.zeros(input.shape, dtype=input.dtype if input.dtype.kind == "f" else np.float64)
        np.put_along_axis(onehot, np.expand_dims(np.asarray(target, dtype=np.intp), 1), 1, axis=1)
        target = onehot
    if input_type == "logits":
        grad = softmax(input, axis=1) * np.sum(target, axis=1, keepdims=True) - target
    elif input_type == "probs":
        grad = np.where(input >= eps, -target / np.maximum(input, eps), 0)
    else:
        log_probabilities(input, input_type, eps)  # validates input_type
        grad = -np.asarray(target)
    return grad * np.expand_dims(output_grad, 1)
