"""The plugin manager facade: loads the built-in plugin and every ``mithril`` entry point, robustly.

A plugin that fails to import or to register is recorded (distribution, version, exception), logged,
and never breaks ``import mithril``. Asking for something it would have provided raises an error that
names the package, the cause and the fix.

Example:
    >>> from mithril import plugins
    >>> "mithril-core" in [p.name for p in plugins.list()]
    True
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from ..errors import ModelKeyError
from ..primitives.registry import Registry
from . import builtin, hookspecs

__all__ = ["BrokenPlugin", "PluginInfo", "PluginManager", "list_plugins", "manager", "registry", "reset"]

log = logging.getLogger("mithril.plugins")
ENTRY_POINT_GROUP = "mithril"
DISABLE_ENV = "MITHRIL_DISABLE_PLUGINS"


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin: its entry-point name, module and distribution."""

    name: str
    module: str
    distribution: str
    version: str


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin that failed to load, kept so that later lookups can say why."""

    name: str
    distribution: str
    version: str
    error: str
    traceback: str

    def describe(self) -> str:
        return f"plugin {self.name!r} from {self.distribution} {self.version} failed to load: {self.error}"


class PluginManager:
    """Owns the pluggy manager and the :class:`Registry` it fills. One typed method per hook."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager("mithril")
        self._pm.add_hookspecs(hookspecs)
        self.registry = Registry()
        self.loaded: list[PluginInfo] = []
        self.broken: list[BrokenPlugin] = []
        self.disabled: set[str] = set()
        self._entry_points_loaded = False

    # -- loading ---------------------------------------------------------------------------------
    def register_plugin(
        self, module: ModuleType | object, name: str, *, distribution: str = "", version: str = ""
    ) -> None:
        """Register a plugin object and run its hooks into the registry (used for in-process plugins)."""
        self._pm.register(module, name=name)
        try:
            self._pm.check_pending()
            self._run_hooks(name, module)
        except Exception:
            self._pm.unregister(module)
            self._rebuild_registry()  # drop whatever the plugin registered before it failed
            raise
        self.loaded.append(PluginInfo(name, getattr(module, "__name__", type(module).__name__), distribution, version))

    def unregister_plugin(self, name: str) -> None:
        """Remove a plugin registered in-process, and rebuild the registry without it."""
        plugin = self._pm.get_plugin(name)
        if plugin is None:
            raise ModelKeyError(f"unregister_plugin: no plugin named {name!r}; loaded: {[p.name for p in self.loaded]}")
        self._pm.unregister(plugin)
        self.loaded = [p for p in self.loaded if p.name != name]
        self._rebuild_registry()

    def _rebuild_registry(self) -> None:
        self.registry = Registry()
        for info in self.loaded:
            self._run_hooks(info.name, self._pm.get_plugin(info.name))

    def load_entry_points(self) -> None:
        """Import every ``mithril`` entry point once; failures are recorded, not raised."""
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        self.disabled = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
        for ep in _entry_points():
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else "?"
            version = dist.version if dist is not None else "?"
            if ep.name in self.disabled or dist_name in self.disabled or self._pm.has_plugin(ep.name):
                continue
            try:
                module = ep.load()
                self.register_plugin(module, ep.name, distribution=dist_name, version=version)
            except Exception as exc:  # a broken plugin must never break mithril
                self.broken.append(
                    BrokenPlugin(ep.name, dist_name, version, f"{type(exc).__name__}: {exc}", traceback.format_exc())
                )
                log.warning("mithril plugin %r (%s %s) failed to load: %s", ep.name, dist_name, version, exc)

    def _run_hooks(self, plugin_name: str, module: object) -> None:
        reg = self.registry
        calls: list[tuple[str, Callable[..., None]]] = [
            ("mithril_register_primitives", lambda spec: reg.add_primitive(spec, plugin_name)),
            (
                "mithril_register_backends",
                lambda name, target, aliases=(): reg.add_backend(
                    name, target, aliases=tuple(aliases), plugin=plugin_name
                ),
            ),
            (
                "mithril_register_impls",
                lambda backend, table, fn=None: (
                    reg.add_impls(backend, table, plugin_name)
                    if fn is None
                    else reg.add_impl(backend, table, fn, plugin_name)
                ),
            ),
            (
                "mithril_register_gradients",
                lambda prim, rule, backend=None: reg.add_gradient(prim, rule, backend=backend, plugin=plugin_name),
            ),
            ("mithril_register_models", lambda name, builder: reg.add_model(name, builder, plugin_name)),
            ("mithril_register_demos", lambda name, section: reg.add_demo(name, section, plugin_name)),
        ]
        for hook_name, registrar in calls:
            impl = getattr(module, hook_name, None)
            if impl is not None:
                impl(register=registrar)

    # -- queries ---------------------------------------------------------------------------------
    def broken_for(self, text: str) -> BrokenPlugin | None:
        """The broken plugin whose name or distribution mentions ``text`` (``"jax"``), if any."""
        text = text.lower()
        for plugin in self.broken:
            if text in plugin.name.lower() or text in plugin.distribution.lower():
                return plugin
        return None


def _entry_points() -> Iterable[metadata.EntryPoint]:
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


_STATE: dict[str, Any] = {"manager": None}


def manager(*, entry_points: bool = True) -> PluginManager:
    """The process-wide manager, built on first use (core built-ins first, then entry points)."""
    pm: PluginManager | None = _STATE["manager"]
    if pm is None:
        pm = PluginManager()
        pm.register_plugin(builtin, "mithril-core", distribution="mithril-core", version=_core_version())
        _STATE["manager"] = pm
    if entry_points:
        pm.load_entry_points()
    return pm


def registry(*, entry_points: bool = True) -> Registry:
    """The registry. Core primitives are always there; plugins are loaded unless ``entry_points=False``."""
    return manager(entry_points=entry_points).registry


def reset() -> None:
    """Forget all loaded plugins (tests use this after changing ``MITHRIL_DISABLE_PLUGINS``)."""
    _STATE["manager"] = None


def list_plugins() -> list[PluginInfo | BrokenPlugin]:
    """Loaded plugins followed by broken ones."""
    pm = manager()
    return [*pm.loaded, *pm.broken]


def _core_version() -> str:
    try:
        return metadata.version("mithril-core")
    except metadata.PackageNotFoundError:
        return "0+unknown"

