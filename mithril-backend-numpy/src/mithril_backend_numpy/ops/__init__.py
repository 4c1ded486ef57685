"""The NumPy op table: the shared implementations (:mod:`mithril.backends.array_api`) bound to ``numpy``,
with NumPy's own where it differs or is faster (:mod:`.overrides`), its im2col convolutions and strided
pooling (:mod:`._conv`, :mod:`._pool`) and the hand-written gradient helpers of a manual-gradient backend
(:mod:`.gradient_helpers`).

Example:
    >>> from mithril_backend_numpy import ops
    >>> ops.TABLE["add"] is __import__("numpy").add, "conv2d_grad_input" in ops.TABLE
    (True, True)
"""

from __future__ import annotations

import numpy as np
from mithril.extend import Impl, module_implementations, op_table

from . import _conv, _pool, gradient_helpers, overrides

__all__ = ["TABLE"]

_CONV = {"conv_forward": ("conv1d", "conv2d"), "conv_grad_input": ("conv1d_grad_input", "conv2d_grad_input")}
_CONV["conv_grad_weight"] = ("conv1d_grad_weight", "conv2d_grad_weight")
_POOL = {"max_pool": "max_pool2d", "avg_pool": "avg_pool2d", "max_pool_grad": "max_pool2d_grad"}
_POOL["avg_pool_grad"] = "avg_pool2d_grad"

TABLE: dict[str, Impl] = op_table(
    np,
    {
        **module_implementations(overrides),
        "dropout_mask": overrides.dropout_mask,  # made by a shared factory, not defined there
        **module_implementations(gradient_helpers),
        **{name: getattr(_conv, fn) for fn, names in _CONV.items() for name in names},
        **{name: getattr(_pool, fn) for fn, name in _POOL.items()},
    },
)
"""Primitive name -> implementation (what the plugin registers for ``numpy``)."""
