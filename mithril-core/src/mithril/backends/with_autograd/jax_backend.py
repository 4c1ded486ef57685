"""Upstream Mithril's module path for ``JaxBackend``; resolved lazily through the plugin registry."""

from typing import Any

from ...errors import MissingAttributeError
from ...lazy_plugins import backend_class


def __getattr__(name: str) -> Any:
    if name == "JaxBackend":
        return backend_class("JaxBackend")
    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
