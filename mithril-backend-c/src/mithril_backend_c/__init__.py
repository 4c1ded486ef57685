"""Mithril's C backend: ``CBackend`` compiles models to C (-O3, OpenMP, BLAS when available) and
``export`` writes a standalone C program. Both are imported on first access.

Example:
    >>> from mithril_backend_c import CBackend
    >>> CBackend(threads=1).threads
    1
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import CBackend
    from .export import export

__all__ = ["CBackend", "export"]


def __getattr__(name: str) -> Any:
    if name == "CBackend":
        from .backend import CBackend

        return CBackend
    if name == "export":
        from .export import export

        return export
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
