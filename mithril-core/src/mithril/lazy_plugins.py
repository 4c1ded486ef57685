"""The plugin system as the rest of core reaches it: loaded on first use, never by ``import mithril``.

:mod:`mithril.plugins` imports pluggy and, on its first registry lookup, every ``mithril`` entry point (the
backend and model packages); ``import mithril`` must stay fast and work with no plugin installed. Core's
modules therefore import these functions at module level and each one imports :mod:`mithril.plugins` when it is
first called; this module is the one place that defers that import.

Example:
    >>> registry().primitive("relu").name
    'relu'
"""

from __future__ import annotations

from typing import Any

from .primitives.registry import Registry

__all__ = ["available_backends", "backend_class", "model_builder", "registry"]


def registry(*, entry_points: bool = True) -> Registry:
    """The filled registry (:func:`mithril.plugins.registry`): core's primitives, and the plugins' unless
    ``entry_points=False``."""
    from .plugins.manager import registry as loaded  # deferred: pluggy and the entry points load on first use

    return loaded(entry_points=entry_points)


def backend_class(name: str) -> type:
    """The backend class registered under ``name`` (:func:`mithril.plugins.lookup.backend_class`)."""
    from .plugins.lookup import backend_class as lookup  # deferred: pluggy and the entry points load on first use

    return lookup(name)


def model_builder(name: str) -> Any:
    """The model builder registered under ``name`` (:func:`mithril.plugins.lookup.model_builder`)."""
    from .plugins.lookup import model_builder as lookup  # deferred: pluggy and the entry points load on first use

    return lookup(name)


def available_backends() -> list[str]:
    """The names of the registered backends (:func:`mithril.plugins.lookup.available_backends`)."""
    from .plugins.lookup import available_backends as lookup  # deferred: pluggy and the entry points load on first use

    return lookup()
