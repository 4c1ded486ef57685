"""Optimizer-update primitives written with other primitives: the decompositions ``ml.compile`` splices in on
backends without their own implementation (see :mod:`mithril.primitives.catalogue.optim`).

Example:
    >>> adam_update_decomposition({"beta1": 0.9, "beta2": 0.999, "l2": 0.0}, {"shrink": None}).output_keys
    ['new_param', 'new_m', 'new_v']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...framework.keys import IOKey, materialize_expression
from ...framework.model import Model
from ...optim.optimizers import adam_step
from ...primitives.catalogue.optim import ADAM_INPUTS, ADAM_OUTPUTS
from ._util import op

__all__ = ["adam_update_decomposition"]


def adam_update_decomposition(attrs: Mapping[str, Any], shapes: Mapping[str, Any]) -> Model:
    """The ``adam_update`` primitive as a logical model of elementwise primitives (:func:`adam_step`), which
    ``ml.compile`` splices in on backends without their own implementation of the primitive (``shapes`` is
    not needed: every operation is elementwise)."""
    model = Model()
    math = _ModelMath(model)
    inputs = [IOKey(key) for key in ADAM_INPUTS if key != "shrink" or shapes.get("shrink") is not None]
    results = adam_step(math, *inputs, beta1=attrs["beta1"], beta2=attrs["beta2"], l2=attrs["l2"])
    for key, result in zip(ADAM_OUTPUTS, results, strict=True):
        model.expose(materialize_expression(result, model), key, canonical=key == "new_param")
    return model


class _ModelMath:
    """``sqrt`` adding primitives to a logical model (arithmetic on its keys builds expressions)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def sqrt(self, x: Any) -> Any:
        return op(self.model, "sqrt", x)

