"""Mithril's JAX backend. ``JaxBackend`` is imported on first access, so loading the plugin
(``mithril_backend_jax.plugin``) does not import JAX.

Example:
    >>> from mithril_backend_jax import JaxBackend
    >>> JaxBackend().array([1.0, 2.0]).dtype
    dtype('float32')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mithril.errors import AttributeError_

if TYPE_CHECKING:
    from .backend import JaxBackend

__all__ = ["JaxBackend"]


def __getattr__(name: str) -> Any:
    if name == "JaxBackend":
        from .backend import JaxBackend

        return JaxBackend
    raise AttributeError_(f"module {__name__!r} has no attribute {name!r}")
