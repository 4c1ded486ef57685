"""Upstream Mithril's module path for ``CBackend``; resolved lazily through the plugin registry."""

from typing import Any

from ...errors import MissingAttributeError
from ...lazy_plugins import backend_class


def __getattr__(name: str) -> Any:
    if name == "CBackend":
        return backend_class("CBackend")
    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
