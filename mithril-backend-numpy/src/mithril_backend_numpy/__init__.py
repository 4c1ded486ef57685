"""Mithril's NumPy backend. ``NumpyBackend`` is imported on first access, so loading the plugin
(``mithril_backend_numpy.plugin``) stays cheap.

Example:
    >>> from mithril_backend_numpy import NumpyBackend
    >>> NumpyBackend().array([1.0, 2.0]).dtype
    dtype('float32')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mithril.errors import AttributeError_

if TYPE_CHECKING:
    from .backend import NumpyBackend

__all__ = ["NumpyBackend"]


def __getattr__(name: str) -> Any:
    if name == "NumpyBackend":
        from .backend import NumpyBackend

        return NumpyBackend
    raise AttributeError_(f"module {__name__!r} has no attribute {name!r}")
