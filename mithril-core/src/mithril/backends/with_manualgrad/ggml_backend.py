"""Upstream Mithril's module path for ``GGMLBackend``; resolved lazily through the plugin registry."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "GGMLBackend":
        from ...plugins.lookup import backend_class

        return backend_class("GGMLBackend")
    from ...errors import MissingAttributeError

    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
