"""Logical models as users import them: ``Model``, one class per primitive, the composite blocks, and named
builders.

``Model``, ``IOKey``, ``Connection`` and ``TBD`` are published here and defined in :mod:`mithril.framework` (the
layer below, which the blocks here build on); the classes of the primitives are
:mod:`.primitive_models`, the composite blocks :mod:`.blocks`, ``TrainModel`` :mod:`.train_model`.

``from mithril.models import resnet18`` resolves registered model builders lazily (plugins).

Example:
    >>> from mithril.models import Model, Linear, Relu
    >>> model = Model()
    >>> model |= Linear(dimension=4)
    >>> model += Relu()
"""

from __future__ import annotations

from typing import Any

from ..deprecation import deprecated_attribute
from ..framework import arithmetic as _arithmetic  # noqa: F401 - registers connection arithmetic
from ..framework.keys import TBD, Connection, IOKey
from ..framework.model import Model
from ..framework.tensor_types import Tensor
from ..lazy_plugins import model_builder
from ..runtime import PhysicalModel  # what ml.compile returns, for annotations: from mithril.models import ...
from . import api_compat as _compat
from . import primitive_models as _pm
from .blocks import *  # noqa: F403
from .blocks import __all__ as _blocks_all
from .primitive import Primitive
from .primitive_models import *  # noqa: F403
from .train_model import L1, L2, TrainModel

# Mithril's published signatures (ScaledDotProduct causal by default, Concat/Split lists...) replace the
# table's classes of the same names: set explicitly, so import order cannot undo it.
globals().update({name: getattr(_compat, name) for name in _compat.__all__})

__all__ = [
    "TBD", "Connection", "IOKey", "Tensor", "Model", "PhysicalModel", "TrainModel", "L1", "L2", "Primitive",
    *_blocks_all, *sorted(set(_pm.__all__) | set(_compat.__all__)),
]


def __getattr__(name: str) -> Any:
    deprecated = deprecated_attribute(__name__, name)  # Abs, MaxPool2d, Operator...: mithril.deprecation's table
    if deprecated is not None:
        return deprecated
    return model_builder(name)
