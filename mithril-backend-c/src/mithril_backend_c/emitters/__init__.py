"""The C emitter table: one function per primitive, named after it, collected from the family modules.

An emitter takes ``(ctx, node)`` and returns the C lines computing the node's outputs (see
:class:`~mithril_backend_c.context.Ctx`). :data:`TABLE` is the backend's op table (the plugin registers
``mithril_backend_c.emitters:TABLE``); each family module's ``__all__`` lists its emitters. ``lambda``
(a Python callable) has no emitter: it is the C backend's one declared gap.

Example:
    >>> from mithril_backend_c.emitters import TABLE
    >>> "conv2d" in TABLE, "lambda" in TABLE
    (True, False)
"""

from __future__ import annotations

from ..context import Emitter
from . import elementwise, gradient_helpers, linalg, losses, nn, reductions, shape_ops

__all__ = ["TABLE"]

_MODULES = (linalg, reductions, shape_ops, nn, losses, gradient_helpers)

TABLE: dict[str, Emitter] = {
    **elementwise.EMITTERS,
    **{name: getattr(module, name) for module in _MODULES for name in module.__all__},
}
"""Primitive name -> its C emitter."""
