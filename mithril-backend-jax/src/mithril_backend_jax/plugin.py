"""Entry point of the JAX backend (``[project.entry-points.mithril] jax``).

Registration uses lazy string targets, so loading this plugin imports neither JAX nor the op table:
both are imported the first time the ``jax`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "jax" in registry().backends
    True
"""

from __future__ import annotations

from mithril.extend import backend_plugin

__all__ = ["mithril_register_backends", "mithril_register_impls"]

mithril_register_backends, mithril_register_impls = backend_plugin(
    "jax",
    backend="mithril_backend_jax.backend:JaxBackend",
    ops="mithril_backend_jax.ops:TABLE",
    aliases=("JaxBackend",),
)
