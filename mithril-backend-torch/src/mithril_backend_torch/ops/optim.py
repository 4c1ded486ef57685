"""Optimizer-update primitives with PyTorch's in-place kernels.

``adam_update`` is the formula of :func:`mithril.optim.optimizers.adam_step` (the primitive's decomposition,
which the other backends compile) in ``torch.optim.AdamW``'s kernels: ``lerp``, ``addcmul_``, ``addcdiv``
on fresh tensors, eight passes over memory and four new tensors per parameter where the decomposition
takes thirteen of each. The inputs are written only with ``in_place=True``, which the eager training step
sets because it consumes the state it is given (one new tensor per parameter, as ``torch.optim``).

Example:
    >>> import torch
    >>> p, g, zeros = (torch.tensor([x], dtype=torch.float64) for x in (1.0, 0.5, 0.0))
    >>> root = (1 - 0.999) ** 0.5  # step 1, lr 0.1, eps 1e-8
    >>> step_size, eps_hat = 0.1 * root / (1 - 0.9), 1e-8 * root
    >>> new_p, m, v = adam_update(p, g, zeros, zeros, step_size, eps_hat, beta1=0.9, beta2=0.999, l2=0.0)
    >>> round(float(new_p), 6), round(float(m), 6), round(float(v), 6)
    (0.9, 0.05, 0.00025)
"""

from __future__ import annotations

from typing import Any

import torch

Tensor = torch.Tensor


def adam_update(
    param: Tensor, grad: Tensor, m: Tensor, v: Tensor, step_size: Any, eps_hat: Any, shrink: Any = None,
    *, beta1: float, beta2: float, l2: float, in_place: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """One Adam/AdamW step: ``(param', m', v')`` (see the ``adam_update`` primitive's doc); with
    ``in_place`` (a training step that consumes its state) written into ``param``, ``m`` and ``v`` as
    ``torch.optim.AdamW`` does, one temporary per parameter."""
    if l2:
        grad = grad.add(param, alpha=l2)
    if in_place:
        m.lerp_(grad, 1.0 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denominator = v.sqrt().add_(eps_hat).div_(step_size)
        if shrink is not None:
            param.mul_(shrink)
        return param.addcdiv_(m, denominator, value=-1.0), m, v
    new_m = torch.lerp(m, grad, 1.0 - beta1)
    new_v = v.mul(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    denominator = new_v.sqrt().add_(eps_hat).div_(step_size)
    if shrink is not None:
        return param.mul(shrink).addcdiv_(new_m, denominator, value=-1.0), new_m, new_v
    return torch.addcdiv(param, new_m, denominator, value=-1.0), new_m, new_v
