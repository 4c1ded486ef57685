"""The one documented surface for plugin authors: everything a package needs to publish a primitive, a
gradient rule, a backend or a model family, without importing Mithril's internals.

- Primitives: :class:`PrimitiveSpec`, :data:`REQUIRED`, :class:`ShapeIO`, the shape/type rule helpers in
  :mod:`rules` (``same_shape``, ``broadcast``, ``reduction``, ``float_result``, ...), :class:`Shape` and
  :class:`Dim` with :func:`unify` and :class:`ShapeMismatch` for writing new rules.
- Gradients: :class:`GradContext` (what a VJP rule receives) and :class:`Ops` (emitting primitives).
- Backends: the :class:`Backend` base class and :class:`Dtype`.
- Plugins: the ``hookimpl`` marker for the ``mithril_register_*`` hooks (``mithril/plugins/hookspecs.py``).
- In-process registration for notebooks and tests: :func:`register_primitive`,
  :func:`register_implementation`, :func:`register_gradient`.
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

from .backends.backend import Backend
from .extension import register_gradient, register_implementation, register_primitive
from .gradients.context import GradContext, Ops
from .plugins import hookimpl
from .primitives import rules
from .primitives.spec import REQUIRED, PrimitiveSpec, ShapeIO
from .shapes import Dim, Shape, ShapeMismatch, unify
from .types import Dtype

if TYPE_CHECKING:
    from .testing.conformance import BackendConformanceTests

__all__ = [
    "Backend", "BackendConformanceTests", "Dim", "Dtype", "GradContext", "Ops", "PrimitiveSpec", "REQUIRED",
    "Shape", "ShapeIO", "ShapeMismatch", "hookimpl", "register_gradient", "register_implementation",
    "register_primitive", "rules", "unify",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "BackendConformanceTests":  # imports pytest: only when a test suite asks for it
        from .testing.conformance import BackendConformanceTests

        return BackendConformanceTests
    from .errors import AttributeError_

    raise AttributeError_(f"module 'mithril.extend' has no attribute {name!r}; available: {', '.join(__all__)}")
