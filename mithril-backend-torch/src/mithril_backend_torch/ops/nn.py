"""Neural-network primitives: convolution, pooling, embedding, attention and random sampling.

Convolutions and pooling call torch's kernels; padding torch cannot express (uneven, or wider than half
the kernel) is applied with ``F.pad`` first. Random primitives draw from the backend's generator.

Example:
    >>> import torch
    >>> conv2d(torch.ones(1, 1, 3, 3), torch.ones(1, 1, 3, 3), None, stride=1, padding=0, dilation=1, groups=1)
    tensor([[[[9.]]]])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from mithril.extend import Binding, array_api, check_pool2d_input, uses_backend, window_attributes

from .. import distributed
from ._windows import pad_spatial, pool_geometry, torch_padding

Tensor = torch.Tensor


def _conv(
    fn: Callable[..., Tensor], input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
    dilation: Any, groups: int,
) -> Tensor:  # fmt: skip
    strides, pads, dilations = window_attributes(weight.shape[2:], stride=stride, padding=padding, dilation=dilation)
    symmetric = torch_padding(pads)
    if symmetric is None:
        input, symmetric = pad_spatial(input, pads), (0,) * len(pads)
    return fn(input, weight, bias, strides, symmetric, dilations, groups)


def conv1d(
    input: Tensor, weight: Tensor, bias: Tensor | None, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Tensor:
    """``torch.nn.functional.conv1d``: input [N, C, L], weight [O, C/groups, k], bias [O] or None."""
    return _conv(F.conv1d, input, weight, bias, stride, padding, dilation, groups)


def conv2d(
    input: Tensor, weight: Tensor, bias: Tensor | None, *, stride: Any, padding: Any, dilation: Any, groups: int
) -> Tensor:
    """``torch.nn.functional.conv2d``: input [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] or None.

    ``padding``: an int, a pair, ``((top, bottom), (left, right))``, ``"valid"`` or ``"same"``.
    """
    return _conv(F.conv2d, input, weight, bias, stride, padding, dilation, groups)


def _as_planes(x: Tensor) -> Tensor:
    """``[*lead, H, W]`` -> ``[prod(lead), H, W]`` (torch's unbatched ``[C, H, W]`` pooling layout)."""
    check_pool2d_input(x.shape)
    return x.reshape(-1, *x.shape[-2:])


def _fitting(pads: Any, limits: Any) -> tuple[int, ...] | None:
    """The padding of a torch pool for ``pads``, or ``None`` when it cannot express them: torch pools pad
    symmetrically, at most half the (effective) kernel per side."""
    symmetric = torch_padding(pads)
    fits = symmetric is not None and all(p <= limit for p, limit in zip(symmetric, limits, strict=True))
    return symmetric if fits else None


def max_pool2d(input: Tensor, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> Tensor:
    """torch ``max_pool2d`` over the last two axes; ``stride`` defaults to ``kernel_size``; pads with -inf."""
    kernel, strides, pads, dilations = pool_geometry(kernel_size, stride, padding, dilation)
    x = _as_planes(input)
    integer = not x.is_floating_point()
    if integer:
        x = x.to(torch.float64)
    effective = [(d * (k - 1) + 1) // 2 for k, d in zip(kernel, dilations, strict=True)]
    symmetric = _fitting(pads, effective)
    if symmetric is None:
        x, symmetric = pad_spatial(x, pads, -math.inf), (0, 0)
    out = F.max_pool2d(x, kernel, strides, symmetric, dilations)
    if integer:
        out = out.to(input.dtype)
    return out.reshape(*input.shape[:-2], *out.shape[-2:])


def _window_sum(x: Tensor, kernel: Any, strides: Any, pads: Any, dilations: Any) -> Tensor:
    """Sum over each (dilated) window of ``x`` [M, H, W] with zero padding: a conv with a ones kernel."""
    ones = torch.ones((1, 1, *kernel), dtype=x.dtype, device=x.device)
    return F.conv2d(pad_spatial(x.unsqueeze(1), pads), ones, None, strides, 0, dilations).squeeze(1)


@uses_backend
def avg_pool2d(
    backend: Any, input: Tensor, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any, count_include_pad: bool
) -> Tensor:
    """torch ``avg_pool2d`` over the last two axes; padding counts as zeros when ``count_include_pad``.

    Integer inputs average in the backend float dtype; dilation (which torch's ``avg_pool2d`` lacks) and
    padding it cannot express go through a window-sum convolution.
    """
    kernel, strides, pads, dilations = pool_geometry(kernel_size, stride, padding, dilation)
    x = _as_planes(input)
    if not x.is_floating_point():
        x = x.to(backend.native_dtype("float"))
    symmetric = _fitting(pads, [k // 2 for k in kernel]) if dilations == (1, 1) else None
    if symmetric is not None:
        out = F.avg_pool2d(x, kernel, strides, symmetric, count_include_pad=count_include_pad)
    else:
        out = _window_sum(x, kernel, strides, pads, dilations)
        if count_include_pad or not any(a or b for a, b in pads):
            out = out / math.prod(kernel)
        else:
            count = _window_sum(torch.ones_like(x[:1]), kernel, strides, pads, dilations)
            out = out / count
    return out.reshape(*input.shape[:-2], *out.shape[-2:])


def batch_norm2d(
    input: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, *, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Training-mode batch norm with PyTorch's kernel (``nn.BatchNorm2d``'s): one pass for the statistics,
    one for the output, and its fused backward. The biased variance comes back from the kernel's saved
    ``1 / sqrt(var + eps)``; the statistics carry no gradient, as the primitive says."""
    output, mean, inv_std = torch.native_batch_norm(input, weight, bias, None, None, True, 0.0, eps)
    return output, mean, inv_std.pow(-2).sub_(eps)


def embedding(input: Tensor, weight: Tensor) -> Tensor:
    """``weight[input]``: rows of ``weight`` [num_embeddings, dim] picked by integer indices.

    Under autograd the weight's gradient is sparse (only the looked-up rows): the backend's ``vjp`` adds it
    in place into a tied weight's dense gradient (a GPT's LM head) and densifies it otherwise, instead of
    zero-filling and adding a whole ``[vocab, dim]`` table per step. Only for a parameter itself (a leaf):
    a sparse gradient cannot flow back through the ops that computed a non-leaf table."""
    sparse = (
        weight.is_leaf
        and weight.requires_grad
        and torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
        and type(weight) is torch.Tensor  # DTensors have no sparse gradients
    )
    return F.embedding(distributed.replicated_like(weight, input), weight, sparse=sparse)


def attention_weights(query: Tensor, key: Tensor, mask: Tensor | None, *, causal: bool, scale: float | None) -> Tensor:
    """``softmax(q @ k^T * scale + mask)``: a bool mask keeps True, a float mask is added, ``causal``
    masks ``j > i`` (top-left aligned, like torch); ``scale`` defaults to ``1/sqrt(d)``."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    if causal:
        lq, lk = scores.shape[-2:]
        upper = torch.ones((lq, lk), dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(distributed.replicated_like(scores, upper), -math.inf)
    return torch.softmax(scores, dim=-1)


def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, *, causal: bool, scale: float | None
) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` with torch's masking rules (see :func:`attention_weights`).

    Uses ``F.scaled_dot_product_attention`` except for a mask combined with ``causal`` or a mask of rank
    0 or 1 (which it refuses) and for DTensors.

    >>> q = torch.ones(1, 2, 4)
    >>> scaled_dot_product_attention(q, q, q, None, causal=True, scale=None).shape
    torch.Size([1, 2, 4])
    """
    # DTensors (a device mesh) take the composed path: the CPU flash kernel has no sharding rule
    fused = query.ndim >= 3 and not (causal and mask is not None) and type(query) is torch.Tensor
    if fused and mask is not None and (mask.ndim < 2 or (mask.dtype != torch.bool and mask.dtype != query.dtype)):
        fused = False  # F.scaled_dot_product_attention refuses masks of rank 0 and 1 (they broadcast here)
    if fused:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=causal, scale=scale)
    return torch.matmul(attention_weights(query, key, mask, causal=causal, scale=scale), value)


@uses_backend
def dropout_mask(backend: Any, input: Tensor, *, p: float, training: bool) -> Tensor:
    """Keep-mask scaled by ``1/(1-p)`` (zeros where dropped) shaped like ``input``; ones when not training.

    Draws from the backend's ``torch.Generator``, so a seeded backend gives the same masks every run.
    """
    dtype = backend.native_dtype("float")
    device = input.device if isinstance(input, Tensor) else backend.torch_device
    shape = tuple(input.shape)
    if not training or p == 0:
        return torch.ones(shape, dtype=dtype, device=device)
    if p >= 1:
        return torch.zeros(shape, dtype=dtype, device=device)
    keep = torch.rand(shape, generator=backend.generator, dtype=torch.float32, device=device) >= p
    return keep.to(dtype) * (1.0 / (1.0 - p))


@uses_backend
def randn(backend: Any, *, shape: Any) -> Tensor:
    """Standard normal samples of ``shape`` in the backend float dtype (from the backend's generator)."""
    return cast(Tensor, backend.randn(*tuple(shape)))


@uses_backend
def randint(backend: Any, *, low: int, high: int, shape: Any) -> Tensor:
    """Integers uniform in ``[low, high)`` of ``shape`` (int64, from the backend's generator)."""
    return cast(Tensor, backend.randint(low, high, tuple(shape)))




_BINDING = Binding(torch, {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "addmm": torch.addmm})
_FORWARD, _BACKPROP = array_api.recurrent.forward(_BINDING), array_api.recurrent.backprop(_BINDING)
"""Core's shared LSTM loop and backpropagation through time, bound to ``torch``."""


class _LSTMRecurrence(torch.autograd.Function):
    """The shared loop with one backward node: the shared BPTT from the activations the forward kept,
    instead of autograd's ~10 nodes per step."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, weight_hh: Tensor, initial_hidden: Tensor, initial_cell: Tensor) -> Any:
        output, hidden, cell, kept = _FORWARD(input, weight_hh, initial_hidden, initial_cell, keep=True)
        ctx.save_for_backward(weight_hh, initial_hidden, initial_cell, output, *kept)
        return output, hidden, cell

    @staticmethod
    def backward(ctx: Any, output_grad: Tensor, hidden_grad: Tensor, cell_grad: Tensor) -> Any:
        return _BACKPROP(output_grad, hidden_grad, cell_grad, *ctx.saved_tensors)


def lstm_recurrence(
    input: Tensor, weight_hh: Tensor, initial_hidden: Tensor, initial_cell: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The LSTM time loop (gate order i, f, g, o) over ``input`` ``[B, T, 4H]``: every hidden state
    ``[B, T, H]`` and the final hidden and cell. Differentiated as one ``torch.autograd.Function`` whose
    backward is core's shared backpropagation through time from the activations the forward kept.

    >>> out, h, c = lstm_recurrence(torch.zeros(2, 3, 8), torch.zeros(8, 2), torch.zeros(2, 2), torch.zeros(2, 2))
    >>> tuple(out.shape), float(c.sum())
    ((2, 3, 2), 0.0)
    """
    tensors = (input, weight_hh, initial_hidden, initial_cell)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _LSTMRecurrence.apply(*tensors)  # type: ignore[no-untyped-call, no-any-return]  # unannotated in torch
    return cast("tuple[Tensor, Tensor, Tensor]", _FORWARD(*tensors))


_TORCH_LSTM = getattr(torch, "lstm", None)
"""``nn.LSTM``'s functional kernel: ``(input, (h0, c0), [w_ih, w_hh, b_ih, b_hh], has_biases, layers,
dropout, train, bidirectional, batch_first)`` -> ``(output, h_n, c_n)``."""


def lstm_layer(
    input: Tensor, weight_ih: Tensor, weight_hh: Tensor, bias_ih: Tensor, bias_hh: Tensor, initial_hidden: Tensor,
    initial_cell: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """One LSTM layer by ``torch.lstm``, the kernel (and backward) behind ``nn.LSTM(batch_first=True)``:
    every hidden state ``[B, T, H]`` and the final hidden and cell. Under ``torch.compile``, for DTensors, for
    other dtypes, and should a torch lack the (undocumented) ``torch.lstm``: the input projection and
    :func:`lstm_recurrence`.

    >>> weights = (torch.zeros(8, 5), torch.zeros(8, 2), torch.zeros(8), torch.zeros(8))
    >>> out, h, c = lstm_layer(torch.ones(2, 3, 5), *weights, torch.zeros(2, 2), torch.zeros(2, 2))
    >>> tuple(out.shape), float(c.sum())
    ((2, 3, 2), 0.0)
    """
    tensors = (input, weight_ih, weight_hh, bias_ih, bias_hh, initial_hidden, initial_cell)
    plain = all(type(t) is torch.Tensor and t.dtype == input.dtype for t in tensors)  # not DTensors
    plain = plain and input.dtype in (torch.float32, torch.float64)
    if _TORCH_LSTM is None or torch.compiler.is_compiling() or not plain:
        return lstm_recurrence(F.linear(input, weight_ih, bias_ih + bias_hh), weight_hh, initial_hidden, initial_cell)
    training = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)  # keeps what the backward reads
    state = (initial_hidden[None], initial_cell[None])
    output, hidden, cell = _TORCH_LSTM(input, state, tensors[1:5], True, 1, 0.0, training, False, True)
    return output, hidden[0], cell[0]
