"""Errors of the native backends (C, and GGML, which builds on it). All are ``MithrilError`` s.

Example:
    >>> from mithril_backend_c.errors import NativeError
    >>> from mithril.errors import MithrilError
    >>> issubclass(NativeError, MithrilError)
    True
"""

from __future__ import annotations

from mithril.errors import MithrilError

__all__ = ["CacheError", "NativeError", "NativeMemoryError"]


class NativeError(MithrilError, RuntimeError):
    """Generated native code reported a failure (a nonzero return code); the message says which."""


class NativeMemoryError(MithrilError, MemoryError):
    """Native code could not allocate the memory it needs (workspace, conversion buffers)."""


class CacheError(MithrilError, OSError):
    """An entry of the compiled-library cache cannot be used; the message names the file and how to clear
    the cache (``$MITHRIL_C_CACHE``, default ``~/.cache/mithril/c``)."""
