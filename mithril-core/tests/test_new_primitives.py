"""Issue 16 primitives with analytic gradients: ``Cholesky`` and ``Eigvalsh`` on every installed backend that
can express them, outputs against NumPy and gradients against PyTorch autograd (the symmetric gradient,
as ``torch.linalg`` gives it), and the declared gaps of C/GGML refused with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from mithril.errors import UnsupportedPrimitiveError
from mithril.models import Cholesky, Eigvalsh, IOKey, Model
from mithril.testing.blocks import backends, evaluate_model, tolerance

LINALG_GAPS = {"c", "ggml"}  # declared in their capability tables


def _spd(rng: np.random.Generator, *batch: int, n: int = 4) -> np.ndarray:
    root = rng.standard_normal((*batch, n, n))
    return root @ np.swapaxes(root, -1, -2) + n * np.eye(n)


def _wrap(block) -> Model:
    model = Model()
    model |= block(input="input", output=IOKey("output"))
    return model


def _torch_reference(fn, matrix: np.ndarray, cotangent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    torch = pytest.importorskip("torch", reason="gradients are checked against PyTorch autograd")
    x = torch.tensor(matrix, requires_grad=True)
    out = fn(torch, x)
    out.backward(torch.tensor(cotangent))
    return out.detach().numpy(), x.grad.numpy()


CASES = {
    "cholesky": (Cholesky, lambda torch, x: torch.linalg.cholesky(x), lambda shape: shape),
    "eigvalsh": (Eigvalsh, lambda torch, x: torch.linalg.eigvalsh(x), lambda shape: shape[:-1]),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend", backends())
def test_factorisation_matches_torch_autograd(backend: str, name: str, dtype: str) -> None:
    block, torch_fn, out_shape = CASES[name]
    rng = np.random.default_rng(3)
    matrix = _spd(rng, 2)
    cotangent = rng.standard_normal(out_shape(matrix.shape))
    if backend in LINALG_GAPS:
        with pytest.raises(UnsupportedPrimitiveError, match=name):
            evaluate_model(backend, _wrap(block()), {"input": matrix}, dtype=dtype, cotangent=cotangent)
        return
    expected, expected_grad = _torch_reference(torch_fn, matrix, cotangent)
    out, grads = evaluate_model(backend, _wrap(block()), {"input": matrix}, dtype=dtype, cotangent=cotangent)
    rtol = tolerance(dtype)
    np.testing.assert_allclose(out["output"], expected, rtol=rtol, atol=rtol * 10, err_msg=f"{name} on {backend}")
    np.testing.assert_allclose(grads["input"], expected_grad, rtol=rtol * 10, atol=rtol * 100, err_msg=f"d{name} on {backend}")
    np.testing.assert_allclose(grads["input"], np.swapaxes(grads["input"], -1, -2), atol=rtol * 100, err_msg="symmetric gradient")


def test_cholesky_gradient_matches_finite_differences_of_the_symmetric_part() -> None:
    """The NumPy backend's gradient (the helper written from Murray's formula) against central differences of
    ``cholesky((A + A^T) / 2)``, the function whose gradient the symmetric formula is."""
    rng = np.random.default_rng(5)
    matrix, cotangent = _spd(rng, n=3), np.tril(rng.standard_normal((3, 3)))
    _, grads = evaluate_model("numpy", _wrap(Cholesky()), {"input": matrix}, dtype="float64", cotangent=cotangent)

    def objective(a: np.ndarray) -> float:
        return float(np.sum(np.linalg.cholesky(0.5 * (a + a.T)) * cotangent))

    numeric = np.zeros_like(matrix)
    for idx in np.ndindex(*matrix.shape):
        step = np.zeros_like(matrix)
        step[idx] = 1e-6
        numeric[idx] = (objective(matrix + step) - objective(matrix - step)) / 2e-6
    np.testing.assert_allclose(grads["input"], numeric, rtol=1e-6, atol=1e-8)
    assert np.abs(grads["input"]).max() > 1e-3  # not trivially zero
