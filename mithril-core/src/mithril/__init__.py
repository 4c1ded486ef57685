"""Mithril: compose a model once, compile it for NumPy, JAX, PyTorch, MLX, C or GGML.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Model, Linear, Relu
    >>> model = Model()
    >>> model |= Linear(dimension=16)
    >>> model += Relu()
    >>> backend = ml.NumpyBackend()                                   # doctest: +SKIP
    >>> pm = ml.compile(model, backend, shapes={"input": [8, 4]})     # doctest: +SKIP
    >>> out = pm.evaluate(pm.randomize_params(), {"input": backend.randn(8, 4)})  # doctest: +SKIP

Backends (``ml.NumpyBackend``, ``ml.JaxBackend``, ...) are plugins, resolved lazily on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import errors, optim
from .backends.backend import Backend
from .compiler.compile import compile
from .deprecation import deprecated_attribute
from .display import to_dot
from .errors import BackendAttributeError, BackendNotAvailableError, DtypeError, MissingAttributeError, ShapeError
from .extension import register_gradient, register_implementation, register_primitive
from .framework.tensor_types import Tensor
from .lazy_plugins import backend_class
from .models import *  # noqa: F403 - the manual writes blocks at the top level (ml.Linear, ml.Conv2d, ...)
from .models import TBD, Connection, IOKey, Model, TrainModel
from .optim.state import TrainState
from .runtime import PhysicalModel
from .training import fit, load_state, save_state
from .types import DataType, Dtype

bool_ = Dtype.bool_
uint8, int8, int16, int32, int64 = Dtype.uint8, Dtype.int8, Dtype.int16, Dtype.int32, Dtype.int64
float16, bfloat16, float32, float64 = Dtype.float16, Dtype.bfloat16, Dtype.float32, Dtype.float64

__version__ = "0.1.0"
__all__ = [
    "TBD",
    "Backend",
    "Connection",
    "DataType",
    "Dtype",
    "DtypeError",
    "IOKey",
    "Model",
    "PhysicalModel",
    "ShapeError",
    "Tensor",
    "TrainModel",
    "TrainState",
    "bfloat16",
    "bool_",
    "compile",
    "errors",
    "fit",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "load_state",
    "optim",
    "register_gradient",
    "register_implementation",
    "register_primitive",
    "save_state",
    "to_dot",
    "uint8",
]  # fmt: skip
"""The core API. The model blocks are reached here too (``ml.Linear``, as the manual writes them) but published by
:mod:`mithril.models`, so ``from mithril import *`` brings the core only."""


def __getattr__(name: str) -> Any:
    """``ml.NumpyBackend``, ``ml.JaxBackend``, ``ml.MLXBackend``...: backends registered by plugins;
    ``ml.plugins`` is the plugin module (imported on first use)."""
    if name == "plugins":
        return importlib.import_module(".plugins", __name__)
    if name.endswith("Backend"):
        try:
            return backend_class(name)
        except BackendNotAvailableError as exc:
            raise BackendAttributeError(str(exc)) from exc
    deprecated = deprecated_attribute("mithril.models", name)  # ml.Abs, ml.MaxPool2d...: mithril.deprecation's
    if deprecated is None:
        raise MissingAttributeError(f"module 'mithril' has no attribute {name!r}")
    return deprecated
