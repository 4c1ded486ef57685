"""Per-element losses; reductions over the batch are separate primitives (``mean``/``sum``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...shapes import Dim, Shape, Variadic, unify
from ..shape_rules import broadcast, float_result
from ..spec import PrimitiveSpec


def _cross_entropy_shape(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """input [N, C, *rest]; target [N, *rest] (class indices) or like input; output [N, *rest]."""
    batch, classes, rest = Dim(), Dim(), Variadic()
    unify(io["input"], Shape([batch, classes], rest, []))
    unify(io["output"], Shape([batch], rest, []))
    if attrs["categorical"]:
        unify(io["target"], Shape([batch], rest, []))
    else:
        unify(io["target"], io["input"])
    return True


SPECS = (
    PrimitiveSpec(
        "cross_entropy",
        ("input", "target"),
        _cross_entropy_shape,
        float_result,
        attributes={"input_type": "logits", "categorical": True, "eps": 1e-12},
        differentiable=("input",),
        doc="-sum(target_onehot * log p, axis=1) where p comes from input given as 'logits', 'probs' or "
        "'log_probs'; categorical targets are class indices [N, ...], else probabilities shaped like input",
    ),
    PrimitiveSpec(
        "binary_cross_entropy",
        ("input", "target"),
        broadcast,
        float_result,
        attributes={"input_type": "logits", "eps": 1e-12},
        differentiable=("input",),
        doc="-(t*log p + (1-t)*log(1-p)) with p = sigmoid(input) for 'logits' or input for 'probs'",
    ),
    PrimitiveSpec("squared_error", ("input", "target"), broadcast, float_result, doc="(input - target) ** 2"),
    PrimitiveSpec("absolute_error", ("input", "target"), broadcast, float_result, doc="abs(input - target)"),
)
