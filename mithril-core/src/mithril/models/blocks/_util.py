"""Helpers shared by the block builders."""

from __future__ import annotations

from typing import Any

from ... import validation
from ...framework.keys import TBD, Connection, IOKey
from ...framework.model import Model
from ..primitive import Primitive


def check_size(owner: str, name: str, value: Any, *, optional: bool = True) -> Any:
    """``value`` as a positive int (or ``None`` when ``optional``), else :class:`ArgumentError`: layer sizes
    such as ``Linear(dimension=...)`` or ``Conv2d(out_channels=...)`` (see :mod:`mithril.validation`)."""
    return validation.positive_int(owner, name, value, optional=optional)


def param(name: str, init: str = "fan_in", shape: list[Any] | None = None) -> IOKey:
    """A trainable float parameter key with an initialiser hint for ``randomize_params``."""
    return IOKey(name, shape=shape, type="float", differentiable=True, init=init)


def set_given(model: Model, **values: Any) -> None:
    """Set the keys given values at construction (Mithril's ``Block(input1=array)``); ``TBD`` ones stay inputs."""
    given = {key: value for key, value in values.items() if value is not TBD}
    if given:
        model.set_values(**given)


def op(model: Model, primitive: str, *inputs: object, **attrs: Any) -> Connection:
    """Add ``primitive`` with ``inputs`` (filling its input keys in order) to ``model``; return its output."""
    child = Primitive(primitive, **attrs)
    model |= child(**dict(zip(child.input_keys, inputs, strict=False)))  # optional trailing inputs may be left out
    return child.output
