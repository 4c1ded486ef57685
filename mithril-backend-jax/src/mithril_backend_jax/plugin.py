"""Entry point of the JAX backend (``[project.entry-points.mithril] jax``).

Registration uses lazy string targets, so loading this plugin imports neither JAX nor the op table:
both are imported the first time the ``jax`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "jax" in registry().backends
    True
"""

from __future__ import annotations

from collections.abc import Callable

from mithril.plugins import hookimpl

__all__ = ["mithril_register_backends", "mithril_register_impls"]


@hookimpl
def mithril_register_backends(register: Callable[..., None]) -> None:
    """Register :class:`~mithril_backend_jax.backend.JaxBackend` as ``jax``."""
    register("jax", "mithril_backend_jax.backend:JaxBackend", aliases=("JaxBackend",))


@hookimpl
def mithril_register_impls(register: Callable[..., None]) -> None:
    """Register the op table (one function per primitive) for the ``jax`` backend."""
    register("jax", "mithril_backend_jax.ops:TABLE")
