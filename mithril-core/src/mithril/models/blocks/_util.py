"""Helpers shared by the block builders."""

from __future__ import annotations

from typing import Any

from ...framework.keys import Connection, IOKey
from ...framework.model import Model


def param(name: str, init: str = "fan_in", shape: list[Any] | None = None) -> IOKey:
    """A trainable float parameter key with an initialiser hint for ``randomize_params``."""
    return IOKey(name, shape=shape, type="float", differentiable=True, init=init)


def op(model: Model, primitive: str, *inputs: object, **attrs: object) -> Connection:
    """Add ``primitive`` with ``inputs`` (filling its input keys in order) to ``model``; return its output."""
    from ..primitive import Primitive

    child = Primitive(primitive, **attrs)
    model |= child(**dict(zip(child.input_keys, inputs)))
    return child.output
