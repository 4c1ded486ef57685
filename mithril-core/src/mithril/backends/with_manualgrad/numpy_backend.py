"""Upstream Mithril's module path for ``NumpyBackend``; resolved lazily through the plugin registry."""

from typing import Any

from ...errors import MissingAttributeError
from ...lazy_plugins import backend_class


def __getattr__(name: str) -> Any:
    if name == "NumpyBackend":
        return backend_class("NumpyBackend")
    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
