"""Upstream Mithril's module path for ``MlxBackend``; resolved lazily through the plugin registry."""

from typing import Any

from ...errors import MissingAttributeError
from ...lazy_plugins import backend_class


def __getattr__(name: str) -> Any:
    if name == "MlxBackend":
        return backend_class("MlxBackend")
    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
