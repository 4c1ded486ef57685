"""Upstream Mithril's module path for ``GGMLBackend``; resolved lazily through the plugin registry."""

from typing import Any

from ...errors import MissingAttributeError
from ...lazy_plugins import backend_class


def __getattr__(name: str) -> Any:
    if name == "GGMLBackend":
        return backend_class("GGMLBackend")
    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
