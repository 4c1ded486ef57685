"""Issue 16 tensor blocks on every installed backend: outputs and gradients against PyTorch autograd (and
NumPy/SciPy/scikit-learn where PyTorch has no such function), float64 and float32."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from mithril.models import (
    AvgPool1D,
    CartesianDifference,
    Clamp,
    DistanceMatrix,
    Eye,
    EyeComplement,
    IOKey,
    MaxPool1D,
    Model,
    PermuteTensor,
    PolynomialFeatures,
    ShiftLeft,
    ShiftRight,
    StableReciprocal,
    TransposedDiagonal,
    Trapezoid,
)
from mithril_testing.blocks import DTYPES, backends, evaluate_model, tolerance
from sklearn.preprocessing import PolynomialFeatures as SkPolynomialFeatures

rng = np.random.default_rng(161)
T = torch.tensor


def _wrap(block: Model, *keys: str) -> Model:
    model = Model()
    model |= block(**{k: k for k in keys}, output=IOKey("output"))
    return model


def _poly_reference(x: torch.Tensor) -> torch.Tensor:
    powers = SkPolynomialFeatures(3, include_bias=False).fit(np.zeros((1, 2))).powers_  # [K, 2] exponents
    return torch.stack([(x ** T(p)).prod(dim=1) for p in powers], dim=1)


def _stable_reciprocal_reference(x: torch.Tensor, eps: float = 0.5) -> torch.Tensor:
    sign = torch.where(x < 0, -1.0, 1.0).double()
    return torch.where(x.abs() < eps, sign * (2 / eps - x.abs() / eps**2), 1 / x)


# name -> (block builder, float inputs (differentiated), other data, torch reference of (floats..., data...))
CASES: dict[str, tuple[Callable[[], Model], dict, dict, Callable[..., torch.Tensor]]] = {
    "clamp": (
        lambda: _wrap(Clamp(-0.5, 0.7), "input"),
        {"input": rng.normal(size=(4, 5))},
        {},
        lambda x: torch.clamp(x, -0.5, 0.7),
    ),
    "clamp_min": (
        lambda: _wrap(Clamp(min=0.1), "input"),
        {"input": rng.normal(size=(6,))},
        {},
        lambda x: torch.clamp(x, min=0.1),
    ),
    "transposed_diagonal": (
        lambda: _wrap(TransposedDiagonal(), "input"),
        {"input": rng.normal(size=(4, 4))},
        {},
        lambda x: torch.diagonal(x)[:, None],
    ),
    "cartesian_difference": (
        lambda: _wrap(CartesianDifference(), "left", "right"),
        {"left": rng.normal(size=(3, 2)), "right": rng.normal(size=(4, 2))},
        {},
        lambda a, b: a[:, None, :] - b[None, :, :],
    ),
    "distance_matrix": (  # Mithril's: sum |left_i - right_j| ** norm, norm a differentiable key
        lambda: _wrap(DistanceMatrix(), "left", "right", "norm"),
        {"left": rng.normal(size=(3, 2)), "right": rng.normal(size=(4, 2)), "norm": np.array(3.0)},
        {},
        lambda a, b, p: (a[:, None, :] - b[None, :, :]).abs().pow(p).sum(dim=-1),
    ),
    "distance_matrix_squared": (
        lambda: _wrap(DistanceMatrix(norm=2.0), "left", "right"),
        {"left": rng.normal(size=(3, 2)), "right": rng.normal(size=(4, 2))},
        {},
        lambda a, b: torch.cdist(a, b) ** 2,
    ),
    "polynomial_features": (
        lambda: _wrap(PolynomialFeatures(3, in_features=2), "input"),
        {"input": rng.normal(size=(5, 2))},
        {},
        _poly_reference,
    ),
    "trapezoid": (
        lambda: _wrap(Trapezoid(), "input", "x"),
        {"input": rng.normal(size=(2, 6)), "x": np.sort(rng.normal(size=(2, 6)), axis=-1)},
        {},
        lambda y, x: torch.trapezoid(y, x, dim=-1),
    ),
    "max_pool1d": (
        lambda: _wrap(MaxPool1D(3, stride=2, padding=1), "input"),
        {"input": rng.permutation(24).reshape(2, 2, 6) / 7.0},
        {},
        lambda x: torch.nn.functional.max_pool1d(x, 3, 2, 1),
    ),
    "avg_pool1d": (
        lambda: _wrap(AvgPool1D(2), "input"),
        {"input": rng.normal(size=(2, 3, 6))},
        {},
        lambda x: torch.nn.functional.avg_pool1d(x, 2),
    ),
    "permute_tensor": (
        lambda: _wrap(PermuteTensor(), "input", "indices"),
        {"input": rng.normal(size=(4, 3))},
        {"indices": np.array([2, 0, 3, 1])},
        lambda x, i: x[i],
    ),
    "stable_reciprocal": (
        lambda: _wrap(StableReciprocal(eps=0.5), "input"),
        {"input": np.array([-2.0, -0.7, -0.3, 0.2, 0.45, 0.9, 3.0])},
        {},
        _stable_reciprocal_reference,
    ),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("case", sorted(CASES))
def test_block_matches_torch(case: str, backend: str, dtype: str) -> None:
    build, floats, data, reference = CASES[case]
    inputs = {k: T(v, requires_grad=True) for k, v in floats.items()}
    expected = reference(*inputs.values(), *(T(v) for v in data.values()))
    cotangent = np.random.default_rng(0).normal(size=tuple(expected.shape))
    expected.backward(T(cotangent))
    out, grads = evaluate_model(backend, build(), floats, data, dtype=dtype, cotangent=cotangent)
    rtol = tolerance(dtype)
    np.testing.assert_allclose(
        out["output"], expected.detach().numpy(), rtol=rtol, atol=rtol, err_msg=f"{case} output on {backend}"
    )
    for key, value in inputs.items():
        np.testing.assert_allclose(
            grads[key], value.grad.numpy(), rtol=rtol, atol=rtol * 10, err_msg=f"{case} d/d{key} on {backend}"
        )


@pytest.mark.parametrize("backend", backends())
def test_eye_and_complement(backend: str) -> None:
    eye, _ = evaluate_model(backend, _wrap(Eye(3, 4)), {})
    comp, _ = evaluate_model(backend, _wrap(EyeComplement(3)), {})
    np.testing.assert_array_equal(eye["output"], np.eye(3, 4))
    np.testing.assert_array_equal(comp["output"], 1 - np.eye(3))


@pytest.mark.parametrize("backend", backends())
def test_integer_shifts(backend: str) -> None:
    values, shifts = np.array([1, 5, -7, 12, 3]), np.array([0, 1, 2, 3, 1])
    left, _ = evaluate_model(backend, _wrap(ShiftLeft(), "input", "shift"), {}, {"input": values, "shift": shifts})
    right, _ = evaluate_model(backend, _wrap(ShiftRight(), "input", "shift"), {}, {"input": values, "shift": shifts})
    np.testing.assert_array_equal(left["output"], np.left_shift(values, shifts))
    np.testing.assert_array_equal(right["output"], np.right_shift(values, shifts))


def test_polynomial_features_column_order_is_scikit_learns() -> None:
    x = rng.normal(size=(4, 3))
    out, _ = evaluate_model(
        "numpy", _wrap(PolynomialFeatures(2, in_features=3), "input"), {}, {"input": x}, dtype="float64"
    )
    np.testing.assert_allclose(out["output"], SkPolynomialFeatures(2, include_bias=False).fit_transform(x), rtol=1e-12)
