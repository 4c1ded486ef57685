"""Union-find root lookup with path compression, shared by dims, variadic segments and graph values."""

from __future__ import annotations

from typing import Any, TypeVar

from .journal import _CURRENT, touch

T = TypeVar("T")


def find_root(node: T) -> T:
    """The representative of ``node``: follow ``_parent`` links to the root, compressing the path."""
    root: Any = node
    while root._parent is not None:
        root = root._parent
    current: Any = node
    while current._parent is not None and current._parent is not root:
        if _CURRENT:
            touch(current)
        current._parent, current = root, current._parent
    found: T = root
    return found
