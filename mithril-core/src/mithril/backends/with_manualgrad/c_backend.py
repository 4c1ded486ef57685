"""Upstream Mithril's module path for ``CBackend``; resolved lazily through the plugin registry."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "CBackend":
        from ...plugins.lookup import backend_class

        return backend_class("CBackend")
    from ...errors import MissingAttributeError

    raise MissingAttributeError(f"module {__name__!r} has no attribute {name!r}")
