"""Mithril's model key names and constructor arguments are canonical; this project's earlier names are
deprecated aliases (a DeprecationWarning naming the canonical name) of the one implementation."""

from __future__ import annotations

import warnings

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError
from mithril.models import (
    Divide,
    ElementWiseAffine,
    Flatten,
    FloorDivide,
    IOKey,
    KernelizedSVM,
    Layer,
    MaxPool1D,
    Model,
    NormModifier,
    PolynomialFeatures,
    PolynomialKernel,
    Power,
    RBFKernel,
    Sigmoid,
    Sqrt,
    ToList,
    ToTuple,
    Where,
)


def _evaluate(model: Model, data: dict, params: dict | None = None, **options):
    if params:
        options["trainable_keys"] = set(params)
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), jit=False, **options)
    return pm, pm.evaluate(params or {}, {k: np.asarray(v, dtype=float) for k, v in data.items()})


# -- group 1: Divide / FloorDivide / Power -------------------------------------------------------------
@pytest.mark.parametrize(
    ("cls", "keys", "old"),
    [
        (Divide, ["numerator", "denominator"], ["left", "right"]),
        (FloorDivide, ["numerator", "denominator"], ["left", "right"]),
        (Power, ["base", "exponent"], ["left", "right"]),
        (Where, ["cond", "input1", "input2"], ["condition", "left", "right"]),
    ],
)
def test_mithril_key_names_are_the_keys(cls, keys, old) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert cls().input_keys == keys
        assert [getattr(cls(), key).key for key in keys] == keys
    for old_key, key in zip(old, keys, strict=True):
        with pytest.warns(DeprecationWarning, match=f"'{old_key}' is deprecated; use '{key}'"):
            assert getattr(cls(), old_key).key == key


def test_compiled_divide_and_power_take_mithril_keys() -> None:
    pm, out = _evaluate(Divide(), {}, {"numerator": np.array([6.0, 3.0]), "denominator": np.array([2.0, 4.0])})
    assert sorted(pm.input_keys) == ["denominator", "numerator"]
    np.testing.assert_allclose(out["output"], [3.0, 0.75])
    pm, out = _evaluate(Power(), {}, {"base": np.array([2.0, 3.0]), "exponent": np.array(2.0)})
    assert sorted(pm.input_keys) == ["base", "exponent"]
    np.testing.assert_allclose(out["output"], [4.0, 9.0])


def test_old_key_names_still_connect_with_a_warning() -> None:
    model = Model()
    with pytest.warns(DeprecationWarning, match="Divide key 'left' is deprecated; use 'numerator'"):
        model |= Divide()(left="a", right="b", output=IOKey("output"))
    assert model.input_keys == ["a", "b"]
    with pytest.warns(DeprecationWarning, match="'right' is deprecated; use 'exponent'"):
        power = Power(right=2.0)
    _, out = _evaluate(power, {"base": [3.0]})
    np.testing.assert_allclose(out["output"], [9.0])


def test_robust_power_keys_and_robust_sqrt_threshold() -> None:
    assert Power(robust=True).input_keys == ["base", "exponent"]
    sqrt = Sqrt(robust=True, threshold=1e-20)
    x = np.array([[9.999999999999e-21, 1.0000000000001e-20, 0.0, 4.0]])
    _, out = _evaluate(sqrt, {"input": x})
    np.testing.assert_allclose(
        out["output"], np.where(np.abs(x) < 1e-20, np.abs(x) / np.sqrt(1e-20), np.sqrt(np.abs(x)))
    )
    with pytest.raises(ArgumentError, match="threshold= is given only with robust=True"):
        Sqrt(threshold=1e-3)


# -- group 2: Where, kernels, ToList/ToTuple -----------------------------------------------------------
def test_where_runs_with_mithril_keys() -> None:
    model = Model()
    model |= Where()(cond="c", input1="a", input2="b", output=IOKey("output"))
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), jit=False, constant_keys={"c": np.array([True, False])})
    out = pm.evaluate({}, {"a": np.array([1.0, 2.0]), "b": np.array([5.0, 6.0])})
    np.testing.assert_allclose(out["output"], [1.0, 6.0])


def test_to_list_numbers_inputs_from_one() -> None:
    assert ToList(3).input_keys == ["input1", "input2", "input3"]
    assert ToTuple(2).input_keys == ["input1", "input2"]
    with pytest.warns(DeprecationWarning, match="'input_0' is deprecated; use 'input1'"):
        assert ToList(2).input_0.key == "input1"


def test_rbf_kernel_mithril_form() -> None:
    assert RBFKernel().input_keys == ["input1", "input2", "l_scale", "sigma"]
    x, y = np.array([[1.0], [2.0], [3.0]]), np.array([[0.0], [2.0]])
    _, out = _evaluate(RBFKernel(), {"input1": x, "input2": y}, {"l_scale": np.array([2.0]), "sigma": np.array([0.5])})
    d2 = (x - y.T) ** 2
    np.testing.assert_allclose(out["output"], 4.0 * np.exp(-d2 / (2 * 0.25)))
    _, out = _evaluate(RBFKernel(gamma=0.3), {"input1": x, "input2": y})  # scikit-learn's form
    np.testing.assert_allclose(out["output"], np.exp(-0.3 * d2))
    with pytest.warns(DeprecationWarning, match="'left' is deprecated; use 'input1'"):
        RBFKernel().left  # noqa: B018


def test_polynomial_kernel_mithril_form_and_deprecated_spellings() -> None:
    assert PolynomialKernel().input_keys == ["input1", "input2", "poly_coef", "degree"]
    x = np.array([[1.0, 2.0], [2.0, 3.0]])
    _, out = _evaluate(PolynomialKernel(), {"input1": x, "input2": x, "poly_coef": [1.0], "degree": [2.0]})
    np.testing.assert_allclose(out["output"], (x @ x.T + 1.0) ** 2)
    with pytest.warns(DeprecationWarning, match="use PolynomialKernel\\(degree=2\\)"):
        legacy = PolynomialKernel(2, gamma=0.5)
    _, out = _evaluate(legacy, {"input1": x, "input2": x})
    np.testing.assert_allclose(out["output"], (0.5 * x @ x.T + 1.0) ** 2)
    with pytest.warns(DeprecationWarning, match="use poly_coef="):
        PolynomialKernel(degree=2, coef0=1.0)


def test_kernelized_svm_keys() -> None:
    assert KernelizedSVM(RBFKernel(gamma=0.5)).input_keys == ["input1", "input2", "weight", "bias"]
    assert KernelizedSVM(RBFKernel()).input_keys == ["input1", "input2", "l_scale", "sigma", "weight", "bias"]
    with pytest.warns(DeprecationWarning, match="'support_vectors' is deprecated; use 'input2'"):
        KernelizedSVM(RBFKernel(gamma=0.5)).support_vectors  # noqa: B018


# -- group 3: PolynomialFeatures, MaxPool1D, PaddingType -----------------------------------------------
def _sklearn_poly(x: np.ndarray, degree: int) -> np.ndarray:
    import itertools

    cols = [
        np.prod(x[:, list(t)], axis=1)
        for k in range(1, degree + 1)
        for t in itertools.combinations_with_replacement(range(x.shape[1]), k)
    ]
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize("with_shapes", [False, True])
def test_polynomial_features_infers_its_width(degree: int, with_shapes: bool) -> None:
    x = np.random.default_rng(0).normal(size=(4, 3))
    options = {"shapes": {"input": [4, 3]}} if with_shapes else {}
    pm, out = _evaluate(PolynomialFeatures(degree=degree), {}, {"input": x}, **options)
    np.testing.assert_allclose(out["output"], _sklearn_poly(x, degree), rtol=1e-12)
    _, grads = pm.evaluate({"input": x}, {}, output_gradients={"output": np.ones_like(out["output"])})
    eps, numeric = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        numeric[i] = (_sklearn_poly(x + step, degree).sum() - _sklearn_poly(x - step, degree).sum()) / (2 * eps)
    np.testing.assert_allclose(grads["input"], numeric, rtol=1e-5, atol=1e-6)


def test_max_pool_1d_tuple_padding_and_2d_input() -> None:
    x = np.array([[[10.0, 11.0, 10.0, 16.0, 14.0]]])
    _, out = _evaluate(MaxPool1D(kernel_size=2, padding=(0, 1)), {"input": x})
    np.testing.assert_allclose(out["output"], [[[11.0, 16.0, 14.0]]])
    _, out = _evaluate(MaxPool1D(kernel_size=2), {"input": x[0]})
    np.testing.assert_allclose(out["output"], [[11.0, 16.0]])


def test_padding_type_enum() -> None:
    from mithril.common import PaddingType
    from mithril.models import Conv1d

    model = Conv1d(out_channels=1, kernel_size=3, padding=PaddingType.SAME, use_bias=False)
    _, out = _evaluate(model, {"input": np.ones((1, 2, 5))}, {"weight": np.ones((1, 2, 3))})
    assert out["output"].shape == (1, 1, 5)


def test_flatten_default_still_keeps_the_batch_axis() -> None:
    """Mithril's default is start_dim=0; ours stays 1 (the seeds' CNNs write ``Flatten()`` before ``Linear``)."""
    _, out = _evaluate(Flatten(), {"input": np.ones((2, 3, 4))})
    assert out["output"].shape == (2, 12)
    _, out = _evaluate(Flatten(start_dim=0), {"input": np.ones((2, 3, 4))})
    assert out["output"].shape == (24,)


# -- group 4: Layer, ElementWiseAffine, NormModifier ---------------------------------------------------
def test_layer_is_linear_then_activation() -> None:
    x, w, b = np.array([[1.0, 2.0]]), np.array([[0.5, -1.0], [1.0, 1.0]]), np.array([0.1, -0.2])
    _, out = _evaluate(Layer(Sigmoid(), dimension=2), {"input": x}, {"weight": w, "bias": b})
    np.testing.assert_allclose(out["output"], 1 / (1 + np.exp(-(x @ w.T + b))))


def test_element_wise_affine_and_norm_modifier() -> None:
    _, out = _evaluate(
        ElementWiseAffine(), {"input": [1.0, 2.0]}, {"weight": np.array([3.0, 4.0]), "bias": np.array(1.0)}
    )
    np.testing.assert_allclose(out["output"], [4.0, 9.0])
    x = np.linspace(-10.0, 10.0, 17)
    _, out = _evaluate(NormModifier(), {"input": x})
    inner = ((x - 1.0) % 8) / 8 - 0.5
    np.testing.assert_allclose(out["output"], 4.0 * (1.0 - 2.0 * np.abs(inner)) + 1.0)


def test_project_code_uses_canonical_names() -> None:
    """Building the library's blocks triggers none of its own deprecation warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        KernelizedSVM(PolynomialKernel(degree=2, poly_coef=1.0, gamma=0.5))
        KernelizedSVM(RBFKernel())
        PolynomialFeatures(2, in_features=2)
