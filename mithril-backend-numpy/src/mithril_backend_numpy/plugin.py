"""Entry point of the NumPy backend (``[project.entry-points.mithril] numpy``).

Registration uses lazy string targets, so loading this plugin imports nothing heavy: the backend class
and the op table are imported the first time the ``numpy`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "numpy" in registry().backends
    True
"""

from __future__ import annotations

from mithril.extend import backend_plugin

__all__ = ["mithril_register_backends", "mithril_register_impls"]

mithril_register_backends, mithril_register_impls = backend_plugin(
    "numpy",
    backend="mithril_backend_numpy.backend:NumpyBackend",
    ops="mithril_backend_numpy.ops:TABLE",
    aliases=("NumpyBackend",),
)
