"""The C emitter table: one function per primitive, named after it, collected from the family modules.

An emitter takes ``(ctx, node)`` and returns the C lines computing the node's outputs (see
:class:`~mithril_backend_c.context.Ctx`). :data:`TABLE` is the backend's op table (the plugin registers
``mithril_backend_c.emitters:TABLE``); each family module's ``__all__`` lists its emitters. ``lambda``
(a Python callable) has no emitter: it is the C backend's one declared gap.

Example:
    >>> from mithril_backend_c.emitters import TABLE, emitter_table
    >>> "conv2d" in TABLE, "lambda" in TABLE, emitter_table()["conv2d"] is TABLE["conv2d"]
    (True, False, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from mithril.extend import plugin_registry

from ..context import Emitter
from . import elementwise, gradient_helpers, linalg, losses, nn, reductions, shape_ops

__all__ = ["TABLE", "emitter_table"]

_MODULES = (linalg, reductions, shape_ops, nn, losses, gradient_helpers)

TABLE: dict[str, Emitter] = {
    **elementwise.EMITTERS,
    **{name: getattr(module, name) for module in _MODULES for name in module.__all__},
}
"""Primitive name -> its C emitter."""


def emitter_table() -> Mapping[str, Emitter]:
    """The C emitters the plugin registry holds for the ``c`` backend (:data:`TABLE`, plus any other
    plugin's emitters for it); :data:`TABLE` itself when the C backend's plugin is not loaded.

    >>> sorted(emitter_table())[:3]
    ['abs', 'absolute_error', 'add']
    """
    return cast(Mapping[str, Emitter], plugin_registry().impls("c")) or TABLE
