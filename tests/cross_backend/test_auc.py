"""Issue 16: the AUC metric against scikit-learn's roc_auc_score on every installed backend (ties
included), and through TrainModel.add_metric on a model's own scores."""

from __future__ import annotations

import numpy as np
import pytest
from mithril.models import AUC, BinaryCrossEntropy, IOKey, LogisticRegression, Model, TrainModel
from mithril_testing.blocks import DTYPES, backends, evaluate_model
from sklearn.metrics import roc_auc_score

rng = np.random.default_rng(11)
TARGET = rng.integers(0, 2, size=40)
SCORES = np.round(TARGET * 0.8 + rng.normal(size=40), 1)  # rounded: tied scores, some across classes


def _wrap(block: Model) -> Model:
    model = Model()
    model |= block(input="input", target="target", output=IOKey("output"))
    return model


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_auc_matches_scikit_learn(backend: str, dtype: str) -> None:
    assert len(np.unique(SCORES)) < len(SCORES)  # the data has ties
    for scores in (SCORES, -SCORES, np.where(TARGET == 1, 2.0, -2.0)):
        out, _ = evaluate_model(backend, _wrap(AUC()), {}, {"input": scores, "target": TARGET}, dtype=dtype)
        assert out["output"].dtype == np.dtype(dtype), f"{backend} computes AUC in {out['output'].dtype}"
        assert float(out["output"]) == pytest.approx(roc_auc_score(TARGET, scores), rel=1e-6), backend


def test_auc_through_train_model() -> None:
    model = Model()
    model |= LogisticRegression()(
        input="input", weight="weight", bias="bias", output=IOKey("output"), probs_output=IOKey("probs")
    )
    train = TrainModel(model)
    train.add_loss(BinaryCrossEntropy(), input="output", target="target")
    train.add_metric(AUC(), key_name="auc", input=train.probs[:, 0], target="labels")
    x = np.stack([TARGET + rng.normal(size=40), rng.normal(size=40)], axis=1)  # feature 0 informative
    params = {"weight": np.array([[1.0, 0.3]]), "bias": np.zeros(1)}
    data = {"input": x, "target": TARGET[:, None].astype(float), "labels": TARGET}
    out, grads = evaluate_model("numpy", train, params, data, output="final_cost")
    expected = roc_auc_score(TARGET, x @ params["weight"][0])
    assert 0.5 < float(out["auc"]) < 1.0
    assert float(out["auc"]) == pytest.approx(expected, rel=1e-6)
    assert set(grads) == {"weight", "bias"}  # the metric adds no trainable input
