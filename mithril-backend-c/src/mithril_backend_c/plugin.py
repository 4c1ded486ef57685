"""Entry point of the C backend (``[project.entry-points.mithril] c``).

Registration uses lazy string targets: loading the plugin imports nothing heavy.

Example:
    >>> from mithril.plugins import registry
    >>> "c" in registry().backends
    True
"""

from __future__ import annotations

from mithril.extend import backend_plugin

__all__ = ["mithril_register_backends", "mithril_register_impls"]

# The op target is the emitter table (one C emitter per primitive).
mithril_register_backends, mithril_register_impls = backend_plugin(
    "c",
    backend="mithril_backend_c.backend:CBackend",
    ops="mithril_backend_c.emitters:TABLE",
    aliases=("CBackend",),
)
