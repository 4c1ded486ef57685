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

from ... import validation
from ...framework.keys import IOKey
from ...framework.model import Model
from ...lazy_numpy import np
from ..primitive import Primitive
from ._util import op
from .robust import checked_threshold, probability_log

__all__ = ["AbsoluteError", "BinaryCrossEntropy", "CrossEntropy", "SquaredError"]

_REDUCTIONS = ("mean", "sum", "none")


class _Loss(Model):
    _primitive = ""

    def __init__(
        self, reduction: str = "none", *, name: str | None = None, weighting: dict[str, Any] | None = None, **attrs: Any
    ) -> None:
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

    def _elementwise_loss(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:
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


def _robust(owner: str, robust: bool | None, threshold: float | None) -> dict[str, Any]:
    """``robust=`` (Mithril's name) and ``threshold=`` checked: ``True`` is Mithril's robust log, ``False`` the
    exact log, ``None`` (our default) the log clamped at the threshold (see
    :func:`~mithril.models.blocks.robust.probability_log`); a ``threshold`` left ``None`` is the dtype's
    smallest normal number."""
    if robust is not None:
        robust = validation.boolean(owner, "robust", robust)
    return {"robust": robust, "threshold": checked_threshold(owner, threshold)}


class CrossEntropy(_Loss):
    """Cross entropy over the class axis 1 (input ``[N, C, d1, ...]``, target ``[N, d1, ...]``, output
    ``[N, d1, ...]``, as PyTorch's ``reduction="none"``). ``CrossEntropy(input_type="logits", categorical=True)``.

    ``input_type``: ``"logits"``, ``"probs"`` or ``"log_probs"``; ``categorical=True`` takes integer class
    targets ``[N, ...]``, ``False`` takes probability targets shaped like the input. ``weights`` scales each
    class (a list of ``C`` numbers, or ``True`` for an input key ``weights``). Probabilities are logged as
    Mithril's ``robust=`` says: ``True`` Mithril's robust log (finite at 0: ``-log`` of the dtype's smallest normal
    number plus 1, about 709.4 in float64), ``False`` the exact log (``inf`` at 0), and by default (``None``) the
    exact log clamped below at ``threshold`` (default: the dtype's smallest normal number, so ``-log p`` is at
    most about 708.4 in float64, 87.3 in float32, with gradient 0 where it is clamped). ``threshold`` is also
    the point where ``robust=True``'s log turns into its tangent line.
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
        threshold: float | None = None,
        name: str | None = None,
    ) -> None:
        validation.choice("CrossEntropy", "input_type", input_type, ("logits", "probs", "log_probs"))
        validation.boolean("CrossEntropy", "categorical", categorical)
        weighting = (
            {}
            if weights is None or weights is False or (isinstance(weights, str) and weights == "")
            else {"weights": weights}
        )
        super().__init__(
            reduction,
            name=name,
            weighting=weighting,
            input_type=input_type,
            categorical=categorical,
            **_robust("CrossEntropy", robust, threshold),
        )

    def _elementwise_loss(self, input: IOKey, target: Any, attrs: dict[str, Any]) -> Any:
        """Probabilities become log-probabilities first (:func:`probability_log`), so the primitive always
        takes logits or log-probabilities; class weights scale the loss by ``weights[target]`` (class targets)
        or the targets along the class axis 1 (probability targets, any rank)."""
        input_type, categorical = attrs["input_type"], attrs["categorical"]
        x: Any = input
        if input_type == "probs":
            x, input_type = probability_log(self, input, attrs["robust"], attrs["threshold"]), "log_probs"
        weights = self._weighting.get("weights")
        key = None
        if weights is not None:
            key = IOKey("weights") if weights is True else IOKey("weights", value=np.asarray(weights, dtype=float))
        if key is not None and not categorical:  # -sum_c w_c t_c log p_c: the targets scaled along axis 1
            target = op(
                self,
                "swapaxes",
                op(self, "multiply", op(self, "swapaxes", target, axis1=1, axis2=-1), key),
                axis1=1,
                axis2=-1,
            )
        loss = Primitive(self._primitive, input_type=input_type, categorical=categorical)
        self |= loss(input=x, target=target)
        if key is None or not categorical:
            return loss.output
        # class targets: the class weight of each element's target, weights[target]
        column = op(self, "reshape", key, shape=(-1, 1))
        picked = op(self, "squeeze", op(self, "embedding", self._keys["target"], column), axis=-1)
        return op(self, "multiply", loss.output, picked)


class BinaryCrossEntropy(_Loss):
    """Binary cross entropy per element, input and target of one shape; ``input_type`` ``"logits"`` (stable,
    default) or ``"probs"``. ``pos_weight`` scales the positive term (PyTorch's ``BCEWithLogitsLoss(pos_weight=)``):
    a number, ``True`` for an input key ``pos_weight``, or ``"auto"`` (Mithril's), computed from the targets as
    ``(1 - m) / m`` with ``m`` the mean of the targets (for logits, of ``sigmoid(target)``, as Mithril computes
    it). Probabilities are logged as ``CrossEntropy``'s are (``robust``, ``threshold``); logits need no
    threshold (``robust`` changes nothing there, as in Mithril)."""

    _primitive = "binary_cross_entropy"

    def __init__(
        self,
        input_type: str = "logits",
        reduction: str = "none",
        *,
        pos_weight: Any = None,
        robust: bool | None = None,
        threshold: float | None = None,
        name: str | None = None,
    ) -> None:
        validation.choice("BinaryCrossEntropy", "input_type", input_type, ("logits", "probs"))
        if isinstance(pos_weight, str) and pos_weight != "auto":
            raise validation.fail(
                "BinaryCrossEntropy", "pos_weight", "a number, True (an input key) or 'auto'", pos_weight
            )
        weighting = {} if pos_weight is None or pos_weight is False else {"pos_weight": pos_weight}
        super().__init__(
            reduction,
            name=name,
            weighting=weighting,
            input_type=input_type,
            **_robust("BinaryCrossEntropy", robust, threshold),
        )

    def _elementwise_loss(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:
        """Logits without ``pos_weight``: the primitive. With ``pos_weight`` ``w``: the stable form
        ``(1 - t) x + (1 + (w - 1) t) softplus(-x)``. Probabilities: ``-(w t log p + (1 - t) log(1 - p))``
        with the logs of :func:`probability_log`."""
        self.set_shapes(input=[("S", ...)], target=[("S", ...)])
        weight = self._pos_weight(target, attrs["input_type"])
        x, t = input, target
        if attrs["input_type"] == "logits":
            if weight is None:
                loss = Primitive(self._primitive, input_type="logits")
                self |= loss(input=x, target=t)
                return loss.output
            scale = op(self, "add", op(self, "multiply", op(self, "subtract", weight, 1.0), t), 1.0)
            neg_softplus = op(self, "softplus", op(self, "neg", x))
            return op(
                self,
                "add",
                op(self, "multiply", op(self, "subtract", 1.0, t), x),
                op(self, "multiply", scale, neg_softplus),
            )
        robust, threshold = attrs["robust"], attrs["threshold"]
        log_p = probability_log(self, x, robust, threshold)
        log_q = probability_log(self, op(self, "subtract", 1.0, x), robust, threshold)
        positive = op(self, "multiply", t if weight is None else op(self, "multiply", weight, t), log_p)
        negative = op(self, "multiply", op(self, "subtract", 1.0, t), log_q)
        return op(self, "neg", op(self, "add", positive, negative))

    def _pos_weight(self, target: IOKey, input_type: str) -> Any:
        """The ``pos_weight`` value: ``None`` (none), a constant, the input key, or Mithril's ``"auto"``."""
        weight = self._weighting.get("pos_weight")
        if weight is None:
            return None
        if weight is True:
            return IOKey("pos_weight")
        if isinstance(weight, str):  # "auto": (1 - mean) / mean of the targets (of their sigmoid for logits)
            labels = op(self, "stop_gradient", target)
            mean = op(self, "mean", op(self, "sigmoid", labels) if input_type == "logits" else labels)
            return op(self, "divide", op(self, "subtract", 1.0, mean), mean)
        return IOKey("pos_weight", value=np.asarray(weight, dtype=float))


class SquaredError(_Loss):
    """``(input - target) ** 2`` per element (``reduction="mean"`` is MSE)."""

    _primitive = "squared_error"


class AbsoluteError(_Loss):
    """``|input - target|`` per element (``reduction="mean"`` is MAE)."""

    _primitive = "absolute_error"
