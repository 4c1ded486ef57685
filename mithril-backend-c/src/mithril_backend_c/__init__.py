"""Mithril's C backend: ``CBackend`` compiles models to C (-O3, OpenMP, BLAS when available) and
``export`` writes a standalone C program. Other packages compile kernels and programs through the public
kernel API, :mod:`mithril_backend_c.kernels`; the errors of native code are exported here too. Every name
is imported on first access.

Example:
    >>> from mithril_backend_c import CBackend
    >>> CBackend(threads=1).threads
    1
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mithril.extend import lazy_exports

if TYPE_CHECKING:
    from ._export import ExportResult, export
    from .backend import CBackend
    from .errors import CacheError, NativeError, NativeMemoryError
    from .toolchain import CCompileError

__all__ = ["CBackend", "CCompileError", "CacheError", "ExportResult", "NativeError", "NativeMemoryError", "export"]

__getattr__: Any = lazy_exports(
    __name__,
    {
        "CBackend": "mithril_backend_c.backend:CBackend",
        "ExportResult": "mithril_backend_c._export:ExportResult",
        "export": "mithril_backend_c._export:export",
        "CacheError": "mithril_backend_c.errors:CacheError",
        "NativeError": "mithril_backend_c.errors:NativeError",
        "NativeMemoryError": "mithril_backend_c.errors:NativeMemoryError",
        "CCompileError": "mithril_backend_c.toolchain:CCompileError",
    },
)
