"""Loss blocks: a per-element loss primitive followed by a reduction (``"mean"``, ``"sum"``, ``"none"``)."""

from __future__ import annotations

from typing import Any

from ... import validation
from ...framework.keys import IOKey
from ...framework.model import Model
from ..primitive import Primitive

__all__ = ["CrossEntropy", "BinaryCrossEntropy", "SquaredError", "AbsoluteError"]

_REDUCTIONS = ("mean", "sum", "none")


class _Loss(Model):
    _primitive = ""

    def __init__(self, reduction: str = "mean", *, name: str | None = None, **attrs: Any) -> None:
        super().__init__(name=name)
        validation.choice(type(self).__name__, "reduction", reduction, _REDUCTIONS)
        loss = Primitive(self._primitive, **attrs)
        target = IOKey("target", type="int") if attrs.get("categorical") else IOKey("target")
        if self._primitive != "cross_entropy":  # elementwise losses: target shaped like input, as in PyTorch
            loss.set_shapes(input=[("S", ...)], target=[("S", ...)])
        if reduction == "none":
            self |= loss(input=IOKey("input"), target=target, output=IOKey("output"))
            return
        self |= loss(input=IOKey("input"), target=target)
        self |= Primitive(reduction)(input=loss.output, output=IOKey("output"))
        self._cin = self._keys["input"]


class CrossEntropy(_Loss):
    """Cross entropy over the class axis 1. ``CrossEntropy(input_type="logits", categorical=True)``.

    ``input_type``: ``"logits"``, ``"probs"`` or ``"log_probs"``; ``categorical=True`` takes integer class
    targets ``[N, ...]``, ``False`` takes probability targets shaped like the input.
    """

    _primitive = "cross_entropy"

    def __init__(self, input_type: str = "logits", categorical: bool = True, reduction: str = "mean", *, name: str | None = None) -> None:
        validation.choice("CrossEntropy", "input_type", input_type, ("logits", "probs", "log_probs"))
        validation.boolean("CrossEntropy", "categorical", categorical)
        super().__init__(reduction, name=name, input_type=input_type, categorical=categorical)


class BinaryCrossEntropy(_Loss):
    """Binary cross entropy; ``input_type`` ``"logits"`` (stable, default) or ``"probs"``."""

    _primitive = "binary_cross_entropy"

    def __init__(self, input_type: str = "logits", reduction: str = "mean", *, name: str | None = None) -> None:
        validation.choice("BinaryCrossEntropy", "input_type", input_type, ("logits", "probs"))
        super().__init__(reduction, name=name, input_type=input_type)


class SquaredError(_Loss):
    """``(input - target) ** 2``, reduced (``reduction="mean"`` is MSE)."""

    _primitive = "squared_error"


class AbsoluteError(_Loss):
    """``|input - target|``, reduced (``reduction="mean"`` is MAE)."""

    _primitive = "absolute_error"
