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
    from ._export import ExportResult, export
    from .backend import CBackend

__all__ = ["CBackend", "ExportResult", "export"]


def __getattr__(name: str) -> Any:
    if name == "CBackend":
        from .backend import CBackend

        return CBackend
    if name in ("export", "ExportResult"):
        from ._export import ExportResult, export

        return export if name == "export" else ExportResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
