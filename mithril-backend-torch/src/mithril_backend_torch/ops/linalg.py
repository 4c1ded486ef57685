"""Matrix multiplication and the fused ``linear`` layer.

Example:
    >>> import torch
    >>> linear(torch.ones(2, 3), torch.ones(4, 3), None).shape
    torch.Size([2, 4])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _onednn

Tensor = torch.Tensor


def matmul(left: Tensor, right: Tensor) -> Tensor:
    """``np.matmul(left, right)`` (batched, NumPy 1-D promotion rules)."""
    return torch.matmul(left, right)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``.

    Float32 inference on the CPU runs oneDNN's kernel (see :mod:`._onednn`); everything else ``F.linear``."""
    if _onednn.usable(input, weight, bias):
        return _onednn.linear(input, weight, bias)
    same_dtype = input.dtype == weight.dtype and (bias is None or bias.dtype == weight.dtype)
    if (same_dtype or torch.is_autocast_enabled(input.device.type)) and (bias is None or bias.ndim == 1):
        return F.linear(input, weight, bias)  # under autocast F.linear casts all three, as PyTorch's AMP does
    out = torch.matmul(input, weight.transpose(-1, -2))
    return out if bias is None else out + bias
