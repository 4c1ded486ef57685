"""Entry point of the NumPy backend (``[project.entry-points.mithril] numpy``).

Registration uses lazy string targets, so loading this plugin imports nothing heavy: the backend class
and the op table are imported the first time the ``numpy`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "numpy" in registry().backends
    True
"""

from __future__ import annotations

from collections.abc import Callable

from mithril.plugins import hookimpl

__all__ = ["mithril_register_backends", "mithril_register_impls"]


@hookimpl
def mithril_register_backends(register: Callable[..., None]) -> None:
    """Register :class:`~mithril_backend_numpy.backend.NumpyBackend` as ``numpy``."""
    register("numpy", "mithril_backend_numpy.backend:NumpyBackend", aliases=("NumpyBackend",))


@hookimpl
def mithril_register_impls(register: Callable[..., None]) -> None:
    """Register the op table (one function per primitive) for the ``numpy`` backend."""
    register("numpy", "mithril_backend_numpy.ops:TABLE")
