"""Optimizer-update primitives with PyTorch's in-place kernels.

``adam_update`` is the formula of :func:`mithril.optim.optimizers.adam_step` (the primitive's decomposition,
which the other backends compile) in ``torch.optim.AdamW``'s kernels: ``lerp``, ``addcmul_``, ``addcdiv``
on fresh tensors, eight passes over memory and four new tensors per parameter where the decomposition
takes thirteen of each. The inputs are never written: the old training state stays valid.

Example:
    >>> import torch
    >>> p, g, zeros = (torch.tensor([x], dtype=torch.float64) for x in (1.0, 0.5, 0.0))
    >>> attrs = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "decoupled": False}
    >>> new_p, m, v = adam_update(p, g, zeros, zeros, 0.1, torch.tensor(1.0, dtype=torch.float64), **attrs)
    >>> round(float(new_p), 6), round(float(m), 6), round(float(v), 6)
    (0.9, 0.05, 0.00025)
"""

from __future__ import annotations

from typing import Any

import torch

Tensor = torch.Tensor


def adam_update(
    param: Tensor, grad: Tensor, m: Tensor, v: Tensor, lr: Any, step: Any,
    *, beta1: float, beta2: float, eps: float, weight_decay: float, decoupled: bool,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """One Adam/AdamW step: ``(param', m', v')`` (see the ``adam_update`` primitive's doc)."""
    if weight_decay and not decoupled:
        grad = grad.add(param, alpha=weight_decay)
    new_m = torch.lerp(m, grad, 1.0 - beta1)
    new_v = v.mul(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    root_correction = (1.0 - beta2**step) ** 0.5
    step_size = lr * root_correction / (1.0 - beta1**step)
    denominator = new_v.sqrt().add_(eps * root_correction).div_(step_size)
    if weight_decay and decoupled:
        return param.mul(1.0 - lr * weight_decay).addcdiv_(new_m, denominator, value=-1.0), new_m, new_v
    return torch.addcdiv(param, new_m, denominator, value=-1.0), new_m, new_v
