"""Robust numerics and losses against independent references, in float32 and float64.

The thresholds of Mithril's robust functions depend on the dtype computed in (``mithril.numerics``, read in a
model through the ``dtype_constant`` primitive): float64's smallest normal number 2.2e-308 (so ``Log(robust=True)``
of 0 is ``log(tiny) - 1``, about -709.4), float32's 1.2e-38 (about -88.3). References here are ``np.finfo``,
closed-form NumPy formulas and ``torch.nn.functional``'s losses, never this project's code.
"""

from __future__ import annotations

import math
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.framework.keys import IOKey
from mithril.models import (
    BinaryCrossEntropy,
    CrossEntropy,
    KLDivergence,
    Log,
    Model,
    PermuteTensor,
    Power,
    Sqrt,
    StableReciprocal,
)
from mithril.models.blocks._util import op
from mithril.plugins import lookup

RNG = np.random.default_rng(7)
DTYPES = [pytest.param(ml.float32, id="float32"), pytest.param(ml.float64, id="float64")]


def _np(dtype: ml.Dtype) -> Any:
    return np.dtype(dtype.value)


def _tiny(dtype: ml.Dtype) -> float:
    return float(np.finfo(_np(dtype)).tiny)


def _evaluate(
    model: Model,
    dtype: ml.Dtype,
    data: dict[str, Any],
    params: dict[str, Any] | None = None,
    output_gradients: dict[str, Any] | None = None,
    backend: Any = None,
    constants: dict[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Outputs (and gradients of ``params`` when ``output_gradients``) as NumPy arrays."""
    backend = backend if backend is not None else ml.NumpyBackend(dtype=dtype)
    params = params or {}
    shapes = {k: list(np.shape(v)) for k, v in {**data, **params}.items()}
    pm = ml.compile(
        model, backend, shapes=shapes, trainable_keys=set(params), jit=False,
        constant_keys={k: backend.array(v) for k, v in (constants or {}).items()},
    )  # fmt: skip
    native_params = {k: backend.array(np.asarray(v, dtype=_np(dtype))) for k, v in params.items()}
    native_data = {
        k: backend.array(v) if np.asarray(v).dtype.kind != "f" else backend.array(np.asarray(v, dtype=_np(dtype)))
        for k, v in data.items()
    }
    if output_gradients is None:
        out = pm.evaluate(native_params, native_data)
        return {k: backend.to_numpy(v) for k, v in out.items()}, {}
    cotangents = {k: backend.array(np.asarray(v, dtype=_np(dtype))) for k, v in output_gradients.items()}
    out, grads = pm.evaluate(native_params, native_data, output_gradients=cotangents)
    return {k: backend.to_numpy(v) for k, v in out.items()}, {k: backend.to_numpy(v) for k, v in grads.items()}


def _single(block: Model, **keys: str) -> Model:
    model = Model()
    model |= block.connect(**keys, output=IOKey("output"))
    return model


# -- the dtype constants, on every backend ---------------------------------------------------------
def _backend_dtypes() -> list[Any]:
    cases = []
    for name in lookup.available_backends():
        cls = lookup.backend_class(name)
        for dtype in cls.supported_dtypes:
            cases.append(pytest.param(cls, dtype, id=f"{name}-{dtype.value}"))
    return cases


@pytest.mark.parametrize(("backend_class", "dtype"), _backend_dtypes())
def test_dtype_constants_are_exact_on_every_backend(backend_class: Any, dtype: ml.Dtype) -> None:
    """``dtype_constant`` gives the dtype's smallest normal number and StableReciprocal's threshold exactly
    (``np.finfo`` and Mithril's table), also for an int input (the backend's float dtype)."""
    model = Model()
    model.expose(op(model, "dtype_constant", IOKey("x"), constant="min_positive_normal"), "tiny")
    model.expose(op(model, "dtype_constant", IOKey("x"), constant="stable_reciprocal_threshold"), "reciprocal")
    model.expose(op(model, "dtype_constant", IOKey("n", type="int"), constant="min_positive_normal"), "from_int")
    backend = backend_class(dtype=dtype)
    pm = ml.compile(model, backend, shapes={"x": [3], "n": [2]}, jit=False)
    out = pm.evaluate({}, {"x": backend.array(np.ones(3)), "n": backend.array(np.array([1, 2]))})
    finfo = np.finfo(np.float32 if dtype is ml.bfloat16 else _np(dtype))
    tiny = float(finfo.tiny)
    reciprocal = 1.4916681462400413e-153 if dtype is ml.float64 else math.sqrt(tiny)
    assert float(backend.to_numpy(out["tiny"])) == tiny
    assert float(backend.to_numpy(out["from_int"])) == tiny
    assert float(backend.to_numpy(out["reciprocal"])) == reciprocal
    assert np.shape(backend.to_numpy(out["tiny"])) == ()


def test_dtype_constant_refuses_unknown_names() -> None:
    with pytest.raises(ml.errors.ArgumentError, match="constant must be one of"):
        op(Model(), "dtype_constant", IOKey("x"), constant="epsilon_of_everything")



@pytest.mark.parametrize(
    "build",
    [
        lambda t: Sqrt(robust=True, threshold=t),
        lambda t: Log(robust=True, threshold=t),
        lambda t: KLDivergence(threshold=t),
        lambda t: StableReciprocal(threshold=t),
        lambda t: CrossEntropy(threshold=t),
    ],
    ids=["Sqrt", "Log", "KLDivergence", "StableReciprocal", "CrossEntropy"],
)
@pytest.mark.parametrize("threshold", [0.0, -1e-3, math.nan, math.inf])
def test_every_threshold_must_be_finite_and_positive(build: Any, threshold: float) -> None:
    with pytest.raises(ml.errors.ArgumentError, match="threshold must be a finite number > 0"):
        build(threshold)


# -- robust log, sqrt, power, reciprocal --------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_robust_log_is_the_tangent_line_below_the_dtypes_tiny(dtype: ml.Dtype) -> None:
    tiny = _tiny(dtype)
    x = np.array([0.0, tiny / 4, -tiny / 2, 1e-30, -2.5, 7.0])
    out, grads = _evaluate(_single(Log(robust=True), input="x"), dtype, {}, {"x": x}, {"output": np.ones(6)})
    below = np.abs(x) < tiny
    line = np.log(tiny) + np.where(below, np.abs(x), 0.0) / tiny - 1.0
    exact = np.log(np.where(below, 1.0, np.abs(x)))
    np.testing.assert_allclose(out["output"], np.where(below, line, exact), rtol=1e-6 if dtype is ml.float32 else 1e-14)
    slope = np.where(below, np.where(x < 0, -1.0, 1.0) / tiny, 1.0 / np.where(below, 1.0, x))
    np.testing.assert_allclose(grads["x"], slope, rtol=1e-6 if dtype is ml.float32 else 1e-14)
    assert out["output"].dtype == _np(dtype)


def test_robust_log_at_zero_is_mithrils_in_each_dtype() -> None:
    model = _single(Log(robust=True), input="x")
    for dtype, expected in ((ml.float64, -709.3964185322641), (ml.float32, -88.3365)):
        out, _ = _evaluate(model, dtype, {"x": np.array([0.0])})
        np.testing.assert_allclose(out["output"], [expected], rtol=1e-6)
    out, _ = _evaluate(_single(Log(robust=True, threshold=1e-3), input="x"), ml.float64, {"x": np.array([0.0, 1e-4])})
    np.testing.assert_allclose(out["output"], np.log(1e-3) - 1.0 + np.array([0.0, 0.1]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_robust_sqrt_and_power_switch_at_the_dtypes_tiny(dtype: ml.Dtype) -> None:
    tiny = _tiny(dtype)
    x = np.array([0.0, tiny / 8, 1e-30, 4.0])
    out, _ = _evaluate(_single(Sqrt(robust=True), input="x"), dtype, {"x": x})
    np.testing.assert_allclose(out["output"], np.where(x < tiny, x / np.sqrt(tiny), np.sqrt(x)), rtol=1e-6)
    model = Model()
    model |= Power(robust=True).connect(base="b", exponent="e", output=IOKey("output"))
    b, e = np.array([0.0, tiny, tiny / 4, 9.0]), np.array([0.5, 0.2, 0.01, 0.5])
    out, grads = _evaluate(model, dtype, {}, {"b": b, "e": e}, {"output": np.ones(4)})
    linear = (b < tiny) & (e < 1 - np.log(tiny) / np.log(np.where(b == 0, 0.5, b)))
    linear[0] = True  # 0 ** 0.5: the line (log 0 = -inf makes the bound 1)
    expected = np.where(linear, np.where(linear, b, 0.0) / tiny, np.abs(b) ** e)
    np.testing.assert_allclose(out["output"], expected, rtol=1e-5 if dtype is ml.float32 else 1e-12)
    # at b = tiny the power itself: d/db b**e = e b**(e - 1) (2.6e245 in float64)
    np.testing.assert_allclose(grads["b"][1], 0.2 * tiny**-0.8, rtol=1e-5 if dtype is ml.float32 else 1e-12)
    assert np.all(np.isfinite(grads["b"])) and np.all(np.isfinite(grads["e"]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_stable_reciprocal_uses_mithrils_threshold_of_the_dtype(dtype: ml.Dtype) -> None:
    t = 1.4916681462400413e-153 if dtype is ml.float64 else math.sqrt(_tiny(dtype))
    x = np.array([0.0, t / 10, -t / 2, 1e-3, -4.0])
    out, grads = _evaluate(_single(StableReciprocal(), input="x"), dtype, {}, {"x": x}, {"output": np.ones(5)})
    inside = np.abs(x) < t
    sign = np.where(x < 0, -1.0, 1.0)
    safe = np.where(inside, 1.0, x)
    rtol = 1e-6 if dtype is ml.float32 else 1e-14
    np.testing.assert_allclose(out["output"], np.where(inside, 2 * sign / t - x / t**2, 1 / safe), rtol=rtol)
    np.testing.assert_allclose(grads["x"], np.where(inside, -1 / t**2, -1 / safe**2), rtol=rtol)
    with pytest.warns(DeprecationWarning, match="threshold="):
        block = StableReciprocal(eps=0.5)
    out, _ = _evaluate(_single(block, input="x"), ml.float64, {"x": np.array([0.0, 0.25, 2.0])})
    np.testing.assert_allclose(out["output"], [4.0, 3.0, 0.5])


# -- losses against torch.nn.functional ----------------------------------------------------------------
torch = pytest.importorskip("torch")
F = torch.nn.functional


def _t(a: np.ndarray, dtype: ml.Dtype) -> Any:
    return torch.tensor(np.asarray(a, dtype=_np(dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_logits_with_class_weights_matches_torch_at_any_rank(dtype: ml.Dtype) -> None:
    rtol = 1e-5 if dtype is ml.float32 else 1e-12
    w = np.array([0.3, 1.0, 2.0, 0.7])
    x = RNG.normal(size=(3, 4, 5), scale=3.0)
    labels = RNG.integers(0, 4, size=(3, 5))
    soft = RNG.dirichlet(np.ones(4), size=(3, 5)).transpose(0, 2, 1)  # [N, C, d]
    model = Model()
    model |= CrossEntropy(weights=list(w)).connect("x", "labels", output=IOKey("hard"))
    model |= CrossEntropy(categorical=False, weights=list(w)).connect("x", "soft", output=IOKey("soft_loss"))
    out, grads = _evaluate(
        model,
        dtype,
        {"labels": labels, "soft": soft},
        {"x": x},
        {"hard": np.ones((3, 5)), "soft_loss": np.ones((3, 5))},
    )
    xt = _t(x, dtype).requires_grad_(True)
    hard = F.cross_entropy(xt, torch.tensor(labels), weight=_t(w, dtype), reduction="none")
    soft_loss = F.cross_entropy(xt, _t(soft, dtype), weight=_t(w, dtype), reduction="none")
    (hard.sum() + soft_loss.sum()).backward()
    np.testing.assert_allclose(out["hard"], hard.detach().numpy(), rtol=rtol)
    np.testing.assert_allclose(out["soft_loss"], soft_loss.detach().numpy(), rtol=rtol)
    np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_of_probabilities_logs_as_mithril_in_each_dtype(dtype: ml.Dtype) -> None:
    tiny = _tiny(dtype)
    p = np.array([[0.0, 1.0], [1e-20, 1.0 - 1e-20], [0.25, 0.75]])
    labels = np.array([0, 0, 1])
    model = Model()
    model |= CrossEntropy(input_type="probs").connect("p", "labels", output=IOKey("default"))
    model |= CrossEntropy(input_type="probs", robust=True).connect("p", "labels", output=IOKey("robust"))
    ones = np.ones(3)
    out, grads = _evaluate(model, dtype, {"labels": labels}, {"p": p}, {"default": ones, "robust": ones})
    exact = _single(CrossEntropy(input_type="probs", robust=False), input="p", target="labels")
    with np.errstate(divide="ignore"):
        exact_out, _ = _evaluate(exact, dtype, {"p": p, "labels": labels})
    picked = p[np.arange(3), labels]
    rtol = 1e-6 if dtype is ml.float32 else 1e-14
    # default: -log(max(p, tiny)); 1e-20 is above float32's tiny too, so its exact log (46.05, not 27.6)
    np.testing.assert_allclose(out["default"], -np.log(np.maximum(picked, tiny)), rtol=rtol)
    np.testing.assert_allclose(out["robust"], [1.0 - np.log(tiny), -np.log(1e-20), -np.log(0.75)], rtol=rtol)
    assert np.isinf(exact_out["output"][0]) and np.allclose(exact_out["output"][1:], -np.log(picked[1:]), rtol=rtol)
    # gradients: -1/p on the target class from both; at p = 0 the clamped default's is 0 and Mithril's robust
    # line's -1/tiny; 0 on the other class
    np.testing.assert_allclose(grads["p"][[1, 2], [0, 1]], 2 * -1 / picked[1:], rtol=rtol)
    np.testing.assert_allclose(grads["p"][0, 0], -1 / tiny, rtol=rtol)
    assert np.all(grads["p"][[0, 1, 2], [1, 1, 0]] == 0.0)
    # the same values as torch's nll_loss of the log of the probabilities, where the log is finite
    ref = F.nll_loss(torch.log(_t(p[1:], dtype)), torch.tensor(labels[1:]), reduction="none")
    np.testing.assert_allclose(out["default"][1:], ref.numpy(), rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_cross_entropy_matches_torch_with_pos_weight(dtype: ml.Dtype) -> None:
    rtol = 1e-5 if dtype is ml.float32 else 1e-12
    x = RNG.normal(size=(4, 3), scale=3.0)
    t = RNG.uniform(size=(4, 3))
    p = 1 / (1 + np.exp(-x))
    model = Model()
    model |= BinaryCrossEntropy().connect("x", "t", output=IOKey("logits"))
    model |= BinaryCrossEntropy(pos_weight=2.5).connect("x", "t", output=IOKey("weighted"))
    model |= BinaryCrossEntropy(input_type="probs").connect("p", "t", output=IOKey("probs"))
    model |= BinaryCrossEntropy(input_type="probs", pos_weight=0.625, robust=True).connect(
        "p", "t", output=IOKey("probs_weighted")
    )
    cot = {k: np.ones((4, 3)) for k in ("logits", "weighted", "probs", "probs_weighted")}
    out, grads = _evaluate(model, dtype, {"t": t}, {"x": x, "p": p}, cot)
    xt, pt = _t(x, dtype).requires_grad_(True), _t(p, dtype).requires_grad_(True)
    tt = _t(t, dtype)
    ref = {
        "logits": F.binary_cross_entropy_with_logits(xt, tt, reduction="none"),
        "weighted": F.binary_cross_entropy_with_logits(xt, tt, pos_weight=_t(np.array(2.5), dtype), reduction="none"),
        "probs": F.binary_cross_entropy(pt, tt, reduction="none"),
        "probs_weighted": -(0.625 * tt * torch.log(pt) + (1 - tt) * torch.log(1 - pt)),
    }
    sum(v.sum() for v in ref.values()).backward()
    for key, value in ref.items():
        np.testing.assert_allclose(out[key], value.detach().numpy(), rtol=rtol, err_msg=key)
    np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(grads["p"], pt.grad.numpy(), rtol=rtol * 10, atol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_cross_entropy_of_probabilities_at_the_ends(dtype: ml.Dtype) -> None:
    """The terms are differentiated one by one: at p = 1 with target 1 the gradient is -1 (``-t / p``), not
    0/0; p = 1e-20 (a normal number in float32 too) keeps its exact log and gradient."""
    p = np.array([1.0, 1e-20, 1e-20, 0.5])
    t = np.array([1.0, 1.0, 0.0, 1.0])
    model = Model()
    model |= BinaryCrossEntropy(input_type="probs").connect("p", "t", output=IOKey("default"))
    model |= BinaryCrossEntropy(input_type="probs", robust=True).connect("p", "t", output=IOKey("robust"))
    out, grads = _evaluate(model, dtype, {"t": t}, {"p": p}, {"default": np.ones(4), "robust": np.ones(4)})
    rtol = 1e-6 if dtype is ml.float32 else 1e-14
    expected = [0.0, -np.log(1e-20), -np.log(1.0 - 1e-20), np.log(2.0)]  # 1 - 1e-20 rounds to 1: log(1 - p) is 0
    np.testing.assert_allclose(out["default"], expected, rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(out["robust"], expected, rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(grads["p"], 2 * np.array([-1.0, -1e20, 1.0, -2.0]), rtol=rtol)


def test_binary_cross_entropy_auto_pos_weight_is_mithrils() -> None:
    """``pos_weight="auto"``: ``(1 - m) / m`` with ``m`` the targets' mean (of ``sigmoid(target)`` for logits)."""
    x = RNG.normal(size=(6, 1))
    p = 1 / (1 + np.exp(-x))
    t = np.array([[1.0], [0.0], [0.0], [1.0], [0.0], [0.0]])
    model = Model()
    model |= BinaryCrossEntropy(pos_weight="auto").connect("x", "t", output=IOKey("logits"))
    model |= BinaryCrossEntropy(input_type="probs", pos_weight="auto").connect("p", "t", output=IOKey("probs"))
    out, _ = _evaluate(model, ml.float64, {"x": x, "p": p, "t": t})
    m_logits, m_probs = np.mean(1 / (1 + np.exp(-t))), np.mean(t)
    w_logits, w_probs = (1 - m_logits) / m_logits, (1 - m_probs) / m_probs
    log_sig, log_1m = -np.logaddexp(0, -x), -np.logaddexp(0, x)
    np.testing.assert_allclose(out["logits"], -(w_logits * t * log_sig + (1 - t) * log_1m), rtol=1e-12)
    np.testing.assert_allclose(out["probs"], -(w_probs * t * np.log(p) + (1 - t) * np.log1p(-p)), rtol=1e-12)
    with pytest.raises(ml.errors.ArgumentError, match="pos_weight"):
        BinaryCrossEntropy(pos_weight="balanced")


@pytest.mark.parametrize("dtype", DTYPES)
def test_kl_divergence_matches_torch_and_logs_tiny_probabilities_exactly(dtype: ml.Dtype) -> None:
    rtol = 1e-5 if dtype is ml.float32 else 1e-12
    p = RNG.dirichlet(np.ones(4), size=3)
    q = RNG.dirichlet(np.ones(4), size=3)
    p[0, 0] = 1e-20  # a normal number in both dtypes: its exact log (1e-12 clamping gave a smaller divergence)
    q[1, 2] = 0.0  # no contribution where the target is 0
    out, grads = _evaluate(
        _single(KLDivergence(), input="p", target="q"), dtype, {"q": q}, {"p": p}, {"output": np.ones((3, 4))}
    )
    pt = _t(p, dtype).requires_grad_(True)
    ref = F.kl_div(torch.log(pt), _t(q, dtype), reduction="none")
    ref.sum().backward()
    np.testing.assert_allclose(out["output"], ref.detach().numpy(), rtol=rtol, atol=1e-30)
    np.testing.assert_allclose(grads["p"], pt.grad.numpy(), rtol=rtol)


# -- PermuteTensor -----------------------------------------------------------------------------------
def test_permute_tensor_takes_inputs_of_any_rank() -> None:
    for shape in ((5,), (5, 3), (5, 2, 3, 2)):
        x = RNG.normal(size=shape)
        order = RNG.permutation(5)
        cot = RNG.normal(size=shape)
        out, grads = _evaluate(
            _single(PermuteTensor(), input="x", indices="i"),
            ml.float64,
            {},
            {"x": x},
            {"output": cot},
            constants={"i": order},
        )
        np.testing.assert_array_equal(out["output"], x[order])
        np.testing.assert_array_equal(grads["x"], cot[np.argsort(order)])


# -- every backend computes the same robust numbers -------------------------------------------------------
def _robust_model() -> Model:
    model = Model()
    model |= Log(robust=True).connect("x", output=IOKey("log"))
    model |= Sqrt(robust=True).connect("x", output=IOKey("sqrt"))
    model |= Power(robust=True).connect(base="x", exponent=0.5, output=IOKey("power"))
    model |= StableReciprocal().connect("x", output=IOKey("reciprocal"))
    model |= KLDivergence().connect("p", "q", output=IOKey("kl"))
    model |= CrossEntropy(input_type="probs", robust=True).connect("p", "labels", output=IOKey("ce"))
    model |= BinaryCrossEntropy(input_type="probs").connect("p", "q", output=IOKey("bce"))
    return model


@pytest.mark.parametrize(
    ("backend_class", "dtype"),
    [p for p in _backend_dtypes() if p.values[1] in (ml.float32, ml.float64) and not str(p.id).startswith("numpy")],
)
def test_every_backend_agrees_with_numpy_at_the_thresholds(backend_class: Any, dtype: ml.Dtype) -> None:
    """Values at and around the dtype's thresholds (0, tiny, below StableReciprocal's threshold) and their
    gradients: the same on every backend as on NumPy. (Only 0 and subnormal numbers lie below tiny; XLA on the
    CPU flushes subnormals to 0, so none is used here.)"""
    tiny = _tiny(dtype)
    if dtype is ml.float32:
        x = np.array([[0.0, 1e-37, -1e-25, 1e-20], [-3.0, 2.0, tiny, 1e-30]])
    else:
        x = np.array([[0.0, 1e-300, -1e-160, 1e-150], [-3.0, 2.0, tiny, 1e-200]])
    p = np.array([[0.0, 0.25, 0.5, 0.25], [1e-30, 0.5, 0.25, 0.25]])
    q = np.array([[0.5, 0.0, 0.25, 0.25], [0.25, 0.25, 0.5, 0.0]])
    labels = np.array([0, 0])
    keys = ("log", "sqrt", "power", "reciprocal", "kl", "ce", "bce")
    cot = {k: np.ones((2,) if k == "ce" else (2, 4)) for k in keys}
    expected, expected_grads = _evaluate(_robust_model(), dtype, {"q": q, "labels": labels}, {"x": x, "p": p}, cot)
    got, grads = _evaluate(
        _robust_model(), dtype, {"q": q, "labels": labels}, {"x": x, "p": p}, cot, backend=backend_class(dtype=dtype)
    )
    for key in keys:
        np.testing.assert_allclose(got[key], expected[key], rtol=2e-6 if dtype is ml.float32 else 1e-12, err_msg=key)
    for key in ("x", "p"):
        np.testing.assert_allclose(
            grads[key], expected_grads[key], rtol=2e-6 if dtype is ml.float32 else 1e-12, err_msg=key
        )
    assert np.all(np.isfinite(expected["log"])) and np.all(np.isfinite(expected_grads["x"]))
