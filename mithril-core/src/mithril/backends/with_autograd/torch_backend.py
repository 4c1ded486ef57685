"""Upstream Mithril's module path for ``TorchBackend``; resolved lazily through the plugin registry."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "TorchBackend":
        from ...plugins.lookup import backend_class

        return backend_class("TorchBackend")
    from ...errors import MissingAttributeError

    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
