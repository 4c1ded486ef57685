"""The one documented surface for plugin authors: everything a package needs to publish a primitive, a
gradient rule, a backend or a model family, without importing Mithril's internals.

- Primitives: :class:`PrimitiveSpec`, :data:`REQUIRED`, :class:`ShapeIO`, the shape/type rule helpers in
  :mod:`rules` (``same_shape``, ``broadcast``, ``reduction``, ``float_result``, ...), :class:`Shape` and
  :class:`Dim` with :func:`unify` and :class:`ShapeMismatch` for writing new rules.
- Gradients: :class:`GradContext` (what a VJP rule receives) and :class:`Ops` (emitting primitives).
- Backends: the :class:`Backend` base class and :class:`Dtype`; for a Python backend package,
  :func:`op_table` (the shared array-API implementations bound to a framework namespace, plus the
  backend's overrides), :class:`Binding`, :data:`Impl` and :func:`module_implementations` (the
  implementations a module of overrides holds: its public functions); for every backend package, :func:`backend_plugin`
  (its ``plugin.py`` in one call) and :func:`lazy_exports` (its ``__init__`` exports imported on first use);
  :class:`InputsNeedChecking` for entry points that check their own inputs (:mod:`mithril.backends.direct`).
- Plugins: the ``hookimpl`` marker for the ``mithril_register_*`` hooks (``mithril/plugins/hookspecs.py``).
- In-process registration for notebooks and tests: :func:`register_primitive`,
  :func:`register_implementation`, :func:`register_gradient`.
- Files: :func:`write_file_atomically` (the one way Mithril's packages write a file: never through a symlink,
  never half a file) and :func:`check_output_directory` (the checks of a folder an export writes into).
- Arguments: :mod:`validation` (``validation.positive_int``, ``validation.number``, ``validation.fail``, ...),
  so a package's functions accept and refuse arguments as core does, with the same wording.
- Testing: ``BackendConformanceTests`` (imported on first use; it needs pytest), to subclass in a backend
  package's tests for the full op x dtype x forward/gradient suite.

Example (a third-party primitive and its NumPy implementation, the pieces a plugin module registers):
    >>> from mithril.extend import PrimitiveSpec, rules
    >>> spec = PrimitiveSpec("sin_times_x", ("input",), rules.same_shape, rules.float_result,
    ...                      doc="sin(input) * input")
    >>> spec.input_keys({})
    ('input',)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import validation
from .backends.array_api import Binding, Impl, op_table
from .backends.backend import Backend
from .backends.direct import InputsNeedChecking
from .backends.plugin import BackendPlugin, backend_plugin, lazy_exports
from .extension import register_gradient, register_implementation, register_primitive
from .gradients.context import GradContext, Ops
from .plugins import hookimpl
from .primitives import rules
from .primitives.registry import module_implementations
from .primitives.spec import REQUIRED, PrimitiveSpec, ShapeIO
from .serialization.files import check_output_directory, write_file_atomically
from .shapes import Dim, Shape, ShapeMismatch, unify
from .types import Dtype

if TYPE_CHECKING:
    from .testing.conformance import BackendConformanceTests

__all__ = [
    "Backend", "BackendConformanceTests", "BackendPlugin", "Binding", "Dim", "Dtype", "GradContext", "Impl", "InputsNeedChecking", "Ops",
    "PrimitiveSpec", "REQUIRED", "Shape", "ShapeIO", "ShapeMismatch", "backend_plugin", "check_output_directory",
    "hookimpl", "lazy_exports", "module_implementations", "op_table", "register_gradient", "register_implementation",
    "register_primitive", "rules", "unify", "validation", "write_file_atomically",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "BackendConformanceTests":  # imports pytest: only when a test suite asks for it
        from .testing.conformance import BackendConformanceTests

        return BackendConformanceTests
    from .errors import MissingAttributeError

    raise MissingAttributeError(f"module 'mithril.extend' has no attribute {name!r}; available: {', '.join(__all__)}")
