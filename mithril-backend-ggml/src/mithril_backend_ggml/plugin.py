"""Entry point of the GGML backend (``[project.entry-points.mithril] ggml``).

Registration uses lazy string targets: loading this plugin imports neither ggml nor the op table; both
are imported the first time the ``ggml`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "ggml" in registry().backends
    True
"""

from __future__ import annotations

from mithril.extend import backend_plugin

__all__ = ["mithril_register_backends", "mithril_register_impls"]

# The op target is the builder table (one ggml graph builder per primitive).
mithril_register_backends, mithril_register_impls = backend_plugin(
    "ggml",
    backend="mithril_backend_ggml.backend:GGMLBackend",
    ops="mithril_backend_ggml.ops:BUILDERS",
    aliases=("GGMLBackend", "GgmlBackend"),
)
