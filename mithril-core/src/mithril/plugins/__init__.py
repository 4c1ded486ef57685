"""Mithril's plugin system: pluggy hooks + the ``mithril`` entry-point group.

``list()`` returns loaded and broken plugins; ``registry()`` the filled registry; ``reset()`` forgets
everything (tests). Third parties write ``@hookimpl`` functions (see :mod:`.hookspecs`).

Example:
    >>> from mithril import plugins
    >>> spec = plugins.registry(entry_points=False).primitive("relu")
    >>> spec.name
    'relu'
"""

from __future__ import annotations

from .hookspecs import hookimpl, hookspec
from .manager import BrokenPlugin, PluginInfo, PluginManager, list_plugins, manager, registry, reset

list = list_plugins  # ``mithril.plugins.list()`` is the documented name

__all__ = [
    "BrokenPlugin",
    "PluginInfo",
    "PluginManager",
    "hookimpl",
    "hookspec",
    "list",
    "manager",
    "registry",
    "reset",
]
