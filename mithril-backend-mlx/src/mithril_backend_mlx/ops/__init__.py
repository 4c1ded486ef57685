"""The MLX op table: the shared implementations (:mod:`mithril.backends.array_api`) bound to
``mlx.core``, with MLX's own where it differs or is faster (:mod:`.overrides`). Gradient helpers are
derived from ``mx.vjp`` of their forward primitives (MLX differentiates the forward itself).

Example:
    >>> from mithril_backend_mlx import ops
    >>> ops.TABLE["add"] is __import__("mlx.core").core.add
    True
"""

from __future__ import annotations

import mlx.core as mx
from mithril.extend import Impl, op_table

from . import overrides

__all__ = ["TABLE"]

TABLE: dict[str, Impl] = op_table(mx, overrides.TABLE, sequence=list, floats=overrides.FLOATS, autograd=True)
"""Primitive name -> implementation (what the plugin registers for ``mlx``)."""
