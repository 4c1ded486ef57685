"""Helpers shared by the block builders."""

from __future__ import annotations

from typing import Any

from ...framework.keys import IOKey


def param(name: str, init: str = "fan_in", shape: list[Any] | None = None) -> IOKey:
    """A trainable float parameter key with an initialiser hint for ``randomize_params``."""
    return IOKey(name, shape=shape, type="float", differentiable=True, init=init)
