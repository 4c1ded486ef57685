"""The PyTorch op table: the shared elementwise implementations (:mod:`mithril.backends.array_api`)
bound to ``torch``, with PyTorch's own kernels for the rest (``torch.nn.functional`` convolutions,
pooling and attention; reductions and shape ops in torch's ``dim`` vocabulary). Gradient helpers are
derived from autograd (``torch.autograd.grad`` of their forward primitives).

Example:
    >>> from mithril_backend_torch import ops
    >>> ops.TABLE["exp"] is __import__("torch").exp, "conv2d_grad_input" in ops.TABLE
    (True, True)
"""

from __future__ import annotations

import torch
from mithril.extend import Binding, Impl, array_api, module_implementations, op_table

from . import elementwise, linalg, losses, nn, optim, reductions, shape_ops

__all__ = ["TABLE"]

_MODULES = (elementwise, linalg, reductions, shape_ops, nn, losses, optim)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

TABLE: dict[str, Impl] = op_table(
    torch,
    {
        **{name: fn for module in _MODULES for name, fn in module_implementations(module).items()},
        **elementwise.PAIRED,
        "sign": array_api.elementwise.sign_keeping_nan(Binding(torch, {}, floats=_FLOATS)),
    },
    floats=_FLOATS,
    autograd=True,
    families=("elementwise", "linalg", "conversions"),
)
"""Primitive name -> implementation (what the plugin registers for ``torch``)."""
