"""Primitives that the generic VJP rules emit (sum_to_like, conv grads, pool grads, scatter-adds...).

The JAX backend differentiates with ``jax.vjp`` and never needs these for its own gradients; they are
implemented so that every registered primitive runs on every backend (and users may call them).
Convolution and average-pool gradients are ``jax.vjp`` of the (linear) forward; the max-pool gradient
routes to the first arg-max of each window (row-major), exactly like the NumPy backend.

Example:
    >>> import jax.numpy as jnp
    >>> sum_to_like(jnp.ones((2, 3, 4)), jnp.zeros((3, 1))).tolist()
    [[8.0], [8.0], [8.0]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from mithril.primitives import uses_backend
from mithril.primitives.rules import broadcast_sum_axes

from . import _windows
from .losses import log_probabilities
from .nn import attention_probs

__all__ = [
    "sum_to_like", "reshape_like", "broadcast_to_like", "linear_grad_weight",
    "conv1d_grad_input", "conv2d_grad_input", "conv1d_grad_weight", "conv2d_grad_weight",
    "max_pool2d_grad", "avg_pool2d_grad", "embedding_grad", "index_grad", "gather_grad",
    "attention_weights", "cross_entropy_grad",
]  # fmt: skip

Array = jax.Array


def sum_to_like(input: Array, like: Array) -> Array:
    """Sum ``input`` over its broadcast axes (extra leading ones, and those where ``like`` has size 1)."""
    input = jnp.asarray(input)
    shape = jnp.shape(like)
    if input.shape == shape:
        return input
    axes = broadcast_sum_axes(input.shape, shape)
    if axes is None:  # input broadcasts up to like
        return jnp.broadcast_to(input, shape)
    return jnp.sum(input, axis=axes, keepdims=True).reshape(shape) if axes else input.reshape(shape)


def reshape_like(input: Array, like: Array) -> Array:
    """``input.reshape(like.shape)``"""
    return jnp.reshape(input, jnp.shape(like))


def broadcast_to_like(input: Array, like: Array) -> Array:
    """``jnp.broadcast_to(input, like.shape)``"""
    return jnp.broadcast_to(input, jnp.shape(like))


def linear_grad_weight(output_grad: Array, input: Array) -> Array:
    """``output_grad[..., d]^T @ input[..., k]`` summed over all leading axes -> ``[d, k]``."""
    d, k = jnp.shape(output_grad)[-1], jnp.shape(input)[-1]
    return jnp.matmul(jnp.reshape(output_grad, (-1, d)).T, jnp.reshape(input, (-1, k)))


def _pull(forward: Callable[[Array], Array], like_shape: tuple[int, ...], dtype: Any, output_grad: Array) -> Array:
    """The VJP of a linear ``forward`` at zeros of ``like_shape``, applied to ``output_grad``."""
    out, pullback = jax.vjp(forward, jnp.zeros(like_shape, dtype))
    (grad,) = pullback(jnp.asarray(output_grad, dtype=out.dtype))
    return grad


def _conv_grad_input(output_grad: Array, weight: Array, like: Array, **attrs: Any) -> Array:
    dtype = jnp.result_type(output_grad, weight)
    return _pull(
        lambda x: _windows.conv_forward(x, weight.astype(dtype), None, **attrs), jnp.shape(like), dtype, output_grad
    )


def _conv_grad_weight(output_grad: Array, input: Array, like: Array, **attrs: Any) -> Array:
    dtype = jnp.result_type(output_grad, input)
    return _pull(
        lambda w: _windows.conv_forward(input.astype(dtype), w, None, **attrs), jnp.shape(like), dtype, output_grad
    )


def conv1d_grad_input(
    output_grad: Array, weight: Array, like: Array, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Gradient of ``conv1d`` with respect to its input, shaped like ``like``."""
    return _conv_grad_input(output_grad, weight, like, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv2d_grad_input(
    output_grad: Array, weight: Array, like: Array, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Gradient of ``conv2d`` with respect to its input, shaped like ``like``."""
    return _conv_grad_input(output_grad, weight, like, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv1d_grad_weight(
    output_grad: Array, input: Array, like: Array, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Gradient of ``conv1d`` with respect to its weight, shaped like ``like``."""
    return _conv_grad_weight(output_grad, input, like, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv2d_grad_weight(
    output_grad: Array, input: Array, like: Array, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Array:
    """Gradient of ``conv2d`` with respect to its weight, shaped like ``like``."""
    return _conv_grad_weight(output_grad, input, like, stride=stride, padding=padding, dilation=dilation, groups=groups)


@uses_backend
def max_pool2d_grad(
    backend: Any, output_grad: Array, input: Array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any
) -> Array:
    """Route ``output_grad`` to the first arg-max (row-major) of each window, shaped like ``input``."""
    x = jnp.asarray(input)
    geometry = _windows.pool_geometry(x, kernel_size, stride, padding, dilation)
    best = _windows.max_pool(x, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)
    grad = jnp.asarray(output_grad)
    if not jnp.issubdtype(grad.dtype, jnp.floating):
        grad = grad.astype(backend.native_dtype("float"))
    return _windows.max_pool_route(grad, x, best, geometry)


@uses_backend
def avg_pool2d_grad(
    backend: Any,
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
    grad = jnp.asarray(output_grad)
    dtype = grad.dtype if jnp.issubdtype(grad.dtype, jnp.floating) else backend.native_dtype("float")
    attrs = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation}
    return _pull(
        lambda x: _windows.avg_pool(x, **attrs, count_include_pad=count_include_pad, float_dtype=dtype),
        jnp.shape(input), dtype, grad,
    )  # fmt: skip


def embedding_grad(output_grad: Array, input: Array, like: Array) -> Array:
    """Scatter-add of ``output_grad`` rows into zeros shaped like the weight, at the indices ``input``."""
    shape = jnp.shape(like)
    grad = jnp.zeros(shape, dtype=jnp.result_type(output_grad))
    return grad.at[jnp.ravel(input)].add(jnp.reshape(output_grad, (-1, *shape[1:])))


def index_grad(output_grad: Array, like: Array, *, key: Any) -> Array:
    """Zeros like ``like`` with ``output_grad`` placed at ``[key]`` (basic indexing never repeats)."""
    grad = jnp.zeros(jnp.shape(like), dtype=jnp.result_type(output_grad))
    return grad.at[key].set(output_grad)


def gather_grad(output_grad: Array, index: Array, like: Array, *, axis: int) -> Array:
    """Zeros like ``like`` with ``output_grad`` added along ``axis`` at ``index`` (inverse of
    ``take_along_axis``; repeated indices accumulate)."""
    grad = jnp.zeros(jnp.shape(like), dtype=jnp.result_type(output_grad))
    axis = axis % grad.ndim
    index = jnp.asarray(index)
    grid = list(jnp.meshgrid(*(jnp.arange(n) for n in index.shape), indexing="ij", sparse=True))
    grid[axis] = index
    return grad.at[tuple(grid)].add(output_grad)


def attention_weights(query: Array, key: Array, mask: Array | None, *, causal: bool, scale: float | None) -> Array:
    """``softmax(q @ k^T * scale + mask)`` with the masking rules of ``scaled_dot_product_attention``."""
    return attention_probs(query, key, mask, causal=causal, scale=scale)


@uses_backend
def cross_entropy_grad(
    backend: Any, output_grad: Array, input: Array, target: Array, *, input_type: str, categorical: bool, eps: float
) -> Array:
    """``d cross_entropy / d input`` times ``output_grad`` [N, ...] (broadcast over class axis 1)."""
    input = jnp.asarray(input)
    if categorical:
        dtype = input.dtype if jnp.issubdtype(input.dtype, jnp.floating) else backend.native_dtype("float")
        classes = jnp.arange(input.shape[1]).reshape((1, -1) + (1,) * (input.ndim - 2))
        target = (jnp.expand_dims(jnp.asarray(target), 1) == classes).astype(dtype)
    if input_type == "logits":
        grad = jax.nn.softmax(input, axis=1) * jnp.sum(target, axis=1, keepdims=True) - target
    elif input_type == "probs":
        grad = jnp.where(input >= eps, -target / jnp.maximum(input, eps), 0)
    else:
        log_probabilities(input, input_type, eps)  # validates input_type
        grad = -jnp.asarray(target)
    return grad * jnp.expand_dims(output_grad, 1)
