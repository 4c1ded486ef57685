"""Classification metrics for ``TrainModel.add_metric``: ``Accuracy``, ``Precision``, ``Recall`` and ``F1``
(``average="micro"|"macro"|"weighted"``, as scikit-learn computes them with ``zero_division=0``) and
``AUC`` (the area under the ROC curve). Inputs are ``input`` (predicted integer class labels; ``AUC``:
float scores) and ``target`` (true integer labels), both ``[N]``.

Example:
    >>> from mithril.models import F1
    >>> F1(n_classes=3, average="macro").input_keys
    ['input', 'target']
"""

from __future__ import annotations

from typing import Any

from ... import validation
from ...framework.keys import IOKey
from ...framework.model import Model
from ._masks import as_float
from ._util import op

__all__ = ["AUC", "F1", "Accuracy", "Precision", "Recall"]

_AVERAGES = ("micro", "macro", "weighted")


class _Metric(Model):
    input_type = "int"  # predicted labels; AUC takes float scores

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "target")
        self.expose(
            self._value(IOKey("input", type=self.input_type, shape=["N"]), IOKey("target", type="int", shape=["N"])),
            "output",
        )
        self._cin = self._keys["input"]

    def _value(self, pred: IOKey, true: IOKey) -> Any:
        raise NotImplementedError


class Accuracy(_Metric):
    """The fraction of ``input`` labels equal to ``target`` (scikit-learn's ``accuracy_score``).

    >>> Accuracy().output_keys
    ['output']
    """

    def _value(self, pred: IOKey, true: IOKey) -> Any:
        return op(self, "mean", as_float(self, op(self, "equal", pred, true)))


class _ClassMetric(_Metric):
    """Per-class counts from one-hot labels: ``tp``, ``predicted`` and ``actual`` per class ``[C]``."""

    # set through ``__dict__`` (a Model's attributes are otherwise its connections)
    n_classes: int
    average: str

    def __init__(self, n_classes: int, average: str = "macro", *, name: str | None = None) -> None:
        owner = type(self).__name__
        self.__dict__["n_classes"] = validation.positive_int(owner, "n_classes", n_classes)
        self.__dict__["average"] = validation.choice(owner, "average", average, _AVERAGES)
        super().__init__(name=name)

    def _onehot(self, labels: IOKey) -> Any:
        classes = op(self, "arange", stop=self.n_classes)
        return as_float(self, op(self, "equal", op(self, "unsqueeze", labels, axis=1), classes))  # [N, C]

    def _value(self, pred: IOKey, true: IOKey) -> Any:
        p, t = self._onehot(pred), self._onehot(true)
        counts = {
            "tp": op(self, "sum", op(self, "multiply", p, t), axis=0),
            "predicted": op(self, "sum", p, axis=0),
            "actual": op(self, "sum", t, axis=0),
        }
        if self.average == "micro":
            counts = {k: op(self, "sum", v) for k, v in counts.items()}
            return self._score(counts)
        scores = self._score(counts)  # [C]
        if self.average == "macro":
            return op(self, "mean", scores)
        weighted = op(self, "sum", op(self, "multiply", scores, counts["actual"]))
        return op(self, "divide", weighted, op(self, "maximum", op(self, "sum", counts["actual"]), 1.0))

    def _ratio(self, numerator: Any, denominator: Any) -> Any:
        """``numerator / denominator``, 0 where the count ``denominator`` is 0 (then ``numerator`` is 0 too)."""
        return op(self, "divide", numerator, op(self, "maximum", denominator, 1.0))

    def _score(self, counts: dict[str, Any]) -> Any:
        raise NotImplementedError


class Precision(_ClassMetric):
    """``tp / predicted`` per class, averaged (scikit-learn's ``precision_score(average=...)``).

    >>> Precision(n_classes=2, average="micro").output_keys
    ['output']
    """

    def _score(self, counts: dict[str, Any]) -> Any:
        return self._ratio(counts["tp"], counts["predicted"])


class Recall(_ClassMetric):
    """``tp / actual`` per class, averaged (scikit-learn's ``recall_score(average=...)``).

    >>> Recall(n_classes=2).output_keys
    ['output']
    """

    def _score(self, counts: dict[str, Any]) -> Any:
        return self._ratio(counts["tp"], counts["actual"])


class F1(_ClassMetric):
    """``2 tp / (predicted + actual)`` per class, averaged (scikit-learn's ``f1_score(average=...)``).

    >>> F1(n_classes=4, average="weighted").output_keys
    ['output']
    """

    def _score(self, counts: dict[str, Any]) -> Any:
        return self._ratio(
            op(self, "multiply", counts["tp"], 2.0), op(self, "add", counts["predicted"], counts["actual"])
        )


class AUC(_Metric):
    """Area under the ROC curve of binary ``target`` labels (0/1, ``[N]``) ranked by float scores
    ``input`` ``[N]`` (scikit-learn's ``roc_auc_score``): the fraction of (positive, negative) pairs whose
    positive scores higher, ties counting one half. It compares every pair, ``O(N^2)`` memory.

    >>> AUC().input_keys
    ['input', 'target']
    """

    input_type = "float"

    def _value(self, pred: IOKey, true: IOKey) -> Any:
        positive = as_float(self, op(self, "equal", true, 1))  # [N]
        negative = op(self, "subtract", 1.0, positive)
        row, column = op(self, "unsqueeze", pred, axis=1), op(self, "unsqueeze", pred, axis=0)
        ties = op(self, "multiply", as_float(self, op(self, "equal", row, column)), 0.5)
        wins = op(self, "add", as_float(self, op(self, "greater", row, column)), ties)
        pairs = op(
            self, "multiply", op(self, "unsqueeze", positive, axis=1), op(self, "unsqueeze", negative, axis=0)
        )  # [N, N]
        total = op(self, "multiply", op(self, "sum", positive), op(self, "sum", negative))
        return op(self, "divide", op(self, "sum", op(self, "multiply", wins, pairs)), total)
