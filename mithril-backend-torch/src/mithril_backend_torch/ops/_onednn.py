"""oneDNN's float32 ``linear`` for CPU inference, where PyTorch's default (MKL) is slow.

PyTorch's CPU ``F.linear`` goes through MKL's GEMM, which on this project's AMD machines reaches less than
half of oneDNN's bandwidth for the one-row products of autoregressive decoding (GPT-2 small's LM head:
11.5 ms vs 5.1 ms) and is slower at every size measured. PyTorch ships oneDNN and uses this same kernel
(``torch.ops.mkldnn._linear_pointwise``, with dense weights) when ``torch.compile`` fuses linear layers;
it has no autograd formula, so it is used only when no gradient is being recorded, and only if it exists
and agrees with ``F.linear`` on a probe (otherwise ``F.linear`` is always used).

Each call also builds a oneDNN primitive: about 14 us of fixed cost, against 3 us for ``F.linear`` on a
tiny product. So it is used only for products big enough to win (:func:`large_enough`, measured with two
threads): a weight of at least ``2**19`` elements (GPT-2's 768x768 at one row: 0.91x ``F.linear``'s time,
512x1024: 0.58x) or at least ``2**24`` multiply-adds (128x784 by 784x512: 0.91x); below, e.g. 32x256 by
256x256 (1.26x), 128x256 by 256x10 (1.46x) or 2x8 by 8x8 (5.8x), ``F.linear`` is faster.

Example:
    >>> import torch
    >>> usable(torch.ones(1, 3), torch.ones(4, 3), None) in (True, False)
    True
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

__all__ = ["available", "linear", "usable"]


@functools.cache
def available() -> bool:
    """Whether the oneDNN kernel exists here and matches ``F.linear`` on a small probe."""
    op = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if op is None or not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]  # unannotated in torch
        return False
    try:
        # fixed values: the probe must not draw from (and so change) the global random generator
        x = torch.arange(15, dtype=torch.float32).reshape(3, 5).sin()
        w = torch.arange(20, dtype=torch.float32).reshape(4, 5).cos()
        b = torch.arange(4, dtype=torch.float32)
        return bool(torch.allclose(op(x, w, b, "none", [], ""), F.linear(x, w, b), rtol=1e-5, atol=1e-5))
    except (RuntimeError, TypeError):
        return False


MIN_WEIGHT_ELEMENTS = 1 << 19
"""A weight this big takes oneDNN's kernel at any number of rows (see the module's docstring)."""
MIN_MULTIPLY_ADDS = 1 << 24
"""A smaller weight takes it when the product has at least this many multiply-adds."""


def large_enough(input: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``input @ weight.T`` (``weight`` 2-D ``[out, in]``) is big enough for oneDNN's fixed cost to pay.

    >>> large_enough(torch.ones(1, 768), torch.ones(768, 768)), large_enough(torch.ones(2, 8), torch.ones(8, 8))
    (True, False)
    """
    out_features, in_features = weight.shape
    return out_features * in_features >= MIN_WEIGHT_ELEMENTS or input.numel() * out_features >= MIN_MULTIPLY_ADDS


def usable(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Float32 CPU tensors, a product :func:`large_enough` to pay for the kernel's fixed cost, no gradient
    recorded, no autocast, not inside ``torch.compile`` (inductor picks its own kernel and cannot lower this
    one), and the kernel available."""
    if torch.compiler.is_compiling() or type(input) is not torch.Tensor or type(weight) is not torch.Tensor:
        return False  # compiled, or DTensors (placed over a device mesh): F.linear
    if weight.ndim != 2 or input.ndim < 2 or not large_enough(input, weight):
        return False
    if input.dtype != torch.float32 or weight.dtype != torch.float32 or input.device.type != "cpu":
        return False
    if torch.is_autocast_enabled("cpu"):
        return False  # autocast (use_amp, precision="bf16-mixed") casts F.linear's inputs; this kernel it would not

    if bias is not None and (bias.dtype != torch.float32 or bias.ndim != 1):
        return False
    recording = torch.is_grad_enabled() and (
        input.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    return not recording and available()


def linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``input @ weight.T + bias`` by oneDNN (call only when :func:`usable`)."""
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(input, weight, bias, "none", [], "")  # torch.ops: Any
    return out
