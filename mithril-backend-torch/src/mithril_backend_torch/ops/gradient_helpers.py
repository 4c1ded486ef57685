"""Primitives that the generic VJP rules emit (sum_to_like, conv grads, pool grads, scatter-adds...).

TorchBackend takes its gradients from autograd, so these run only when called directly (or by a model
that uses them explicitly); they are implemented with torch's own backward kernels.

Example:
    >>> import torch
    >>> sum_to_like(torch.ones(2, 3, 4), torch.zeros(3, 1)).tolist()
    [[8.0], [8.0], [8.0]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from mithril.primitives.geometry import window_attributes
from mithril.primitives.rules import broadcast_sum_axes
from torch.nn import grad as nn_grad

from . import nn
from ._windows import crop_spatial, pad_spatial
from .losses import log_probabilities
from .shape_ops import positive_key

__all__ = [
    "sum_to_like", "reshape_like", "broadcast_to_like", "linear_grad_weight",
    "conv1d_grad_input", "conv2d_grad_input", "conv1d_grad_weight", "conv2d_grad_weight",
    "max_pool2d_grad", "avg_pool2d_grad", "embedding_grad", "index_grad", "gather_grad",
    "attention_weights", "cross_entropy_grad",
]  # fmt: skip

Tensor = torch.Tensor


def sum_to_like(input: Tensor, like: Tensor) -> Tensor:
    """Sum ``input`` over its broadcast axes (extra leading ones, and those where ``like`` has size 1)."""
    shape = tuple(like.shape)
    if tuple(input.shape) == shape:
        return input
    axes = broadcast_sum_axes(input.shape, shape)
    if axes is None:  # input broadcasts up to like
        return torch.broadcast_to(input, shape)
    return torch.sum(input, dim=axes, keepdim=True).reshape(shape) if axes else input.reshape(shape)


def reshape_like(input: Tensor, like: Tensor) -> Tensor:
    """``input.reshape(like.shape)``"""
    return torch.reshape(input, like.shape)


def broadcast_to_like(input: Tensor, like: Tensor) -> Tensor:
    """``np.broadcast_to(input, like.shape)``"""
    return torch.broadcast_to(input, like.shape)


def linear_grad_weight(output_grad: Tensor, input: Tensor) -> Tensor:
    """``output_grad[..., d]^T @ input[..., k]`` summed over all leading axes -> ``[d, k]``."""
    d, k = output_grad.shape[-1], input.shape[-1]
    return torch.matmul(output_grad.reshape(-1, d).T, input.reshape(-1, k))


def _conv_grad_input(
    fn: Callable[..., Tensor], output_grad: Tensor, weight: Tensor, like: Tensor, stride: Any, padding: Any,
    dilation: Any, groups: int,
) -> Tensor:  # fmt: skip
    strides, pads, dilations = window_attributes(weight.shape[2:], stride=stride, padding=padding, dilation=dilation)
    padded = (*like.shape[:2], *(s + b + a for s, (b, a) in zip(like.shape[2:], pads)))
    grad = fn(padded, weight, output_grad.to(weight.dtype), strides, 0, dilations, groups)
    return crop_spatial(grad, pads).contiguous()


def _conv_grad_weight(
    fn: Callable[..., Tensor], output_grad: Tensor, input: Tensor, like: Tensor, stride: Any, padding: Any,
    dilation: Any, groups: int,
) -> Tensor:  # fmt: skip
    strides, pads, dilations = window_attributes(like.shape[2:], stride=stride, padding=padding, dilation=dilation)
    x = pad_spatial(input, pads).to(output_grad.dtype)
    return fn(x, tuple(like.shape), output_grad, strides, 0, dilations, groups)


def conv1d_grad_input(
    output_grad: Tensor, weight: Tensor, like: Tensor, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Tensor:
    """Gradient of ``conv1d`` with respect to its input, shaped like ``like``."""
    return _conv_grad_input(nn_grad.conv1d_input, output_grad, weight, like, stride, padding, dilation, groups)


def conv2d_grad_input(
    output_grad: Tensor, weight: Tensor, like: Tensor, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Tensor:
    """Gradient of ``conv2d`` with respect to its input, shaped like ``like``."""
    return _conv_grad_input(nn_grad.conv2d_input, output_grad, weight, like, stride, padding, dilation, groups)


def conv1d_grad_weight(
    output_grad: Tensor, input: Tensor, like: Tensor, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Tensor:
    """Gradient of ``conv1d`` with respect to its weight, shaped like ``like``."""
    return _conv_grad_weight(nn_grad.conv1d_weight, output_grad, input, like, stride, padding, dilation, groups)


def conv2d_grad_weight(
    output_grad: Tensor, input: Tensor, like: Tensor, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Tensor:
    """Gradient of ``conv2d`` with respect to its weight, shaped like ``like``."""
    return _conv_grad_weight(nn_grad.conv2d_weight, output_grad, input, like, stride, padding, dilation, groups)


def _pullback(forward: Callable[[Tensor], Tensor], input: Tensor, output_grad: Tensor) -> Tensor:
    """``output_grad`` pulled back through ``forward`` at ``input`` (torch's backward kernels)."""
    x = input.detach()
    if not x.is_floating_point():
        x = x.to(output_grad.dtype if output_grad.is_floating_point() else torch.float64)
    x.requires_grad_(True)
    with torch.enable_grad():
        y = forward(x)
        (grad,) = torch.autograd.grad(y, x, torch.broadcast_to(output_grad.to(y.dtype), y.shape))
    return grad


def max_pool2d_grad(
    output_grad: Tensor, input: Tensor, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any
) -> Tensor:
    """Route ``output_grad`` to the arg-max of each window (ties: first), shaped like ``input``."""
    return _pullback(
        lambda x: nn.max_pool2d(x, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation),
        input,
        output_grad,
    )


def avg_pool2d_grad(
    output_grad: Tensor,
    input: Tensor,
    *,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    count_include_pad: bool,
) -> Tensor:
    """Spread ``output_grad`` evenly over each window, shaped like ``input``."""
    attrs = {
        "kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation,
        "count_include_pad": count_include_pad,
    }  # fmt: skip
    return _pullback(lambda x: nn.avg_pool2d(None, x, **attrs), input, output_grad)


def embedding_grad(output_grad: Tensor, input: Tensor, like: Tensor) -> Tensor:
    """Scatter-add of ``output_grad`` rows into zeros shaped like the weight, at the indices ``input``."""
    grad = torch.zeros(like.shape, dtype=output_grad.dtype, device=output_grad.device)
    return grad.index_add_(0, input.reshape(-1), output_grad.reshape(-1, *grad.shape[1:]))


def index_grad(output_grad: Tensor, like: Tensor, *, key: Any) -> Tensor:
    """Zeros like ``like`` with ``output_grad`` placed at ``[key]`` (basic indexing never repeats)."""
    key, flips = positive_key(key, like.shape)
    grad = torch.zeros(like.shape, dtype=output_grad.dtype, device=output_grad.device)
    grad[key] = output_grad
    return grad.flip(flips) if flips else grad


def gather_grad(output_grad: Tensor, index: Tensor, like: Tensor, *, axis: int) -> Tensor:
    """Zeros like ``like`` with ``output_grad`` added along ``axis`` at ``index`` (inverse of
    ``take_along_axis``; repeated indices accumulate)."""
    grad = torch.zeros(like.shape, dtype=output_grad.dtype, device=output_grad.device)
    return grad.scatter_add_(axis, index, output_grad)


def attention_weights(query: Tensor, key: Tensor, mask: Tensor | None, *, causal: bool, scale: float | None) -> Tensor:
    """``softmax(q @ k^T * scale + mask)`` with the masking rules of ``scaled_dot_product_attention``."""
    return nn.attention_probs(query, key, mask, causal=causal, scale=scale)


def cross_entropy_grad(
    output_grad: Tensor, input: Tensor, target: Tensor, *, input_type: str, categorical: bool, eps: float
) -> Tensor:
    """``d cross_entropy / d input`` times ``output_grad`` [N, ...] (broadcast over class axis 1)."""
    if categorical:
        dtype = input.dtype if input.is_floating_point() else torch.float64
        onehot = torch.zeros(input.shape, dtype=dtype, device=input.device)
        target = onehot.scatter_(1, target.to(torch.int64).unsqueeze(1), 1.0)
    if input_type == "logits":
        grad = torch.softmax(input, dim=1) * torch.sum(target, dim=1, keepdim=True) - target
    elif input_type == "probs":
        grad = torch.where(input >= eps, -target / torch.clamp_min(input, eps), 0.0)
    else:
        log_probabilities(input, input_type, eps)  # validates input_type
        grad = -target
    return grad * output_grad.unsqueeze(1)
