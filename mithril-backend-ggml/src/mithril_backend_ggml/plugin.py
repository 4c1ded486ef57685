"""Entry point of the GGML backend (``[project.entry-points.mithril] ggml``).

Registration uses lazy string targets: loading this plugin imports neither ggml nor the op table; both
are imported the first time the ``ggml`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "ggml" in registry().backends
    True
"""

from __future__ import annotations

from collections.abc import Callable

from mithril.plugins import hookimpl

__all__ = ["mithril_register_backends", "mithril_register_impls"]


@hookimpl
def mithril_register_backends(register: Callable[..., None]) -> None:
    """Register :class:`~mithril_backend_ggml.backend.GGMLBackend` as ``ggml``."""
    register("ggml", "mithril_backend_ggml.backend:GGMLBackend", aliases=("GGMLBackend", "GgmlBackend"))


@hookimpl
def mithril_register_impls(register: Callable[..., None]) -> None:
    """Register the builder table (one ggml graph builder per primitive) for the ``ggml`` backend."""
    register("ggml", "mithril_backend_ggml.ops:BUILDERS")
