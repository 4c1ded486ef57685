"""NumPy, imported on first use: ``import mithril`` does not pay NumPy's import (about 50 ms) until
something reads an attribute of ``np``; each attribute is then looked up once and kept, so later reads cost
what a module attribute costs. Type checkers see the real module.

Example:
    >>> from mithril.lazy_numpy import np
    >>> np.asarray([1, 2]).sum()
    np.int64(3)
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any

__all__ = ["np"]


class _LazyNumPy(types.ModuleType):
    """Stands for ``numpy`` until an attribute is read, then imports it (thread-safe: Python's import
    lock) and caches each attribute read on itself."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(importlib.import_module("numpy"), name)
        setattr(self, name, value)
        return value


if TYPE_CHECKING:
    import numpy as np
else:
    np = _LazyNumPy("numpy")
