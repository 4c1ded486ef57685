"""Issue 16 classic models against scikit-learn on small generated data: fitted scikit-learn parameters
load and give scikit-learn's outputs on every backend (gradients against PyTorch autograd), and models
trained with the compile-anywhere workflow (ml.compile + evaluate + gradient steps) reach scikit-learn's
solutions."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.models import (
    BinaryCrossEntropy,
    IOKey,
    KernelizedSVM,
    LinearSVM,
    LogisticRegression,
    Model,
    PolynomialKernel,
    PolynomialRegression,
    RBFKernel,
    SquaredError,
    TrainModel,
)
from mithril.plugins.lookup import backend_class
from mithril_testing.blocks import DTYPES, backends, evaluate_model, tolerance
from sklearn.datasets import make_classification
from sklearn.linear_model import LinearRegression
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.metrics.pairwise import polynomial_kernel, rbf_kernel
from sklearn.preprocessing import PolynomialFeatures as SkPolynomialFeatures
from sklearn.svm import SVC

X, Y = make_classification(n_samples=40, n_features=3, n_informative=2, n_redundant=0, random_state=0)
SIGNED = 2.0 * Y - 1.0


def _wrap(block: Model, *keys: str, output: str = "output") -> Model:
    model = Model()
    model |= block(**{k: k for k in keys}, **{output: IOKey("output")})
    return model


def _train(model: Model, params: dict, data: dict, steps: int, lr: float) -> tuple[dict, list[float]]:
    """Plain gradient descent on ``final_cost`` with the NumPy backend in float64."""
    backend = backend_class("numpy")(dtype=ml.float64)
    shapes = {k: list(np.shape(v)) for k, v in data.items()}
    pm = ml.compile(model, backend, shapes=shapes, data_keys=set(data), trainable_keys=set(params))
    values = {k: backend.array(v) for k, v in params.items()}
    feed = {k: backend.array(v) for k, v in data.items()}
    costs = []
    for _ in range(steps):
        outputs, grads = pm.evaluate(values, feed, output_gradients=True)
        costs.append(float(outputs["final_cost"]))
        values = {k: values[k] - lr * grads[k] for k in values}
    return {k: backend.to_numpy(v) for k, v in values.items()}, costs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_kernels_match_scikit_learn(backend: str, dtype: str) -> None:
    left, right = X[:5], X[10:14]
    for block, expected in (
        (RBFKernel(gamma=0.3), rbf_kernel(left, right, gamma=0.3)),
        (
            PolynomialKernel(degree=3, gamma=0.5, poly_coef=1.0),
            polynomial_kernel(left, right, degree=3, gamma=0.5, coef0=1.0),
        ),
    ):
        out, grads = evaluate_model(
            backend,
            _wrap(block, "input1", "input2"),
            {"input1": left},
            {"input2": right},
            dtype=dtype,
            cotangent=np.ones_like(expected),
        )
        np.testing.assert_allclose(out["output"], expected, rtol=tolerance(dtype) * 10)
        lt = torch.tensor(left, requires_grad=True)
        rt = torch.tensor(right)
        reference = (
            torch.exp(-0.3 * torch.cdist(lt, rt) ** 2) if isinstance(block, RBFKernel) else (0.5 * lt @ rt.T + 1.0) ** 3
        )
        reference.sum().backward()
        np.testing.assert_allclose(
            grads["input1"], lt.grad.numpy(), rtol=tolerance(dtype) * 10, atol=tolerance(dtype) * 10
        )


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("kernel", ["rbf", "poly"])
def test_kernelized_svm_loads_fitted_svc(backend: str, kernel: str) -> None:
    svc = SVC(kernel=kernel, gamma=0.5, degree=2, coef0=1.0, C=1.0).fit(X, SIGNED)
    block = RBFKernel(gamma=0.5) if kernel == "rbf" else PolynomialKernel(degree=2, gamma=0.5, poly_coef=1.0)
    model = _wrap(KernelizedSVM(block), "input1", "input2", "weight", "bias")
    params = {"weight": svc.dual_coef_, "bias": svc.intercept_}
    out, _ = evaluate_model(
        backend,
        model,
        params,
        {"input1": X, "input2": svc.support_vectors_},
        dtype="float32",
        cotangent=np.ones((len(X), 1)),
    )
    np.testing.assert_allclose(out["output"][:, 0], svc.decision_function(X), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("backend", backends())
def test_logistic_regression_loads_and_trains_like_scikit_learn(backend: str) -> None:
    sk = SkLogisticRegression(C=1e6, tol=1e-10, max_iter=10_000).fit(X, Y)
    model = _wrap(LogisticRegression(), "input", "weight", "bias", output="probs_output")
    out, _ = evaluate_model(backend, model, {}, {"input": X, "weight": sk.coef_, "bias": sk.intercept_})
    np.testing.assert_allclose(out["output"][:, 0], sk.predict_proba(X)[:, 1], rtol=1e-4, atol=1e-5)
    if backend != "numpy":
        return
    train = TrainModel(_wrap(LogisticRegression(), "input", "weight", "bias"))
    train.add_loss(BinaryCrossEntropy(), input="output", target="target")
    params, costs = _train(
        train,
        {"weight": np.zeros((1, 3)), "bias": np.zeros(1)},
        {"input": X, "target": Y[:, None].astype(float)},
        3000,
        1.0,
    )
    assert costs[-1] < costs[0]
    np.testing.assert_allclose(params["weight"], sk.coef_, rtol=2e-2, atol=2e-2)


def test_polynomial_regression_trains_to_least_squares() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(30, 1))
    y = 1.0 - 2.0 * x + 3.0 * x**2 + 0.05 * rng.normal(size=(30, 1))
    train = TrainModel(_wrap(PolynomialRegression(degree=2, dimension=1, in_features=1), "input", "weight", "bias"))
    train.add_loss(SquaredError(), input="output", target="target")
    params, _ = _train(train, {"weight": np.zeros((1, 2)), "bias": np.zeros(1)}, {"input": x, "target": y}, 4000, 0.3)
    reference = LinearRegression().fit(SkPolynomialFeatures(2, include_bias=False).fit_transform(x), y)
    np.testing.assert_allclose(params["weight"], reference.coef_, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(params["bias"], reference.intercept_, rtol=1e-4, atol=1e-4)


def test_linear_svm_trained_with_hinge_loss_agrees_with_svc() -> None:
    from mithril.models import L2, HingeLoss

    train = TrainModel(_wrap(LinearSVM(), "input", "weight", "bias"))
    train.add_loss(HingeLoss(), input="output", target="target")
    train.add_regularization(L2(), coef=0.01, input="weight")
    params, costs = _train(
        train, {"weight": np.zeros((1, 3)), "bias": np.zeros(1)}, {"input": X, "target": SIGNED[:, None]}, 2000, 0.05
    )
    # mean hinge + 0.01 * 0.5 |w|^2 / N (Mithril divides the term by the N elements the loss averages) is SVC's
    # objective 0.5 |w|^2 + C * sum(hinge) scaled by 1 / (C N), with C = 1 / 0.01
    svc = SVC(kernel="linear", C=1.0 / 0.01).fit(X, SIGNED)
    ours = np.sign(X @ params["weight"].T + params["bias"])[:, 0]
    assert costs[-1] < costs[0]
    assert np.mean(ours == svc.predict(X)) >= 0.95
    cosine = float(params["weight"][0] @ svc.coef_[0] / np.linalg.norm(params["weight"]) / np.linalg.norm(svc.coef_))
    assert cosine > 0.98
