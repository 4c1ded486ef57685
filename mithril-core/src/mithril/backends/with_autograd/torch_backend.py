"""Upstream Mithril's module path for ``TorchBackend``; resolved lazily through the plugin registry."""

from typing import Any

from ...errors import MissingAttributeError
from ...lazy_plugins import backend_class


def __getattr__(name: str) -> Any:
    if name == "TorchBackend":
        return backend_class("TorchBackend")
    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
