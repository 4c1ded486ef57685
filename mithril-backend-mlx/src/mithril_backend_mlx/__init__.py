"""Mithril's MLX backend. ``MlxBackend`` is imported on first access, so loading the plugin
(``mithril_backend_mlx.plugin``) does not import ``mlx``.

Example:
    >>> from mithril_backend_mlx import MlxBackend
    >>> MlxBackend().array([1.0, 2.0]).dtype
    mlx.core.float32
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mithril.extend import lazy_exports

if TYPE_CHECKING:
    from .backend import MlxBackend

__all__ = ["MLXBackend", "MlxBackend"]


__getattr__ = lazy_exports(
    __name__,
    {"MlxBackend": "mithril_backend_mlx.backend:MlxBackend", "MLXBackend": "mithril_backend_mlx.backend:MlxBackend"},
)
