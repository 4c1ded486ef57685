"""Loss blocks, per sample as in Mithril: ``SquaredError()`` gives one value per element (``CrossEntropy()``
one per sample, the class axis 1 reduced), and ``TrainModel.add_loss(loss, reduce_steps=[Mean()])``
reduces them. ``reduction="mean"`` (or ``"sum"``) gives the reduced value directly, as PyTorch's
``reduction=`` does.

Example:
    >>> from mithril.models import SquaredError
    >>> SquaredError().reduction, SquaredError(reduction="mean").reduction
    ('none', 'mean')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import validation
from ...framework.keys import IOKey
from ...framework.model import Model
from ..primitive import Primitive
from ._util import op

__all__ = ["CrossEntropy", "BinaryCrossEntropy", "SquaredError", "AbsoluteError"]

_REDUCTIONS = ("mean", "sum", "none")


class _Loss(Model):
    _primitive = ""

    def __init__(self, reduction: str = "none", *, name: str | None = None, weighting: dict[str, Any] | None = None, **attrs: Any) -> None:
        super().__init__(name=name)
        validation.choice(type(self).__name__, "reduction", reduction, _REDUCTIONS)
        self.reduction, self._attrs, self._weighting = reduction, attrs, weighting or {}
        target = IOKey("target", type="int") if attrs.get("categorical") else IOKey("target")
        self._declare_keys("input", "target")  # .connect(input, target) is their order
        per_element = self._elementwise_loss(IOKey("input"), target, attrs)
        if reduction == "none":
            self.expose(per_element, "output")
        else:
            self |= Primitive(reduction)(input=per_element, output=IOKey("output"))
        self._cin = self._keys["input"]

    def _elementwise_loss(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:  # noqa: A002
        loss = Primitive(self._primitive, **attrs)
        if self._primitive != "cross_entropy":  # elementwise losses: target shaped like input, as in PyTorch
            loss.set_shapes(input=[("S", ...)], target=[("S", ...)])
        self |= loss(input=input, target=target)
        return loss.output

    def elementwise(self) -> _Loss:
        """The same loss without its reduction (``reduction="none"``), as a new block: what
        ``TrainModel.add_loss(loss, reduce_steps=[...])`` reduces itself (Mithril's loss blocks are
        elementwise)."""
        loss = _Loss.__new__(type(self))
        _Loss.__init__(loss, "none", name=self.name, weighting=self._weighting, **self._attrs)
        return loss


def _eps(owner: str, robust: bool | None) -> dict[str, float]:
    """``robust=`` (Mithril's name): ``True`` clamps probabilities at 1e-12 before the log (our default),
    ``False`` takes the exact log (``-inf`` at 0, as Mithril's non-robust loss)."""
    if robust is None:
        return {}
    return {"eps": 1e-12 if validation.boolean(owner, "robust", robust) else 0.0}


class CrossEntropy(_Loss):
    """Cross entropy over the class axis 1 (input ``[N, C, d1, ...]``, target ``[N, d1, ...]``, output
    ``[N, d1, ...]``, as PyTorch's ``reduction="none"``). ``CrossEntropy(input_type="logits", categorical=True)``.

    ``input_type``: ``"logits"``, ``"probs"`` or ``"log_probs"``; ``categorical=True`` takes integer class
    targets ``[N, ...]``, ``False`` takes probability targets shaped like the input. ``robust=False`` takes
    the exact log of probabilities (default: clamped at 1e-12, ``robust=True``).
    """

    _primitive = "cross_entropy"

    def __init__(
        self,
        input_type: str = "logits",
        categorical: bool = True,
        reduction: str = "none",
        *,
        weights: Any = None,
        robust: bool | None = None,
        name: str | None = None,
    ) -> None:
        validation.choice("CrossEntropy", "input_type", input_type, ("logits", "probs", "log_probs"))
        validation.boolean("CrossEntropy", "categorical", categorical)
        weighting = {} if weights is None or weights is False else {"weights": weights}
        super().__init__(reduction, name=name, weighting=weighting, input_type=input_type, categorical=categorical, **_eps("CrossEntropy", robust))

    def _elementwise_loss(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:  # noqa: A002
        weights = self._weighting.get("weights")
        if weights is None:
            return super()._elementwise_loss(input, target, attrs)
        key = IOKey("weights") if weights is True else IOKey("weights", value=np.asarray(weights, dtype=float))
        if attrs["categorical"]:  # the class weight of each element's target: weights[target]
            loss = super()._elementwise_loss(input, target, attrs)
            column = op(self, "reshape", key, shape=(-1, 1))
            picked = op(self, "squeeze", op(self, "embedding", self._keys["target"], column), axis=-1)
            return op(self, "multiply", loss, picked)
        # probability targets: -sum_c w_c t_c log p_c, the class axis last ([N, C])
        loss = Primitive(self._primitive, **attrs)
        self |= loss(input=IOKey("input", shape=["N", "C"]))  # keys in the order input, target, weights
        self._connect(loss._keys["target"], op(self, "multiply", target, key), f"{self._path()}.target")
        return loss.output


class BinaryCrossEntropy(_Loss):
    """Binary cross entropy; ``input_type`` ``"logits"`` (stable, default) or ``"probs"``."""

    _primitive = "binary_cross_entropy"

    def __init__(
        self,
        input_type: str = "logits",
        reduction: str = "none",
        *,
        pos_weight: Any = None,
        robust: bool | None = None,
        name: str | None = None,
    ) -> None:
        validation.choice("BinaryCrossEntropy", "input_type", input_type, ("logits", "probs"))
        weighting = {} if pos_weight is None or pos_weight is False else {"pos_weight": pos_weight}
        super().__init__(reduction, name=name, weighting=weighting, input_type=input_type, **_eps("BinaryCrossEntropy", robust))

    def _elementwise_loss(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:  # noqa: A002
        """With ``pos_weight`` (PyTorch's ``BCEWithLogitsLoss(pos_weight=)``): the positive term is
        scaled, ``-(w t log p + (1 - t) log(1 - p))``; for logits in the stable form
        ``(1 - t) x + (1 + (w - 1) t) softplus(-x)``."""
        weight = self._weighting.get("pos_weight")
        if weight is None:
            return super()._elementwise_loss(input, target, attrs)
        w = IOKey("pos_weight") if weight is True else IOKey("pos_weight", value=np.asarray(weight, dtype=float))
        x, t = IOKey("input"), IOKey("target")
        if attrs["input_type"] == "logits":
            scale = op(self, "add", op(self, "multiply", op(self, "subtract", w, 1.0), t), 1.0)
            neg_softplus = op(self, "softplus", op(self, "neg", x))
            return op(self, "add", op(self, "multiply", op(self, "subtract", 1.0, t), x), op(self, "multiply", scale, neg_softplus))
        eps = attrs.get("eps", 1e-12)
        log_p = op(self, "log", op(self, "maximum", x, eps))
        log_q = op(self, "log", op(self, "maximum", op(self, "subtract", 1.0, x), eps))
        positive = op(self, "multiply", op(self, "multiply", w, t), log_p)
        negative = op(self, "multiply", op(self, "subtract", 1.0, t), log_q)
        return op(self, "neg", op(self, "add", positive, negative))


class SquaredError(_Loss):
    """``(input - target) ** 2`` per element (``reduction="mean"`` is MSE)."""

    _primitive = "squared_error"


class AbsoluteError(_Loss):
    """``|input - target|`` per element (``reduction="mean"`` is MAE)."""

    _primitive = "absolute_error"
