"""Mithril's manifold-learning models, distances, kernel machines and polynomial models against independent
implementations: SciPy's ``cdist``, scikit-learn's stress-1 and t-SNE's KL objective and gradient written by
hand in NumPy, finite differences; and the shapes they infer."""

from __future__ import annotations

import re
import warnings

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, ShapeError
from mithril.models import (
    L2,
    MDS,
    TSNE,
    DistanceEncoder,
    DistanceMatrix,
    IOKey,
    KernelizedSVM,
    MDSCore,
    Mean,
    Model,
    PolynomialKernel,
    PolynomialRegression,
    QuadraticFormRegularizer,
    RBFKernel,
    SquaredError,
    TrainModel,
    TSNECore,
)
from scipy.spatial.distance import cdist

RNG = np.random.default_rng(7)


def _backend() -> ml.Backend:
    return ml.NumpyBackend(dtype=ml.float64)


def _wrap(block: Model, *keys: str, outputs: tuple[str, ...] = ("output",)) -> Model:
    model = Model()
    model |= block(**{k: k for k in keys}, **{k: IOKey(k) for k in outputs})
    return model


def _evaluate(model: Model, params: dict, data: dict, cotangent: np.ndarray | None = None) -> tuple[dict, dict]:
    shapes = {k: list(np.shape(v)) for k, v in {**params, **data}.items()}
    pm = ml.compile(model, _backend(), shapes=shapes, trainable_keys=set(params), data_keys=set(data), jit=False)
    out = pm.evaluate(params, data)
    if not params:
        return out, {}
    seed = np.ones_like(out["output"]) if cotangent is None else cotangent
    _, grads = pm.evaluate(params, data, output_gradients={"output": seed})
    return out, grads


def _finite_difference(fn, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar ``fn`` at ``x``."""
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        grad[index] = (fn(x + step) - fn(x - step)) / (2 * eps)
    return grad


def _stress_1(coords: np.ndarray, dissimilarities: np.ndarray) -> float:
    """Kruskal's stress-1 (scikit-learn's ``normalized_stress``): sqrt(sum (d - D)^2 / sum D^2), full matrix."""
    d = cdist(coords, coords)
    return float(np.sqrt(((d - dissimilarities) ** 2).sum() / (dissimilarities**2).sum()))


def _t_sne_kl(coords: np.ndarray, p: np.ndarray) -> float:
    """t-SNE's objective with one degree of freedom (scikit-learn's ``_kl_divergence`` for 2-D embeddings)."""
    kernel = 1.0 / (1.0 + cdist(coords, coords, "sqeuclidean"))
    np.fill_diagonal(kernel, 0.0)
    q = kernel / kernel.sum()
    mask = p > 0
    return float((p[mask] * np.log(p[mask] / q[mask])).sum())


def _t_sne_gradient(coords: np.ndarray, p: np.ndarray) -> np.ndarray:
    """dKL/dy_i = 4 sum_j (p_ij - q_ij) (y_i - y_j) / (1 + |y_i - y_j|^2) (van der Maaten and Hinton, 2008)."""
    kernel = 1.0 / (1.0 + cdist(coords, coords, "sqeuclidean"))
    np.fill_diagonal(kernel, 0.0)
    q = kernel / kernel.sum()
    weights = (p - q) * kernel
    return 4.0 * (weights.sum(axis=1, keepdims=True) * coords - weights @ coords)


def _joint(n: int) -> np.ndarray:
    p = RNG.uniform(0.1, 1.0, size=(n, n))
    p = p + p.T
    np.fill_diagonal(p, 0.0)
    return p / p.sum()


# -- DistanceMatrix --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", [1.0, 2.0, 3.5])
def test_distance_matrix_is_powered_minkowski(norm: float) -> None:
    left, right = RNG.normal(size=(4, 3)), RNG.normal(size=(5, 3))
    out, grads = _evaluate(
        _wrap(DistanceMatrix(), "left", "right", "norm"), {"left": left}, {"right": right, "norm": np.array(norm)}
    )
    np.testing.assert_allclose(out["output"], cdist(left, right, "minkowski", p=norm) ** norm, rtol=1e-12)
    expected = _finite_difference(lambda x: (cdist(x, right, "minkowski", p=norm) ** norm).sum(), left)
    np.testing.assert_allclose(grads["left"], expected, rtol=1e-6, atol=1e-6)


def test_distance_matrix_infers_its_output_shape_and_takes_a_constant_norm() -> None:
    model = _wrap(DistanceMatrix(norm=2.0), "left", "right")
    pm = ml.compile(model, _backend(), shapes={"left": [4, 3], "right": [6, None]}, jit=False)
    assert pm.shapes["output"] == [4, 6] and pm.shapes["right"] == [6, 3]
    assert DistanceMatrix(norm=2.0).input_keys == ["left", "right"]


@pytest.mark.parametrize("squared", [True, False])
def test_distance_matrix_squared_is_a_deprecated_form(squared: bool) -> None:
    with pytest.warns(DeprecationWarning, match=re.escape("DistanceMatrix(norm=2.0)")):
        block = DistanceMatrix(squared=squared)
    left, right = RNG.normal(size=(3, 2)), RNG.normal(size=(4, 2))
    out, _ = _evaluate(_wrap(block, "left", "right"), {}, {"left": left, "right": right})
    np.testing.assert_allclose(out["output"], cdist(left, right) ** (2 if squared else 1), rtol=1e-12)
    with pytest.raises(ArgumentError, match="norm"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        DistanceMatrix(squared=True, norm=3.0)


# -- MDSCore, MDS ------------------------------------------------------------------------------------------------


def _mds_reference(distances: np.ndarray, predicted: np.ndarray, p: float, exact: bool) -> float:
    """Mithril's MDSCore written out: predicted distances are powered; the data are powered unless exact."""
    data = distances if exact else distances ** (1 / p)
    scale = (distances**p).sum() if exact else distances.sum()
    return float(((np.abs(data - predicted ** (1 / p)) ** p).sum() / scale) ** (1 / p))


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("norm", [2.0, 3.0])
def test_mds_core_is_normalised_stress(exact: bool, norm: float) -> None:
    points, coords = RNG.normal(size=(6, 3)), RNG.normal(size=(6, 2))
    truth = cdist(points, points, "minkowski", p=norm)
    distances = truth if exact else truth**norm
    predicted = cdist(coords, coords, "minkowski", p=norm) ** norm  # powered, as DistanceMatrix gives them
    model = _wrap(MDSCore(exact_distances=exact), "distances", "pred_distances", "norm")
    out, grads = _evaluate(model, {"pred_distances": predicted}, {"distances": distances, "norm": np.array(norm)})
    assert float(out["output"]) == pytest.approx(_mds_reference(distances, predicted, norm, exact), rel=1e-12)
    expected = _finite_difference(lambda x: _mds_reference(distances, np.abs(x), norm, exact), predicted)
    off = ~np.eye(6, dtype=bool)  # the diagonal (0) is where Mithril's robust power is linear
    np.testing.assert_allclose(grads["pred_distances"][off], expected[off], rtol=1e-5, atol=1e-8)
    if norm == 2.0 and exact:  # Kruskal's stress-1 of the embedding whose squared distances are `predicted`
        assert float(out["output"]) == pytest.approx(_stress_1(coords, truth), rel=1e-12)


@pytest.mark.parametrize("input_type", ["points", "distances", "powered_distances"])
def test_mds_is_scikit_learns_normalised_stress(input_type: str) -> None:
    points, coords = RNG.normal(size=(7, 4)), RNG.normal(size=(7, 2))
    truth = cdist(points, points)
    data = {"points": points, "distances": truth, "powered_distances": truth**2}[input_type]
    model = _wrap(
        MDS(prediction_dim=2, input_type=input_type), "input", "coords", "norm", outputs=("output", "predicted_coords")
    )
    pm = ml.compile(
        model,
        _backend(),
        shapes={"input": list(data.shape)},
        trainable_keys={"coords"},
        data_keys={"input", "norm"},
        jit=False,
    )
    assert pm.shapes["coords"] == [7, 2] and pm.shapes["norm"] == []  # N from the input, prediction_dim given
    feed = {"input": data, "norm": np.array(2.0)}
    out = pm.evaluate({"coords": coords}, feed)
    assert float(out["output"]) == pytest.approx(_stress_1(coords, truth), rel=1e-12)
    np.testing.assert_array_equal(out["predicted_coords"], coords)
    _, grads = pm.evaluate(
        {"coords": coords}, feed, output_gradients={"output": np.array(1.0), "predicted_coords": np.zeros((7, 2))}
    )
    np.testing.assert_allclose(
        grads["coords"], _finite_difference(lambda c: _stress_1(c, truth), coords), rtol=1e-5, atol=1e-8
    )


def test_mds_raw_stress_follows_from_its_output() -> None:
    """scikit-learn's raw stress_ (half the full-matrix sum of squared residuals) = output^2 * sum D^2 / 4 * 2."""
    points, coords = RNG.normal(size=(5, 3)), RNG.normal(size=(5, 2))
    truth = cdist(points, points)
    out, _ = _evaluate(
        _wrap(MDS(2), "input", "coords", "norm"), {}, {"input": truth, "coords": coords, "norm": np.array(2.0)}
    )
    raw = ((cdist(coords, coords) - truth) ** 2).sum() / 2
    assert float(out["output"]) ** 2 * (truth**2).sum() / 2 == pytest.approx(raw, rel=1e-12)


def test_mds_keys_and_errors() -> None:
    assert MDS(3).input_keys == ["input", "coords", "norm"]
    assert MDS(3).output_keys == ["output", "predicted_coords"]
    assert MDSCore().input_keys == ["distances", "pred_distances", "norm"]
    with pytest.raises(ArgumentError, match="input_type"):
        MDS(2, input_type="similarities")
    with pytest.raises(ArgumentError, match="base_model"):
        DistanceEncoder(RBFKernel())  # type: ignore[arg-type]


# -- TSNECore, TSNE ---------------------------------------------------------------------------------------------


def test_tsne_core_is_the_kl_objective_of_t_sne() -> None:
    coords, p = RNG.normal(size=(6, 2)), _joint(6)
    predicted = cdist(coords, coords, "sqeuclidean")
    model = _wrap(TSNECore(), "distances", "pred_distances", "p_joint")
    out, grads = _evaluate(model, {"pred_distances": predicted}, {"distances": cdist(coords, coords), "p_joint": p})
    assert float(out["output"]) == pytest.approx(_t_sne_kl(coords, p), rel=1e-12)
    expected = _finite_difference(lambda x: _t_sne_kl_of_distances(x, p), predicted)
    np.testing.assert_allclose(grads["pred_distances"], expected, rtol=1e-5, atol=1e-9)


def _t_sne_kl_of_distances(squared: np.ndarray, p: np.ndarray) -> float:
    kernel = 1.0 / (1.0 + squared)
    np.fill_diagonal(kernel, 0.0)
    q = kernel / kernel.sum()
    mask = p > 0
    return float((p[mask] * np.log(p[mask] / q[mask])).sum())


@pytest.mark.parametrize("input_type", ["points", "distances"])
def test_tsne_output_and_gradient_are_t_sne(input_type: str) -> None:
    points, coords, p = RNG.normal(size=(8, 3)), RNG.normal(size=(8, 2)), _joint(8)
    data = points if input_type == "points" else cdist(points, points)
    model = _wrap(TSNE(prediction_dim=2, input_type=input_type), "input", "coords", "norm", "p_joint")
    out, grads = _evaluate(model, {"coords": coords}, {"input": data, "norm": np.array(2.0), "p_joint": p})
    assert float(out["output"]) == pytest.approx(_t_sne_kl(coords, p), rel=1e-12)
    np.testing.assert_allclose(grads["coords"], _t_sne_gradient(coords, p), rtol=1e-10, atol=1e-12)


def test_tsne_prepare_perplexity_and_errors() -> None:
    points = RNG.normal(size=(12, 3))
    block = TSNE(2, input_type="points", preplexity=4.0)
    p = block.prepare(points)["p_joint"]
    assert p.shape == (12, 12) and p.sum() == pytest.approx(1.0) and np.allclose(p, p.T)
    squared = TSNE(2, input_type="powered_distances", preplexity=4.0).prepare(cdist(points, points, "sqeuclidean"))[
        "p_joint"
    ]
    np.testing.assert_allclose(squared, p, atol=1e-12)
    with pytest.warns(DeprecationWarning, match=re.escape("TSNE(preplexity=)")):
        assert TSNE(2, perplexity=7.0).perplexity == 7.0
    with pytest.raises(ArgumentError, match="tsne_joint_probabilities"):
        TSNE(2, calculate_p_joint=True)
    assert TSNE(2).input_keys == ["input", "coords", "norm", "p_joint"]


# -- kernel machines, quadratic form ----------------------------------------------------------------------------


def test_quadratic_form_regularizer_takes_a_row_and_gives_a_1x1() -> None:
    w, a = RNG.normal(size=(1, 5)), RNG.normal(size=(5, 5))
    kernel = a @ a.T
    out, grads = _evaluate(
        _wrap(QuadraticFormRegularizer(), "input", "kernel"), {"input": w}, {"kernel": kernel}, np.ones((1, 1))
    )
    np.testing.assert_allclose(out["output"], 0.5 * w @ kernel @ w.T, rtol=1e-12)
    np.testing.assert_allclose(grads["input"], w @ kernel, rtol=1e-12)  # symmetric kernel
    pm = ml.compile(
        _wrap(QuadraticFormRegularizer(), "input", "kernel"), _backend(), shapes={"kernel": [5, 5]}, jit=False
    )
    assert pm.shapes["input"] == [1, 5] and pm.shapes["output"] == [1, 1]
    with pytest.raises(ShapeError):
        ml.compile(_wrap(QuadraticFormRegularizer(), "input", "kernel"), _backend(), shapes={"input": [5]}, jit=False)


def test_kernelized_svm_exposes_its_kernel() -> None:
    x, support, target = RNG.normal(size=(4, 2)), RNG.normal(size=(3, 2)), np.sign(RNG.normal(size=(4, 1)))
    w, b = RNG.normal(size=(1, 3)), RNG.normal(size=1)
    svm = KernelizedSVM(RBFKernel(), l_scale=[1.0], sigma=[0.8])  # kernel inputs given values, as Mithril's kwargs
    assert svm.output_keys == ["kernel", "output"]
    assert svm.input_keys == ["input1", "input2", "l_scale", "sigma", "weight", "bias"]
    train = TrainModel(svm)
    train.add_loss(SquaredError(), [Mean()], input="output", target="target")
    pm = ml.compile(
        train,
        _backend(),
        constant_keys={"input1": x, "input2": support, "target": target},
        discard_keys=["kernel"],
        jit=False,
    )
    assert pm.shapes["weight"] == [1, 3] and pm.shapes["output"] == [4, 1]  # weight [1, M] from the support vectors
    assert "kernel" not in pm.output_keys
    out, grads = pm.evaluate({"weight": w, "bias": b}, output_gradients=True)
    k = np.exp(-cdist(x, support, "sqeuclidean") / (2 * 0.8**2))
    np.testing.assert_allclose(out["output"], k @ w.T + b, rtol=1e-12)
    np.testing.assert_allclose(grads["weight"], 2 * (k @ w.T + b - target).T @ k / 4, rtol=1e-10)
    with pytest.raises(ArgumentError, match="not keys of the kernel"):
        KernelizedSVM(RBFKernel(), degree=2.0)


def test_kernelized_svm_regularised_cost_is_the_hand_formula() -> None:
    """Mithril's integration case shape: samples are the support vectors, so the kernel is square."""
    x, target = RNG.normal(size=(3, 2)), np.sign(RNG.normal(size=(3, 1)))
    w, b = RNG.normal(size=(1, 3)), RNG.normal(size=1)
    train = TrainModel(KernelizedSVM(RBFKernel()))
    train.add_loss(SquaredError(), [Mean()], input="output", target="target")
    train.add_regularization(QuadraticFormRegularizer(), 0.1, input="weight", kernel="kernel")
    constants = {"input1": x, "input2": x, "l_scale": np.array([1.5]), "sigma": np.array([0.7]), "target": target}
    pm = ml.compile(train, _backend(), constant_keys=constants, discard_keys=["kernel"], jit=False)
    out, grads = pm.evaluate({"weight": w, "bias": b}, output_gradients=True)
    k = 1.5**2 * np.exp(-cdist(x, x, "sqeuclidean") / (2 * 0.7**2))

    def cost(weight: np.ndarray) -> float:  # the loss averages 3 elements: the term is divided by 3
        return float(((k @ weight.T + b - target) ** 2).mean() + 0.1 * (0.5 * weight @ k @ weight.T).item() / 3)

    assert float(out["final_cost"]) == pytest.approx(cost(w), rel=1e-12)
    np.testing.assert_allclose(grads["weight"], _finite_difference(cost, w), rtol=1e-6, atol=1e-9)


def test_polynomial_kernel_output_shape_follows_its_inputs() -> None:
    model = _wrap(PolynomialKernel(), "input1", "input2", "poly_coef", "degree")
    pm = ml.compile(model, _backend(), constant_keys={"input1": np.ones((2, 3))}, jit=False)
    assert pm.shapes["output"] == [2, None] and pm.shapes["input2"] == [None, 3]
    b = RNG.normal(size=(4, 3))
    out = pm.evaluate({}, {"input2": b, "poly_coef": np.array(1.5), "degree": np.array(3.0)})
    np.testing.assert_allclose(
        out["output"], np.abs(np.ones((2, 3)) @ b.T + 1.5) ** 3, rtol=1e-12
    )  # robust: |base| ** degree


# -- PolynomialRegression ---------------------------------------------------------------------------------------


def test_polynomial_regression_infers_its_output_width() -> None:
    x = RNG.normal(size=(5, 2))
    w, b = RNG.normal(size=(3, 5)), RNG.normal(size=3)
    features = np.column_stack(
        [x[:, 0], x[:, 1], x[:, 0] ** 2, x[:, 0] * x[:, 1], x[:, 1] ** 2]
    )  # scikit-learn's order
    out, _ = _evaluate(
        _wrap(PolynomialRegression(degree=2), "input", "weight", "bias"), {}, {"input": x, "weight": w, "bias": b}
    )
    np.testing.assert_allclose(out["output"], features @ w.T + b, rtol=1e-12)
    train = TrainModel(PolynomialRegression(degree=1))
    train.add_loss(SquaredError(), [Mean()], input="output", target="target")
    pm = ml.compile(train, _backend(), constant_keys={"input": x, "target": np.zeros((5, 2))}, jit=False)
    assert pm.shapes["weight"] == [2, 2] and pm.shapes["bias"] == [2]  # dimension from the target


def test_l2_regularisation_still_a_scalar_term() -> None:
    train = TrainModel(PolynomialRegression(degree=1, dimension=1))
    train.add_loss(SquaredError(), [Mean()], input="output", target="target")
    train.add_regularization(L2(), 0.5, input="weight")
    x, t, w, b = RNG.normal(size=(4, 2)), RNG.normal(size=(4, 1)), RNG.normal(size=(1, 2)), RNG.normal(size=1)
    pm = ml.compile(train, _backend(), constant_keys={"input": x, "target": t}, jit=False)
    out = pm.evaluate({"weight": w, "bias": b})
    assert float(out["final_cost"]) == pytest.approx(
        ((x @ w.T + b - t) ** 2).mean() + 0.5 * 0.5 * (w**2).sum() / 4, rel=1e-12
    )
