"""Per-element losses (no reduction over the batch; that is ``mean``/``sum``). Class axis is 1.

Example:
    >>> import torch
    >>> logits = torch.zeros(1, 4)
    >>> round(float(cross_entropy(logits, torch.tensor([2]), input_type="logits", categorical=True, eps=1e-12)[0]), 4)
    1.3863
"""

from __future__ import annotations

import torch
from mithril.errors import ArgumentError
from mithril.extend import array_api

Tensor = torch.Tensor


def cross_entropy(input: Tensor, target: Tensor, *, input_type: str, categorical: bool, eps: float) -> Tensor:
    """``-sum(target_onehot * log p, axis=1)``: input [N, C, ...]; target class indices [N, ...] when
    ``categorical``, else probabilities shaped like input. Output [N, ...]."""
    log_p: Tensor = array_api.nn.log_probabilities(
        input, input_type, lambda x: torch.log_softmax(x, dim=1), lambda p: torch.log(torch.clamp_min(p, eps))
    )
    if categorical:
        picked = torch.gather(log_p, 1, target.to(torch.int64).unsqueeze(1))
        return -picked.squeeze(1)
    return -torch.sum(target * log_p, dim=1)


def binary_cross_entropy(input: Tensor, target: Tensor, *, input_type: str, eps: float) -> Tensor:
    """``-(t log p + (1 - t) log(1 - p))``; ``p = sigmoid(input)`` for ``logits`` (computed stably as
    ``logaddexp(x, 0) - x t``) or ``input`` for ``probs`` (clamped to ``[eps, 1 - eps]``)."""
    if input_type == "logits":
        zero = torch.zeros((), dtype=input.dtype, device=input.device)
        return torch.logaddexp(input, zero) - input * target
    if input_type == "probs":
        log_p, log_not_p = torch.log(torch.clamp_min(input, eps)), torch.log(torch.clamp_min(1 - input, eps))
        return -(target * log_p + (1 - target) * log_not_p)
    raise ArgumentError(f"binary_cross_entropy: input_type must be 'logits' or 'probs', got {input_type!r}")


def squared_error(input: Tensor, target: Tensor) -> Tensor:
    """``(input - target) ** 2``"""
    return torch.square(input - target)


def absolute_error(input: Tensor, target: Tensor) -> Tensor:
    """``abs(input - target)``"""
    return torch.abs(input - target)
