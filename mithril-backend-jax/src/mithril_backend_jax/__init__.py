"""Mithril's JAX backend. ``JaxBackend`` is imported on first access, so loading the plugin
(``mithril_backend_jax.plugin``) does not import JAX.

Example:
    >>> from mithril_backend_jax import JaxBackend
    >>> JaxBackend().array([1.0, 2.0]).dtype
    dtype('float32')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mithril.extend import lazy_exports

if TYPE_CHECKING:
    from .backend import JaxBackend

__all__ = ["JaxBackend"]


__getattr__ = lazy_exports(__name__, {"JaxBackend": "mithril_backend_jax.backend:JaxBackend"})
