"""The JAX op table: the shared implementations (:mod:`mithril.backends.array_api`) bound to ``jax.numpy``
and ``jax.lax.scan`` (loops), with JAX's own where it differs or is faster (:mod:`.overrides`). Gradient
helpers are derived from ``jax.vjp`` of their forward primitives (JAX differentiates the forward itself).

Example:
    >>> from mithril_backend_jax import ops
    >>> ops.TABLE["add"] is __import__("jax").numpy.add
    True
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from mithril.extend import Impl, op_table

from . import overrides

__all__ = ["TABLE"]

_FLOATS = (*(np.dtype(n) for n in ("float16", "float32", "float64")), jnp.dtype(jnp.bfloat16))

TABLE: dict[str, Impl] = op_table(jnp, overrides.TABLE, floats=_FLOATS, scan=jax.lax.scan, autograd=True)
"""Primitive name -> implementation (what the plugin registers for ``jax``)."""
