"""Primitive implementations written once against an array namespace ``xp`` and shared by the Python
backends (NumPy, JAX, MLX, and PyTorch where its namespace fits).

A backend's op table is :func:`op_table` of its framework module plus the overrides where the framework
differs or is faster (``jax.lax.conv_general_dilated``, ``torch.nn.functional.conv2d``). Everything is
bound when the table is built (once, when the backend is first used): a primitive the framework already
has is the framework function itself (``add`` *is* ``np.add``), and composed ones close over the
functions they call, so a call costs what the hand-written function would.

Example:
    >>> import numpy as np
    >>> from mithril.backends.array_api import op_table
    >>> ops = op_table(np)
    >>> ops["add"] is np.add, ops["leaky_relu"](np.array([-2.0, 3.0]), slope=0.5).tolist()
    (True, [-1.0, 3.0])
"""

from __future__ import annotations

from . import conversions, elementwise, linalg, nn, recurrent
from ._binding import Binding, Impl
from ._table import op_table
from .derived import GRADIENT_HELPERS, derived_gradient_helpers

__all__ = [
    "GRADIENT_HELPERS",
    "Binding",
    "Impl",
    "conversions",
    "derived_gradient_helpers",
    "elementwise",
    "linalg",
    "nn",
    "op_table",
    "recurrent",
]  # fmt: skip
