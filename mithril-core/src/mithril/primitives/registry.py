"""The registry: every primitive, backend, implementation, gradient rule and model builder, by name.

One :class:`Registry` is filled by the plugin hooks (core's own entries come from the built-in plugin).
Plugins never touch it directly; they receive registrar callables (see :mod:`mithril.plugins.hookspecs`).

Example:
    >>> from mithril.plugins import registry
    >>> registry().primitive("add").input_keys({})
    ('left', 'right')
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..errors import ModelKeyError, PluginError, UnsupportedPrimitiveError
from .spec import PrimitiveSpec

__all__ = ["BackendEntry", "Registry", "module_implementations", "resolve_target", "uses_backend"]

Impl = Callable[..., Any]
VjpRule = Callable[..., Mapping[str, Any]]


def uses_backend(fn: Impl) -> Impl:
    """Mark a backend implementation that takes the backend instance as its first argument.

    Used by implementations that need backend state: the RNG (``dropout_mask``), the default dtype
    (``arange``, ``cast``) or the device.

    >>> @uses_backend
    ... def randn(backend, *, shape):
    ...     return backend.randn(*shape)
    """
    fn._mithril_uses_backend = True  # type: ignore[attr-defined]
    return fn


def resolve_target(target: object) -> Any:
    """Import ``"package.module:attr"`` (or ``"package.module"``); other objects are returned as is."""
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


@dataclass
class BackendEntry:
    """A registered backend: the class (or a lazy ``"module:Class"`` reference) and who provided it."""

    name: str
    target: object
    plugin: str
    aliases: tuple[str, ...] = ()

    def load(self) -> type:
        self.target = resolve_target(self.target)
        return self.target  # type: ignore[return-value]


@dataclass
class _ImplTable:
    """One backend's implementations: eagerly registered functions plus lazily imported op modules."""

    functions: dict[str, Impl] = field(default_factory=dict)
    modules: list[object] = field(default_factory=list)
    loaded: bool = False

    def load(self) -> dict[str, Impl]:
        if not self.loaded:
            table: dict[str, Impl] = {}
            for module in self.modules:
                table.update(module_implementations(resolve_target(module)))
            table.update(self.functions)  # explicit single registrations win over module tables
            self.functions = table
            self.loaded = True
        return self.functions


def module_implementations(module: ModuleType | Mapping[str, Impl]) -> dict[str, Impl]:
    """The implementations a module registers: its ``__all__`` when it has one, else every public function
    defined in it (helpers start with ``_``); a mapping is taken as it is.

    >>> import types
    >>> ops = types.ModuleType("ops")
    >>> exec("def exp(input): return input", vars(ops))
    >>> exec("def _helper(): return 0", vars(ops))
    >>> list(module_implementations(ops))
    ['exp']
    """
    if isinstance(module, Mapping):
        return dict(module)
    exported = getattr(module, "__all__", None)
    if exported is not None:  # an explicit table: every listed name is an implementation
        return {name: getattr(module, name) for name in exported}
    return {
        name: value
        for name, value in vars(module).items()
        if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == module.__name__
    }


class Registry:
    """All registered names. Lookups that fail list what is available."""

    def __init__(self) -> None:
        self.primitives: dict[str, PrimitiveSpec] = {}
        self.primitive_owner: dict[str, str] = {}
        self.backends: dict[str, BackendEntry] = {}
        self._backend_alias: dict[str, str] = {}
        self._impls: dict[str, _ImplTable] = {}
        self.gradients: dict[str, VjpRule] = {}
        self.fused_gradients: dict[tuple[str, str], VjpRule] = {}
        self.models: dict[str, object] = {}
        self.demos: dict[str, object] = {}

    # -- registrars (called through the plugin hooks) -------------------------------------------
    def add_primitive(self, spec: PrimitiveSpec, plugin: str = "?") -> None:
        if not isinstance(spec, PrimitiveSpec):
            raise PluginError(f"plugin {plugin!r} registered {spec!r}; expected a PrimitiveSpec")
        if not spec.name.isidentifier() or not spec.name.isascii():
            raise PluginError(
                f"plugin {plugin!r} registered primitive name {spec.name!r}; names must be ASCII identifiers "
                "(snake_case)"
            )
        if spec.name in self.primitives and self.primitives[spec.name] is not spec:
            raise PluginError(
                f"plugin {plugin!r} registers primitive {spec.name!r}, already registered by "
                f"{self.primitive_owner[spec.name]!r}; choose another name"
            )
        self.primitives[spec.name] = spec
        self.primitive_owner[spec.name] = plugin

    def add_backend(self, name: str, target: object, *, aliases: tuple[str, ...] = (), plugin: str = "?") -> None:
        if name in self.backends:
            raise PluginError(
                f"plugin {plugin!r} registers backend {name!r}, already registered by {self.backends[name].plugin!r}"
            )
        taken = [a for a in (name, *aliases) if a in self._backend_alias]
        if taken:
            owner = self.backends[self._backend_alias[taken[0]]].plugin
            raise PluginError(f"plugin {plugin!r} registers backend name(s) {taken}, already used by plugin {owner!r}")
        self.backends[name] = BackendEntry(name, target, plugin, tuple(aliases))
        for alias in (name, *aliases):
            self._backend_alias[alias] = name

    def add_impls(self, backend: str, table: object, plugin: str = "?") -> None:
        """``table``: a module (or ``"module"`` path) whose functions are named after primitives, or a mapping."""
        self._impls.setdefault(backend, _ImplTable()).modules.append(table)
        self._impls[backend].loaded = False

    def add_impl(self, backend: str, primitive: str, fn: Impl, plugin: str = "?") -> None:
        self._impls.setdefault(backend, _ImplTable()).functions[primitive] = fn

    def add_gradient(self, primitive: str, rule: VjpRule, *, backend: str | None = None, plugin: str = "?") -> None:
        if backend is None:
            if primitive in self.gradients and self.gradients[primitive] is not rule:
                raise PluginError(f"plugin {plugin!r} registers a second generic gradient for {primitive!r}")
            self.gradients[primitive] = rule
        else:
            self.fused_gradients[(backend, primitive)] = rule

    def add_model(self, name: str, builder: object, plugin: str = "?") -> None:
        if name in self.models:
            raise PluginError(f"plugin {plugin!r} registers model {name!r} twice")
        self.models[name] = builder

    def add_demo(self, name: str, section: object, plugin: str = "?") -> None:
        if name in self.demos:
            raise PluginError(f"plugin {plugin!r} registers demo section {name!r} twice")
        self.demos[name] = section

    # -- lookups ---------------------------------------------------------------------------------
    def primitive(self, name: str) -> PrimitiveSpec:
        try:
            return self.primitives[name]
        except KeyError:
            raise ModelKeyError(
                f"unknown primitive {name!r}; registered: {', '.join(sorted(self.primitives))}"
            ) from None

    def backend_name(self, name: str) -> str | None:
        return self._backend_alias.get(name)

    def impls(self, backend: str) -> dict[str, Impl]:
        table = self._impls.get(backend)
        return table.load() if table is not None else {}

    def impl(self, backend: str, primitive: str) -> Impl:
        table = self.impls(backend)
        if primitive not in table:
            raise UnsupportedPrimitiveError(
                f"backend {backend!r} has no implementation of primitive {primitive!r}; "
                f"it implements {len(table)} primitives. Register one with the "
                f"'mithril_register_impls' hook or pick another backend."
            )
        return table[primitive]

    def gradient(self, primitive: str, backend: str | None = None) -> VjpRule | None:
        if backend is not None and (backend, primitive) in self.fused_gradients:
            return self.fused_gradients[(backend, primitive)]
        return self.gradients.get(primitive)
