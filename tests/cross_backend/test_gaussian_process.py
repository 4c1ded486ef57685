"""Issue 16: GaussProcessRegressionCore and GPRLoss against scikit-learn's GaussianProcessRegressor (RBF
kernel, fixed hyper-parameters): posterior mean, standard deviation and log marginal likelihood on every
installed backend that has ``cholesky`` (C and GGML declare the gap), with the kernel matrices computed in
the same graph by RBFKernel; gradients against PyTorch autograd; the noise level fitted by gradient descent
on GPRLoss equals scikit-learn's maximum-likelihood fit."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.models import GaussProcessRegressionCore, GPRLoss, IOKey, Model, RBFKernel
from mithril.plugins.lookup import backend_class
from mithril_testing.blocks import DTYPES, backends, evaluate_model, tolerance
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.metrics.pairwise import rbf_kernel

LINALG_GAPS = {"c", "ggml"}  # no cholesky/eigvalsh: declared in their capability tables
BACKENDS = [b for b in backends() if b not in LINALG_GAPS]
rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, size=(20, 2))
Y = np.sin(X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.1 * rng.normal(size=20)
X_TEST = rng.uniform(-3, 3, size=(7, 2))
LENGTH_SCALE, NOISE = 1.3, 0.05
GAMMA = 1.0 / (2.0 * LENGTH_SCALE**2)  # sklearn's RBF(length_scale) is rbf_kernel(gamma=1 / (2 l^2))


@pytest.fixture(scope="module")
def sk_gp() -> GaussianProcessRegressor:
    return GaussianProcessRegressor(RBF(LENGTH_SCALE), alpha=NOISE, optimizer=None).fit(X, Y)


def _regression_model() -> Model:
    """RBF kernels of the training and test inputs feeding GaussProcessRegressionCore."""
    model = Model()
    train, cross = RBFKernel(gamma=GAMMA), RBFKernel(gamma=GAMMA)
    model |= train(input1="input", input2="input")
    model |= cross(input1="input", input2="test_input")
    model |= GaussProcessRegressionCore()(
        label="label", k=train.output, s="s", mu="mu", k_star=cross.output, k_star_diag="k_star_diag",
        loss=IOKey("loss"), prediction=IOKey("prediction"), confidence=IOKey("confidence"),
    )  # fmt: skip
    return model


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_gpr_matches_scikit_learn(backend: str, dtype: str, sk_gp: GaussianProcessRegressor) -> None:
    data = {
        "input": X,
        "test_input": X_TEST,
        "label": Y[:, None],
        "s": np.array(NOISE),
        "mu": np.array(0.0),
        "k_star_diag": np.ones(len(X_TEST)),
    }
    out, _ = evaluate_model(backend, _regression_model(), {}, data, dtype=dtype)
    mean, std = sk_gp.predict(X_TEST, return_std=True)
    rtol = tolerance(dtype) * 10
    np.testing.assert_allclose(out["prediction"][:, 0], mean, rtol=rtol, atol=rtol, err_msg=f"mean on {backend}")
    np.testing.assert_allclose(out["confidence"][:, 0], std, rtol=rtol, atol=rtol, err_msg=f"std on {backend}")
    assert float(out["loss"]) == pytest.approx(-sk_gp.log_marginal_likelihood_value_, rel=rtol)


def _torch_reference(k: np.ndarray, label: np.ndarray, s: np.ndarray, k_star: np.ndarray) -> tuple[torch.Tensor, ...]:
    """Textbook GP regression in PyTorch (torch.linalg.cholesky, triangular solves): the NLL, mean, std."""
    tk, ty, ts, tks = (torch.tensor(v, requires_grad=True) for v in (k, label, s, k_star))
    factor = torch.linalg.cholesky(tk + ts * torch.eye(len(k), dtype=tk.dtype))
    a = torch.linalg.solve_triangular(factor, ty, upper=False)
    v = torch.linalg.solve_triangular(factor, tks, upper=False)
    nll = 0.5 * (a**2).sum() + torch.log(torch.diagonal(factor)).sum() + 0.5 * len(k) * np.log(2 * np.pi)
    mean = v.T @ a
    std = torch.sqrt(1.0 - (v**2).sum(0))
    return (tk, ty, ts, tks), nll, mean, std


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpr_gradients_match_torch_autograd(backend: str) -> None:
    """Gradients of every output with respect to the kernel matrices, targets and noise, float64."""
    k, k_star = rbf_kernel(X, X, gamma=GAMMA), rbf_kernel(X, X_TEST, gamma=GAMMA)
    params = {"k": k, "label": Y[:, None], "s": np.array(NOISE), "k_star": k_star}
    (tk, ty, ts, tks), nll, mean, std = _torch_reference(*params.values())
    cot_mean, cot_std = rng.normal(size=(7, 1)), rng.normal(size=(7, 1))
    model = Model()
    model |= GaussProcessRegressionCore()(
        **{k: k for k in ("label", "k", "s", "mu", "k_star", "k_star_diag")},
        loss=IOKey("loss"),
        prediction=IOKey("prediction"),
        confidence=IOKey("confidence"),
    )
    data = {"mu": np.array(0.0), "k_star_diag": np.ones(7)}
    where = f"GaussProcessRegressionCore on {backend}"
    for output, value, cot in (
        ("loss", nll, None),
        ("prediction", mean, cot_mean),
        ("confidence", std[:, None], cot_std),
    ):
        for t in (tk, ty, ts, tks):
            t.grad = None
        value.backward(None if cot is None else torch.tensor(cot), retain_graph=True)
        _, grads = evaluate_model(backend, model, params, data, dtype="float64", cotangent=cot, output=output)
        for key, tensor in zip(("k", "label", "s", "k_star"), (tk, ty, ts, tks), strict=True):
            expected = np.zeros(tensor.shape) if tensor.grad is None else tensor.grad.numpy()
            np.testing.assert_allclose(grads[key], expected, rtol=1e-6, atol=1e-8, err_msg=f"{where}: d{output}/d{key}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpr_loss_equals_the_core_loss(backend: str, sk_gp: GaussianProcessRegressor) -> None:
    model = Model()
    model |= GPRLoss()(label="label", k="k", s="s", mu="mu", output=IOKey("output"))
    data = {"k": rbf_kernel(X, X, gamma=GAMMA), "label": Y[:, None], "s": np.array(NOISE), "mu": np.array(0.0)}
    out, _ = evaluate_model(backend, model, {}, data, dtype="float32")
    assert float(out["output"]) == pytest.approx(-sk_gp.log_marginal_likelihood_value_, rel=1e-5)


def test_noise_fitted_on_gpr_loss_equals_scikit_learn() -> None:
    """Gradient descent on log(s) through GPRLoss (NumPy, float64) finds scikit-learn's maximum-likelihood
    noise level (RBF fixed, WhiteKernel fitted by L-BFGS)."""
    model = Model()
    model |= GPRLoss()(label="label", k="k", s="s", mu="mu", output=IOKey("output"))
    backend = backend_class("numpy")(dtype=ml.float64)
    shapes = {"k": [20, 20], "label": [20, 1], "s": [], "mu": []}
    pm = ml.compile(model, backend, shapes=shapes, data_keys={"k", "label", "mu"}, trainable_keys={"s"})
    data = {"k": rbf_kernel(X, X, gamma=GAMMA), "label": Y[:, None], "mu": np.array(0.0)}
    log_s, losses = np.log(1.0), []
    for _ in range(300):
        outputs, grads = pm.evaluate({"s": np.array(np.exp(log_s))}, data, output_gradients=True)
        losses.append(float(outputs["output"]))
        log_s -= 0.1 * float(grads["s"]) * np.exp(log_s)  # chain rule: d/dlog(s) = s d/ds
    kernel = RBF(LENGTH_SCALE, length_scale_bounds="fixed") + WhiteKernel(1.0, noise_level_bounds=(1e-6, 10.0))
    fitted = GaussianProcessRegressor(kernel, alpha=0.0).fit(X, Y)
    assert losses[-1] < losses[0]
    assert np.exp(log_s) == pytest.approx(fitted.kernel_.k2.noise_level, rel=1e-3)
    assert losses[-1] == pytest.approx(-fitted.log_marginal_likelihood_value_, rel=1e-6)
