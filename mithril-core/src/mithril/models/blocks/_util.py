"""Helpers shared by the block builders."""

from __future__ import annotations

import numbers
from typing import Any

from ...errors import ArgumentError
from ...framework.keys import Connection, IOKey
from ...framework.model import Model


def check_size(owner: str, name: str, value: Any, *, optional: bool = True) -> None:
    """``ValueError`` unless ``value`` is a positive int (or ``None`` when ``optional``): layer sizes such as
    ``Linear(dimension=...)`` or ``Conv2d(out_channels=...)``."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ArgumentError(f"{owner}: {name} must be a positive int{' or None' if optional else ''}, got {value!r}")


def param(name: str, init: str = "fan_in", shape: list[Any] | None = None) -> IOKey:
    """A trainable float parameter key with an initialiser hint for ``randomize_params``."""
    return IOKey(name, shape=shape, type="float", differentiable=True, init=init)


def op(model: Model, primitive: str, *inputs: object, **attrs: object) -> Connection:
    """Add ``primitive`` with ``inputs`` (filling its input keys in order) to ``model``; return its output."""
    from ..primitive import Primitive

    child = Primitive(primitive, **attrs)
    model |= child(**dict(zip(child.input_keys, inputs)))
    return child.output
