"""Issue 16 losses and regularisers on every installed backend: outputs and gradients against references
nobody here wrote (PyTorch autograd, scikit-learn's metrics), in float32 and float64 where the backend has it."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from mithril.models import (
    L1,
    L2,
    HingeLoss,
    IOKey,
    KLDivergence,
    Linear,
    Model,
    QuadHingeLoss,
    QuadraticFormRegularizer,
    QuantileLoss,
    SquaredError,
    TrainModel,
)
from mithril_testing.blocks import DTYPES, backends, evaluate_model, tolerance
from sklearn.metrics import hinge_loss, mean_pinball_loss

rng = np.random.default_rng(16)
X = rng.normal(size=(5, 3))
SIGNS = np.where(rng.normal(size=(5, 3)) > 0, 1.0, -1.0)
P = rng.dirichlet(np.ones(3), size=5)
Q = rng.dirichlet(np.ones(3), size=5)


def _loss(block: Model) -> Model:
    model = Model()
    model |= block(input="input", target="target", output=IOKey("output"))
    return model


def _torch_reference(fn, x: np.ndarray, t: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean loss and its gradient with respect to ``x``, by PyTorch autograd in float64."""
    xt = torch.tensor(x, requires_grad=True)
    value = fn(xt, torch.tensor(t)).mean()
    value.backward()
    return float(value.detach()), xt.grad.numpy()


CASES = {
    "hinge": (lambda: HingeLoss(reduction="mean"), X, SIGNS, lambda x, t: torch.relu(1 - x * t)),
    "quad_hinge": (lambda: QuadHingeLoss(reduction="mean"), X, SIGNS, lambda x, t: torch.relu(1 - x * t) ** 2),
    "quantile_0.8": (
        lambda: QuantileLoss(0.8, reduction="mean"),
        X,
        rng.normal(size=(5, 3)),
        lambda x, t: torch.maximum(0.8 * (t - x), -0.2 * (t - x)),
    ),
    "kl": (
        lambda: KLDivergence(reduction="mean"),
        P,
        Q,
        lambda x, t: torch.nn.functional.kl_div(torch.log(x), t, reduction="none"),
    ),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_matches_torch(case: str, backend: str, dtype: str) -> None:
    block, x, t, reference = CASES[case]
    out, grads = evaluate_model(backend, _loss(block()), {"input": x}, {"target": t}, dtype=dtype)
    value, grad = _torch_reference(reference, x, t)
    rtol = tolerance(dtype)
    np.testing.assert_allclose(out["output"], value, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(grads["input"], grad, rtol=rtol, atol=rtol)


def test_losses_are_per_sample_unless_asked_to_reduce() -> None:
    """Mithril's semantics: a loss block gives one value per element (per sample for CrossEntropy);
    ``reduction="mean"`` reduces it directly; ``TrainModel.add_loss`` reduces with ``reduce_steps``."""
    from mithril.models import CrossEntropy, SquaredError

    for block in (HingeLoss(), QuadHingeLoss(), QuantileLoss(0.3), KLDivergence(), SquaredError()):
        out, _ = evaluate_model("numpy", _loss(block), {}, {"input": P, "target": Q}, dtype="float64")
        assert out["output"].shape == P.shape, type(block).__name__
    logits, labels = rng.normal(size=(4, 3, 2)), rng.integers(0, 3, (4, 2))
    out, _ = evaluate_model("numpy", _loss(CrossEntropy()), {}, {"input": logits, "target": labels}, dtype="float64")
    expected = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(labels), reduction="none").numpy()
    np.testing.assert_allclose(out["output"], expected, rtol=1e-12)
    out, _ = evaluate_model(
        "numpy", _loss(CrossEntropy(reduction="mean")), {}, {"input": logits, "target": labels}, dtype="float64"
    )
    np.testing.assert_allclose(out["output"], expected.mean(), rtol=1e-12)


def test_hinge_and_quantile_means_match_scikit_learn() -> None:
    labels = SIGNS[:, 0]
    out, _ = evaluate_model(
        "numpy", _loss(HingeLoss(reduction="mean")), {}, {"input": X[:, 0], "target": labels}, dtype="float64"
    )
    assert out["output"] == pytest.approx(hinge_loss(labels, X[:, 0]), rel=1e-12)
    y = rng.normal(size=7)
    pred = rng.normal(size=7)
    for q in (0.1, 0.5, 0.9):
        out, _ = evaluate_model(
            "numpy", _loss(QuantileLoss(q, reduction="mean")), {}, {"input": pred, "target": y}, dtype="float64"
        )
        assert out["output"] == pytest.approx(mean_pinball_loss(y, pred, alpha=q), rel=1e-12)


def test_losses_are_elementwise_and_reducible() -> None:
    none, _ = evaluate_model(
        "numpy", _loss(QuadHingeLoss(reduction="none")), {}, {"input": X, "target": SIGNS}, dtype="float64"
    )
    total, _ = evaluate_model(
        "numpy", _loss(QuadHingeLoss(reduction="sum")), {}, {"input": X, "target": SIGNS}, dtype="float64"
    )
    np.testing.assert_allclose(none["output"], np.maximum(0, 1 - X * SIGNS) ** 2)
    assert total["output"] == pytest.approx(none["output"].sum())
    assert QuantileLoss(0.3).elementwise().reduction == "none"
    with pytest.raises(Exception, match="quantile"):
        QuantileLoss(1.5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_quadratic_form_regularizer(backend: str, dtype: str) -> None:
    w = rng.normal(size=(1, 4))  # Mithril's row [1, N]
    a = rng.normal(size=(4, 4))
    kernel = a @ a.T
    model = Model()
    model |= QuadraticFormRegularizer()(input="input", kernel="kernel", output=IOKey("output"))
    out, grads = evaluate_model(
        backend, model, {"input": w}, {"kernel": kernel}, dtype=dtype, cotangent=np.ones((1, 1))
    )
    rtol = tolerance(dtype)
    np.testing.assert_allclose(out["output"], 0.5 * w @ kernel @ w.T, rtol=rtol)  # [1, 1]
    np.testing.assert_allclose(grads["input"], w @ kernel, rtol=rtol, atol=rtol)  # symmetric kernel: w K


@pytest.mark.parametrize("backend", backends())
def test_regularizers_in_train_model(backend: str) -> None:
    """final_cost = mse + (0.1 * L1(w) + 0.01 * L2(w)) / 12, as PyTorch computes it, and the gradient of w: as in
    Mithril, each regularisation term is divided by the number of elements the loss averages (6 x 2)."""
    x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    w, b = rng.normal(size=(2, 3)), rng.normal(size=2)
    model = Model()
    model |= Linear(2)(input="input", weight="weight", bias="bias", output="output")
    train = TrainModel(model)
    train.add_loss(SquaredError(), input="output", target="target")
    train.add_regularization(L1(), coef=0.1, input=re.compile("weight"))
    train.add_regularization(L2(), coef=0.01, input="weight")
    out, grads = evaluate_model(
        backend, train, {"weight": w, "bias": b}, {"input": x, "target": y}, output="final_cost"
    )
    wt = torch.tensor(w, requires_grad=True)
    cost = ((torch.tensor(x) @ wt.T + torch.tensor(b) - torch.tensor(y)) ** 2).mean() + (
        0.1 * wt.abs().sum() + 0.01 * 0.5 * (wt**2).sum()
    ) / 12
    cost.backward()
    np.testing.assert_allclose(out["final_cost"], float(cost), rtol=2e-4)
    np.testing.assert_allclose(grads["weight"], wt.grad.numpy(), rtol=2e-4, atol=2e-4)
