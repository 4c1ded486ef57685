"""The one documented surface for plugin authors: everything a package needs to publish a primitive, a
gradient rule, a backend or a model family, without importing Mithril's internals.

- Primitives: :class:`PrimitiveSpec`, :data:`REQUIRED`, :class:`ShapeIO`, the shape/type rule helpers in
  :mod:`rules` (the module :mod:`mithril.primitives.shape_rules`: ``same_shape``, ``broadcast``, ``reduction``,
  ``float_result``, ...), :class:`Shape` and :class:`Dim` with :func:`unify` and :class:`ShapeMismatch` for writing
  new rules.
- Gradients: :class:`GradContext` (what a VJP rule receives) and :class:`Ops` (emitting primitives).
- Backends: the :class:`Backend` base class and :class:`Dtype` (:class:`NumpyArrays`: the array methods of a
  backend whose arrays are NumPy's; :class:`ThreadedBackend`: a backend's ``threads`` option, for C and GGML);
  for a Python backend package, :func:`op_table` (the shared array-API implementations bound to a framework
  namespace, plus the backend's overrides), :class:`Binding`, :data:`Impl` and :func:`module_implementations` (the
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
- Compiled graphs (for backends that generate code): :class:`Graph`, :class:`Node`, :class:`Value`,
  :func:`live_nodes` (the nodes the wanted values need, in order) and :class:`FunctionSpec` (a generated
  function's signature).
- The compiler's optimisation passes, for tests and tools: :func:`pass_hook` observes or substitutes the
  passes ``ml.compile`` runs (:data:`PASS_NAMES`: constant folding, CSE, pruning; a :data:`PassHook` is
  ``hook(name, run) -> count``), see :mod:`mithril.compiler.passes.hooks`.
- Geometry of windowed primitives: :class:`WindowGeometry`, :func:`window_attributes`, :func:`spatial`,
  :func:`check_groups`, :func:`check_pool2d_input`.
- Escaping for generated code (the one function per target): :mod:`escape` (``c_identifier``,
  ``c_string_literal``, ``c_comment``, ``python_identifier``, ``python_literal``, ``python_comment``,
  ``safe_file_name``).
- Shared implementations for Python backends: :mod:`array_api` with its modules (``array_api.nn``,
  ``array_api.linalg``, ``array_api.recurrent``, ``array_api.elementwise``, ``array_api.conversions``),
  :func:`uses_backend`, :func:`dtype_table`, :func:`within`, :func:`refuse_wrapping_ints`, :class:`Kind`,
  :func:`dtype_constant` (the robust functions' per-dtype thresholds), :func:`mesh_axis_names`.
- Model families: :func:`op` (add a primitive to a model, return its output) and :func:`param` (a trainable
  key with an initialiser hint), :mod:`initializers`, :class:`SafetensorsFile`, :func:`save_safetensors`,
  :func:`read_safetensors_index`, :func:`task` (progress output for long work), :class:`DemoFailed`,
  :func:`deviation_failure` and :func:`print_table` for a package's ``demo`` command.
- The plugin registry and backends: :func:`plugin_registry`, :func:`available_backends`, :func:`backend_class`.
- Testing: ``BackendConformanceTests`` (imported on first use from the ``mithril-testing`` package:
  ``pip install mithril-testing``), to subclass in a backend package's tests for the full op x dtype x
  forward/gradient suite.

Example (a third-party primitive and its NumPy implementation, the pieces a plugin module registers):
    >>> from mithril.extend import PrimitiveSpec, rules
    >>> spec = PrimitiveSpec("sin_times_x", ("input",), rules.same_shape, rules.float_result,
    ...                      doc="sin(input) * input")
    >>> spec.input_keys({})
    ('input',)
"""

from __future__ import annotations

import importlib
from typing import Any

from . import initializers, validation
from .backends import array_api
from .backends.array_api import Binding, Impl, op_table
from .backends.backend import Backend, NumpyArrays, ThreadedBackend, dtype_table, refuse_wrapping_ints, within
from .backends.direct import InputsNeedChecking
from .backends.plugin import BackendPlugin, backend_plugin, lazy_exports
from .compiler.codegen import escape
from .compiler.codegen.python import FunctionSpec
from .compiler.graph import Graph, Node, Value
from .compiler.passes.hooks import PASS_NAMES, PassHook, pass_hook
from .compiler.passes.pruning import live_nodes
from .demo import DemoFailed, deviation_failure, print_table
from .errors import BackendNotAvailableError, MissingAttributeError
from .extension import register_gradient, register_implementation, register_primitive
from .gradients.context import GradContext, Ops
from .models.blocks._util import op, param
from .numerics import dtype_constant
from .parallel.plan import mesh_axis_names
from .plugins import hookimpl
from .plugins import registry as plugin_registry
from .plugins.lookup import available_backends, backend_class
from .primitives import shape_rules as rules
from .primitives import uses_backend
from .primitives.geometry import WindowGeometry, check_groups, check_pool2d_input, spatial, window_attributes
from .primitives.registry import module_implementations
from .primitives.spec import REQUIRED, PrimitiveSpec, ShapeIO
from .progress import task
from .serialization.files import check_output_directory, write_file_atomically
from .serialization.safetensors import SafetensorsFile, read_safetensors_index, save_safetensors
from .shapes import Dim, Shape, ShapeMismatch, unify
from .types import Dtype, Kind

BackendConformanceTests: type  # the test kit's base class, from mithril_testing on first use (see __getattr__)

__all__ = [
    "PASS_NAMES",
    "REQUIRED",
    "Backend",
    "BackendConformanceTests",
    "BackendPlugin",
    "Binding",
    "DemoFailed",
    "Dim",
    "Dtype",
    "FunctionSpec",
    "GradContext",
    "Graph",
    "Impl",
    "InputsNeedChecking",
    "Kind",
    "Node",
    "NumpyArrays",
    "Ops",
    "PassHook",
    "PrimitiveSpec",
    "SafetensorsFile",
    "Shape",
    "ShapeIO",
    "ShapeMismatch",
    "ThreadedBackend",
    "Value",
    "WindowGeometry",
    "array_api",
    "available_backends",
    "backend_class",
    "backend_plugin",
    "check_groups",
    "check_output_directory",
    "check_pool2d_input",
    "deviation_failure",
    "dtype_constant",
    "dtype_table",
    "escape",
    "hookimpl",
    "initializers",
    "lazy_exports",
    "live_nodes",
    "mesh_axis_names",
    "module_implementations",
    "op",
    "op_table",
    "param",
    "pass_hook",
    "plugin_registry",
    "print_table",
    "read_safetensors_index",
    "refuse_wrapping_ints",
    "register_gradient",
    "register_implementation",
    "register_primitive",
    "rules",
    "save_safetensors",
    "spatial",
    "task",
    "unify",
    "uses_backend",
    "validation",
    "window_attributes",
    "within",
    "write_file_atomically",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "BackendConformanceTests":  # from the test kit's own package, found at run time (core never imports it)
        try:
            kit = importlib.import_module("mithril_testing")
        except ImportError as exc:
            raise BackendNotAvailableError(
                "mithril.extend.BackendConformanceTests comes from the test kit, which is not installed "
                f"({exc}): pip install mithril-testing"
            ) from exc
        return kit.BackendConformanceTests

    raise MissingAttributeError(f"module 'mithril.extend' has no attribute {name!r}; available: {', '.join(__all__)}")
