"""``lambda``: a user Python function applied by Python backends (the ``Lambda`` block)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...shapes import Shape, unify
from ..shape_rules import same_kind
from ..spec import REQUIRED, PrimitiveSpec


def _lambda_shape(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    if attrs["same_shape"]:
        unify(io["output"], io["input"])
    return True


def apply_lambda(input: Any, *, fn: Any, same_shape: bool) -> Any:
    """The implementation on every Python backend: call the user's function on the backend array."""
    return fn(input)


SPECS = (
    PrimitiveSpec(
        "lambda",
        ("input",),
        _lambda_shape,
        same_kind,
        attributes={"fn": REQUIRED, "same_shape": True},
        doc="fn(input): a user function of backend arrays; gradients only on autograd backends",
    ),
)
