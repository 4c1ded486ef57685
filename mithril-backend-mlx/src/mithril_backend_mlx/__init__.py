"""Mithril's MLX backend. ``MlxBackend`` is imported on first access, so loading the plugin
(``mithril_backend_mlx.plugin``) does not import ``mlx``.

Example:
    >>> from mithril_backend_mlx import MlxBackend
    >>> MlxBackend().array([1.0, 2.0]).dtype
    mlx.core.float32
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mithril.errors import AttributeError_

if TYPE_CHECKING:
    from .backend import MlxBackend

__all__ = ["MlxBackend", "MLXBackend"]


def __getattr__(name: str) -> Any:
    if name in ("MlxBackend", "MLXBackend"):
        from .backend import MlxBackend

        return MlxBackend
    raise AttributeError_(f"module {__name__!r} has no attribute {name!r}")
