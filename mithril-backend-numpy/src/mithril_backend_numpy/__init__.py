"""Mithril's NumPy backend. ``NumpyBackend`` is imported on first access, so loading the plugin
(``mithril_backend_numpy.plugin``) stays cheap.

Example:
    >>> from mithril_backend_numpy import NumpyBackend
    >>> NumpyBackend().array([1.0, 2.0]).dtype
    dtype('float32')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mithril.extend import lazy_exports

if TYPE_CHECKING:
    from .backend import NumpyBackend

__all__ = ["NumpyBackend"]


__getattr__ = lazy_exports(__name__, {"NumpyBackend": "mithril_backend_numpy.backend:NumpyBackend"})
