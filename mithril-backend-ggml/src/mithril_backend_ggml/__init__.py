"""Mithril's GGML backend: a compiled model becomes a ggml compute graph run by libggml.

``GGMLBackend`` is imported on first access, so loading the plugin stays cheap (no libggml load).

Example:
    >>> import mithril as ml
    >>> ml.GGMLBackend(threads=2)                      # doctest: +SKIP
    GGMLBackend(dtype=float32, device='cpu', threads=2)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mithril.extend import lazy_exports

if TYPE_CHECKING:
    from .backend import GGMLBackend

__all__ = ["GGMLBackend"]

__getattr__: Any = lazy_exports(__name__, {"GGMLBackend": "mithril_backend_ggml.backend:GGMLBackend"})
