"""Hook specifications of Mithril's plugin system (project name ``"mithril"``).

Every hook receives a *registrar*: a callable the plugin calls once per thing it provides, so the host
validates and deduplicates in one place. A plugin is one module with ``@hookimpl`` functions, published
under the ``mithril`` entry-point group::

    [project.entry-points.mithril]
    mybackend = "my_package.plugin"

Example plugin module:
    >>> from mithril.plugins import hookimpl
    >>> @hookimpl
    ... def mithril_register_backends(register):
    ...     register("mybackend", "my_package.backend:MyBackend", aliases=("MyBackend",))
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

hookspec = pluggy.HookspecMarker("mithril")
hookimpl = pluggy.HookimplMarker("mithril")


@hookspec
def mithril_register_primitives(register: Callable[..., None]) -> None:
    """Called once when the registry is built. ``register(spec)`` adds a
    :class:`~mithril.primitives.PrimitiveSpec`; names must be unique across plugins."""


@hookspec
def mithril_register_backends(register: Callable[..., None]) -> None:
    """``register(name, backend_class_or_"module:Class", aliases=())`` adds a backend. A string target
    is imported only when the backend is first used, so plugins stay cheap to load."""


@hookspec
def mithril_register_impls(register: Callable[..., None]) -> None:
    """``register(backend_name, table)`` adds a table of implementations: a module (or ``"module"`` path,
    imported lazily) whose functions are named after primitives, or a ``{name: fn}`` mapping.
    ``register(backend_name, primitive_name, fn)`` adds one implementation."""


@hookspec
def mithril_register_gradients(register: Callable[..., None]) -> None:
    """``register(primitive_name, vjp_rule)`` adds the generic VJP rule, written in terms of primitives
    (see :mod:`mithril.gradients`); ``register(primitive_name, rule, backend="numpy")`` adds a fused rule
    that overrides it on one backend."""


@hookspec
def mithril_register_models(register: Callable[..., None]) -> None:
    """``register(name, builder_or_"module:attr")`` adds a named model builder (``resnet18``,
    ``create_gpt``), reachable as ``from mithril.models import <name>``."""


@hookspec
def mithril_register_demos(register: Callable[..., None]) -> None:
    """``register(name, section_or_"module:function")`` adds a section to ``mithril demo``: a function
    ``section(print_fn) -> None`` that runs after the core demo and prints its own table; it raises
    ``mithril.demo.DemoFailed`` to make the demo fail."""


HOOK_NAMES: tuple[str, ...] = (
    "mithril_register_primitives",
    "mithril_register_backends",
    "mithril_register_impls",
    "mithril_register_gradients",
    "mithril_register_models",
    "mithril_register_demos",
)

__all__ = ["hookspec", "hookimpl", "HOOK_NAMES", *HOOK_NAMES]
