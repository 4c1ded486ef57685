"""Issue 16 metrics against scikit-learn on every installed backend, and through TrainModel.add_metric."""

from __future__ import annotations

import numpy as np
import pytest
from mithril.models import F1, Accuracy, IOKey, Linear, Model, Precision, Recall, SquaredError, TrainModel
from mithril_testing.blocks import backends, evaluate_model
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

rng = np.random.default_rng(5)
TRUE = rng.integers(0, 4, size=30)
PRED = np.where(rng.uniform(size=30) < 0.6, TRUE, rng.integers(0, 4, size=30))
PRED[PRED == 3] = 2  # class 3 never predicted: precision's zero division


def _wrap(block: Model) -> Model:
    model = Model()
    model |= block(input="input", target="target", output=IOKey("output"))
    return model


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("average", ["micro", "macro", "weighted"])
def test_metrics_match_scikit_learn(backend: str, average: str) -> None:
    references = {Precision: precision_score, Recall: recall_score, F1: f1_score}
    for block, reference in references.items():
        out, _ = evaluate_model(
            backend, _wrap(block(n_classes=4, average=average)), {}, {"input": PRED, "target": TRUE}
        )
        expected = reference(TRUE, PRED, average=average, zero_division=0)
        assert float(out["output"]) == pytest.approx(expected, rel=1e-5), f"{block.__name__}({average}) on {backend}"
    out, _ = evaluate_model(backend, _wrap(Accuracy()), {}, {"input": PRED, "target": TRUE})
    assert float(out["output"]) == pytest.approx(accuracy_score(TRUE, PRED), rel=1e-6)


def test_metric_through_train_model() -> None:
    model = Model()
    model |= Linear(1)(input="input", weight="weight", bias="bias", output=IOKey("output"))
    train = TrainModel(model)
    train.add_loss(SquaredError(), input="output", target="target")
    train.add_metric(Accuracy(), key_name="accuracy", input="labels", target="true_labels")
    x, y = rng.normal(size=(30, 2)), rng.normal(size=(30, 1))
    params = {"weight": rng.normal(size=(1, 2)), "bias": np.zeros(1)}
    out, grads = evaluate_model(
        "numpy", train, params, {"input": x, "target": y, "labels": PRED, "true_labels": TRUE}, output="final_cost"
    )
    assert float(out["accuracy"]) == pytest.approx(accuracy_score(TRUE, PRED))
    assert set(grads) == {"weight", "bias"}
