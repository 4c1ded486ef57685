"""Backends: the ``Backend`` ABC and lazily resolved plugin backends.

``from mithril.backends import TorchBackend`` asks the plugin registry; a missing backend raises an
error naming the package to install.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from ..errors import MissingAttributeError
from ..lazy_plugins import backend_class
from .backend import Backend

__all__ = ["Backend"]


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise MissingAttributeError(f"module 'mithril.backends' has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a submodule not imported yet, not a backend
        return importlib.import_module(f"{__name__}.{name}")
    return backend_class(name)
