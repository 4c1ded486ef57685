"""Entry point of the C backend (``[project.entry-points.mithril] c``).

Registration uses lazy string targets: loading the plugin imports nothing heavy.

Example:
    >>> from mithril.plugins import registry
    >>> "c" in registry().backends
    True
"""

from __future__ import annotations

from collections.abc import Callable

from mithril.plugins import hookimpl

__all__ = ["mithril_register_backends", "mithril_register_impls"]


@hookimpl
def mithril_register_backends(register: Callable[..., None]) -> None:
    """Register :class:`~mithril_backend_c.backend.CBackend` as ``c``."""
    register("c", "mithril_backend_c.backend:CBackend", aliases=("CBackend",))


@hookimpl
def mithril_register_impls(register: Callable[..., None]) -> None:
    """Register the emitter table (one C emitter per primitive) for the ``c`` backend."""
    register("c", "mithril_backend_c.emitters")
