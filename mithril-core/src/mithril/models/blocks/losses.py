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
        self.reduction, self._attrs = reduction, attrs
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


    def elementwise(self) -> _Loss:
        """The same loss without its reduction (``reduction="none"``), as a new block: what
        ``TrainModel.add_loss(loss, reduce_steps=[...])`` reduces itself (Mithril's loss blocks are
        elementwise)."""
        loss = _Loss.__new__(type(self))
        _Loss.__init__(loss, "none", name=self.name, **self._attrs)
        return loss


def _eps(owner: str, robust: bool | None) -> dict[str, float]:
    """``robust=`` (Mithril's name): ``True`` clamps probabilities at 1e-12 before the log (our default),
    ``False`` takes the exact log (``-inf`` at 0, as Mithril's non-robust loss)."""
    if robust is None:
        return {}
    return {"eps": 1e-12 if validation.boolean(owner, "robust", robust) else 0.0}


class CrossEntropy(_Loss):
    """Cross entropy over the class axis 1. ``CrossEntropy(input_type="logits", categorical=True)``.

    ``input_type``: ``"logits"``, ``"probs"`` or ``"log_probs"``; ``categorical=True`` takes integer class
    targets ``[N, ...]``, ``False`` takes probability targets shaped like the input. ``robust=False`` takes
    the exact log of probabilities (default: clamped at 1e-12, ``robust=True``).
    """

    _primitive = "cross_entropy"

    def __init__(self, input_type: str = "logits", categorical: bool = True, reduction: str = "mean", *, robust: bool | None = None, name: str | None = None) -> None:
        validation.choice("CrossEntropy", "input_type", input_type, ("logits", "probs", "log_probs"))
        validation.boolean("CrossEntropy", "categorical", categorical)
        super().__init__(reduction, name=name, input_type=input_type, categorical=categorical, **_eps("CrossEntropy", robust))


class BinaryCrossEntropy(_Loss):
    """Binary cross entropy; ``input_type`` ``"logits"`` (stable, default) or ``"probs"``."""

    _primitive = "binary_cross_entropy"

    def __init__(self, input_type: str = "logits", reduction: str = "mean", *, robust: bool | None = None, name: str | None = None) -> None:
        validation.choice("BinaryCrossEntropy", "input_type", input_type, ("logits", "probs"))
        super().__init__(reduction, name=name, input_type=input_type, **_eps("BinaryCrossEntropy", robust))


class SquaredError(_Loss):
    """``(input - target) ** 2``, reduced (``reduction="mean"`` is MSE)."""

    _primitive = "squared_error"


class AbsoluteError(_Loss):
    """``|input - target|``, reduced (``reduction="mean"`` is MAE)."""

    _primitive = "absolute_error"
