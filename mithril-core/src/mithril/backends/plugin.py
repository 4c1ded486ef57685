"""What a backend package's entry point and ``__init__`` are made of: :func:`backend_plugin` (the two
registration hooks from one call) and :func:`lazy_exports` (the backend class imported on first access,
so loading the plugin never imports the framework).

A backend package's ``plugin.py`` is then::

    from mithril.backends.plugin import backend_plugin

    mithril_register_backends, mithril_register_impls = backend_plugin(
        "numpy", backend="mithril_backend_numpy.backend:NumpyBackend", ops="mithril_backend_numpy.ops:TABLE"
    )

Example:
    >>> hooks = backend_plugin("demo", backend="demo.backend:DemoBackend", ops="demo.ops:TABLE")
    >>> calls = []
    >>> hooks.mithril_register_backends(lambda *args, **kw: calls.append((args, kw)))
    >>> hooks.mithril_register_impls(lambda *args: calls.append(args))
    >>> calls
    [(('demo', 'demo.backend:DemoBackend'), {'aliases': ()}), ('demo', 'demo.ops:TABLE')]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..errors import MissingAttributeError
from ..plugins.hookspecs import hookimpl
from ..primitives.registry import resolve_target

__all__ = ["BackendPlugin", "backend_plugin", "lazy_exports"]

Registrar = Callable[..., None]


class BackendPlugin(NamedTuple):
    """The hook implementations of one backend package (unpack them into its entry-point module)."""

    mithril_register_backends: Callable[[Registrar], None]
    mithril_register_impls: Callable[[Registrar], None]


def backend_plugin(name: str, backend: str, ops: str, aliases: tuple[str, ...] = ()) -> BackendPlugin:
    """The registration hooks of a backend package: the backend class ``backend`` (``"module:Class"``)
    under ``name`` and ``aliases``, and its op table ``ops`` (``"module:TABLE"``, a dict from primitive
    name to implementation). Both are lazy strings: registering imports nothing heavy.
    """

    @hookimpl
    def mithril_register_backends(register: Registrar) -> None:
        register(name, backend, aliases=aliases)

    @hookimpl
    def mithril_register_impls(register: Registrar) -> None:
        register(name, ops)

    mithril_register_backends.__doc__ = f"Register {backend.rpartition(':')[2]} as ``{name}``."
    mithril_register_impls.__doc__ = f"Register the op table ``{ops}`` for the ``{name}`` backend."
    return BackendPlugin(mithril_register_backends, mithril_register_impls)


def lazy_exports(module: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving ``exports`` (``{name: "module:attr"}``) on first access.

    >>> getattr_ = lazy_exports("pkg", {"Registry": "mithril.primitives.registry:Registry"})
    >>> getattr_("Registry").__name__
    'Registry'
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            return resolve_target(exports[name])
        raise MissingAttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
