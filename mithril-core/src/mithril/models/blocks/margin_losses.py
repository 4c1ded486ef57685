"""More per-element losses, composed from primitives (so every backend, C and GGML included, runs them
forward and backward with no new kernel): ``HingeLoss``, ``QuadHingeLoss``, ``QuantileLoss`` and
``KLDivergence``. Like the other loss blocks they are per element by default (``reduction="none"``;
``"mean"`` or ``"sum"`` reduce), and ``TrainModel.add_loss(loss, reduce_steps=[...])`` reduces them.

Example:
    >>> from mithril.models import HingeLoss, QuantileLoss
    >>> HingeLoss().input_keys, QuantileLoss(0.9, reduction="mean").input_keys
    (['input', 'target'], ['input', 'target'])
"""

from __future__ import annotations

from typing import Any

from ... import validation
from ...framework.keys import IOKey
from ._util import op
from .losses import _Loss
from .robust import checked_threshold, robust_log

__all__ = ["HingeLoss", "KLDivergence", "QuadHingeLoss", "QuantileLoss"]


class _ComposedLoss(_Loss):
    """A loss whose per-element formula is :meth:`_formula` of ``input`` and ``target`` (same shape)."""

    def _elementwise_loss(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:
        self.set_shapes(input=[("S", ...)], target=[("S", ...)])
        return self._formula(input, target, attrs)

    def _formula(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:
        raise NotImplementedError


def _margin(model: _ComposedLoss, input: IOKey, target: IOKey) -> Any:
    """``max(0, 1 - input * target)``, as ``maximum``: at the hinge (margin exactly 1) the gradient is half of
    each side's, as Mithril's (and ``torch.maximum``'s, ``jnp.maximum``'s) is; ``relu`` would give 0 there."""
    return op(model, "maximum", 0.0, op(model, "subtract", 1.0, op(model, "multiply", input, target)))


class HingeLoss(_ComposedLoss):
    """``max(0, 1 - input * target)`` for targets in {-1, +1} (the SVM loss; scikit-learn's ``hinge_loss``
    is its mean).

    >>> HingeLoss(reduction="sum").reduction
    'sum'
    """

    def __init__(self, reduction: str = "none", *, name: str | None = None) -> None:
        super().__init__(reduction, name=name)

    def _formula(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:
        return _margin(self, input, target)


class QuadHingeLoss(_ComposedLoss):
    """``max(0, 1 - input * target) ** 2`` (squared hinge) for targets in {-1, +1}.

    >>> QuadHingeLoss().output_keys
    ['output']
    """

    def __init__(self, reduction: str = "none", *, name: str | None = None) -> None:
        super().__init__(reduction, name=name)

    def _formula(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:
        return op(self, "square", _margin(self, input, target))


class QuantileLoss(_ComposedLoss):
    """Pinball loss of quantile ``q``: ``max(q * d, (q - 1) * d)`` with ``d = target - input``
    (scikit-learn's ``mean_pinball_loss(alpha=q)`` is its mean). ``q = 0.5`` is half the absolute error.

    >>> QuantileLoss(0.25).quantile
    0.25
    """

    def __init__(self, quantile: float = 0.5, reduction: str = "none", *, name: str | None = None) -> None:
        quantile = validation.number("QuantileLoss", "quantile", quantile, low=0.0, high=1.0)
        super().__init__(reduction, name=name, quantile=quantile)
        self.__dict__["quantile"] = quantile

    def _formula(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:
        q = attrs["quantile"]
        d = op(self, "subtract", target, input)
        return op(self, "maximum", op(self, "multiply", d, q), op(self, "multiply", d, q - 1.0))


class KLDivergence(_ComposedLoss):
    """Kullback-Leibler divergence per element, ``target * (log target - log input)``, of predicted
    probabilities ``input`` from true probabilities ``target``, both logged with Mithril's robust log (finite at
    0; below ``threshold``, by default the dtype's smallest normal number, the log's tangent line: see
    :func:`~mithril.models.blocks.robust.robust_log`), so it is 0 where ``target`` is 0. ``reduction="sum"``
    over a distribution's axis is ``KL(target || input)``; PyTorch's ``kl_div(log(input), target,
    reduction="none")`` is the same per element. ``eps=`` is the deprecated spelling of ``threshold=``.

    >>> KLDivergence(reduction="none").reduction
    'none'
    """

    def __init__(
        self,
        reduction: str = "none",
        *,
        threshold: float | None = None,
        eps: float | None = None,
        name: str | None = None,
    ) -> None:
        threshold = checked_threshold("KLDivergence", threshold, eps=eps)
        super().__init__(reduction, name=name, threshold=threshold)

    def _formula(self, input: IOKey, target: IOKey, attrs: dict[str, Any]) -> Any:
        threshold = attrs["threshold"]
        log_t = robust_log(self, target, threshold)
        log_p = robust_log(self, input, threshold)
        return op(self, "multiply", target, op(self, "subtract", log_t, log_p))
