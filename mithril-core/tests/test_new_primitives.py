"""Issue 16 primitives with analytic gradients: ``Cholesky`` and ``Eigvalsh`` on every installed backend that
can express them, outputs against NumPy and gradients against PyTorch autograd (the symmetric gradient,
as ``torch.linalg`` gives it), and the declared gaps of C/GGML refused with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from mithril.errors import UnsupportedPrimitiveError
from mithril.models import Cholesky, Eigvalsh, IOKey, Model
from mithril_testing.blocks import DTYPES, backends, evaluate_model, tolerance

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


@pytest.mark.parametrize("dtype", DTYPES)
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
    np.testing.assert_allclose(
        grads["input"], expected_grad, rtol=rtol * 10, atol=rtol * 100, err_msg=f"d{name} on {backend}"
    )
    np.testing.assert_allclose(
        grads["input"], np.swapaxes(grads["input"], -1, -2), atol=rtol * 100, err_msg="symmetric gradient"
    )


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


# -- stop_gradient and the non-differentiable inputs of autograd backends ---------------------------
def _primitive_model(*calls: tuple[str, dict, dict]) -> Model:
    from mithril.models import Primitive

    model = Model()
    for name, attrs, keys in calls:
        model |= Primitive(name, **attrs)(**keys)
    return model


@pytest.mark.parametrize("backend", backends())
def test_stop_gradient_passes_values_and_no_gradient(backend: str) -> None:
    """``x * StopGradient(x)``: the value is ``x**2``, the gradient ``x`` (not ``2x``) on every backend."""
    from mithril.models import Multiply, StopGradient

    model = Model()
    model |= StopGradient()(input="x", output="stopped")
    model |= Multiply()(left="x", right="stopped", output=IOKey("output"))
    x = np.array([0.5, -1.5, 2.0])
    out, grads = evaluate_model(backend, model, {"x": x}, cotangent=np.ones(3))
    np.testing.assert_allclose(out["output"], x * x, rtol=1e-6)
    np.testing.assert_allclose(grads["x"], x, rtol=1e-6)


def _bce_of_own_sigmoid() -> Model:
    """A loss whose target is computed from the parameter: binary_cross_entropy declares only ``input``
    differentiable, so no gradient flows through ``target`` (the fuzzer's reproduction)."""
    return _primitive_model(
        ("sigmoid", {}, {"input": "x", "output": "p"}),
        ("binary_cross_entropy", {"input_type": "logits"}, {"input": "x", "target": "p", "output": IOKey("output")}),
    )


@pytest.mark.parametrize("backend", backends())
def test_no_gradient_through_a_nondifferentiable_input_on_any_backend(backend: str) -> None:
    """d/dx of bce(x, target=sigmoid(x)) with the target held constant is ``sigmoid(x) - sigmoid(x) = 0``
    on every backend; through the target it would be ``-x * sigmoid'(x)``."""
    x = np.array([0.5, -1.0, 2.0])
    _, grads = evaluate_model(backend, _bce_of_own_sigmoid(), {"x": x}, dtype="float32", cotangent=np.ones(3))
    np.testing.assert_allclose(grads["x"], np.zeros(3), atol=1e-5)


@pytest.mark.parametrize("backend", backends())
def test_floor_divide_has_zero_gradient_on_every_backend(backend: str) -> None:
    """The spec declares floor_divide non-differentiable (its derivative is 0 almost everywhere): every
    backend gives ``d(floor(a / b) * a)/da = floor(a / b)`` and ``d/db = 0`` (PyTorch used to raise)."""
    model = _primitive_model(
        ("floor_divide", {}, {"left": "a", "right": "b", "output": "q"}),
        ("multiply", {}, {"left": "q", "right": "a", "output": IOKey("output")}),
    )
    a, b = np.array([0.75, -1.25, 3.5]), np.array([0.5, 0.5, 2.0])
    _, grads = evaluate_model(backend, model, {"a": a, "b": b}, dtype="float32", cotangent=np.ones(3))
    np.testing.assert_allclose(grads["a"], np.floor(a / b), atol=1e-6)
    np.testing.assert_allclose(grads["b"], np.zeros(3), atol=1e-6)


def test_stop_gradient_inserted_only_where_needed() -> None:
    """Autograd backends get a ``stop_gradient`` only for a parameter-dependent float value at a
    non-differentiable input; a target given as data, inference, and manual-gradient backends get none."""
    pytest.importorskip("mithril_backend_torch", reason="checked on PyTorch's generated source")
    import mithril as ml

    def source(backend, model, **kwargs) -> str:
        return ml.compile(model, backend, shapes={"x": [3]}, **kwargs).source

    torch_backend, numpy_backend = ml.TorchBackend(), ml.NumpyBackend()
    assert source(torch_backend, _bce_of_own_sigmoid(), trainable_keys={"x"}).count("stop_gradient") == 1
    assert "stop_gradient" not in source(torch_backend, _bce_of_own_sigmoid(), trainable_keys={"x"}, inference=True)
    assert "stop_gradient" not in source(numpy_backend, _bce_of_own_sigmoid(), trainable_keys={"x"})
    data_target = _primitive_model(
        ("binary_cross_entropy", {"input_type": "logits"}, {"input": "x", "target": "t", "output": IOKey("output")}),
    )
    assert "stop_gradient" not in ml.compile(
        data_target, torch_backend, shapes={"x": [3], "t": [3]}, trainable_keys={"x"}, data_keys={"t"}
    ).source


# -- at_least_1d, unique, item, to_list / to_tuple ----------------------------------------------------
TENSOR_GAPS = {"c", "ggml"}  # unique, item, to_list, to_tuple: declared in their capability tables


def _compile_eager(backend_name: str, model: Model, shapes: dict, **kwargs):
    import mithril as ml
    from mithril.plugins.lookup import backend_class

    backend = backend_class(backend_name)()
    return backend, ml.compile(model, backend, shapes=shapes, jit=False, **kwargs)


@pytest.mark.parametrize("shape", [(), (2, 3)])
@pytest.mark.parametrize("backend", backends())
def test_at_least_1d_values_and_gradient(backend: str, shape: tuple) -> None:
    """A scalar becomes ``[1]`` (its gradient comes back as a scalar); a matrix passes unchanged (C and
    GGML: an alias of the input's memory, like ``reshape``)."""
    from mithril.models import AtLeast1D

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    cotangent = rng.standard_normal(np.atleast_1d(x).shape)
    out, grads = evaluate_model(backend, _wrap(AtLeast1D()), {"input": x}, cotangent=cotangent)
    np.testing.assert_allclose(out["output"], np.atleast_1d(x), rtol=1e-6)
    assert grads["input"].shape == shape
    np.testing.assert_allclose(grads["input"], cotangent.reshape(shape), rtol=1e-6)


@pytest.mark.parametrize("backend", backends())
def test_unique_and_item(backend: str) -> None:
    """``unique`` gives NumPy's sorted distinct values (a length known only at run time, so two inputs with
    different numbers of distinct values give outputs of different lengths); ``item`` a Python number."""
    from mithril.models import Item, Unique

    if backend in TENSOR_GAPS:
        for block, name in ((Unique, "unique"), (Item, "item")):
            with pytest.raises(UnsupportedPrimitiveError, match=rf"\w+Backend does not implement '{name}'"):
                _compile_eager(backend, _wrap(block()), {"input": [1, 1]}, data_keys={"input"})
        return
    b, pm = _compile_eager(backend, _wrap(Unique()), {"input": [6]}, data_keys={"input"})
    for values in ([3.0, 1.0, 3.0, 2.0, 1.0, 3.0], [5.0, 5.0, 5.0, 5.0, 5.0, -1.0]):
        got = np.asarray(b.to_numpy(pm.evaluate({}, {"input": b.array(np.array(values))})["output"]))
        np.testing.assert_array_equal(got, np.unique(values))
    b, pm = _compile_eager(backend, _wrap(Item()), {"input": [1, 1]}, data_keys={"input"})
    value = pm.evaluate({}, {"input": b.array(np.array([[2.5]]))})["output"]
    assert isinstance(value, float) and value == 2.5


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_run_time_values_are_refused_inside_a_jit(backend: str) -> None:
    """``jax.jit`` and ``mx.compile`` cannot trace a value known only at run time: a clear error naming
    the primitive, the backend and ``jit=False``."""
    import mithril as ml
    from mithril.models import Item, Unique
    from mithril.plugins.lookup import available_backends, backend_class

    if backend not in available_backends():
        pytest.skip(f"{backend} is not installed")
    b = backend_class(backend)()
    for block, name in ((Unique, "unique"), (Item, "item")):
        pm = ml.compile(_wrap(block()), b, shapes={"input": [1]}, data_keys={"input"}, jit=True)
        with pytest.raises(UnsupportedPrimitiveError, match=rf"'{name}' on \w+Backend.*jit=False"):
            pm.evaluate({}, {"input": b.array(np.array([1.0]))})


@pytest.mark.parametrize("backend", backends())
def test_to_list_and_to_tuple(backend: str) -> None:
    """``n`` scalars become a Python list / tuple (non-differentiable model outputs)."""
    from mithril.models import ToList, ToTuple

    for block, kind in ((ToList, list), (ToTuple, tuple)):
        model = Model()
        model |= block(3)(input1="a", input2="b", input3="c", output=IOKey("output"))
        shapes = {"a": [], "b": [], "c": []}
        if backend in TENSOR_GAPS:
            with pytest.raises(UnsupportedPrimitiveError, match=block.__name__.replace("To", "to_").lower()):
                _compile_eager(backend, model, shapes, data_keys=set(shapes))
            continue
        b, pm = _compile_eager(backend, model, shapes, data_keys=set(shapes))
        values = {"a": 1.5, "b": -2.0, "c": 4.0}
        out = pm.evaluate({}, {k: b.array(np.array(v)) for k, v in values.items()})["output"]
        assert type(out) is kind and len(out) == 3
        np.testing.assert_allclose([float(b.to_numpy(v)) for v in out], list(values.values()))


def test_bad_arguments_are_refused_clearly() -> None:
    """``ToList(n)`` needs a positive count; ``Item`` one element; ``Cholesky`` a square matrix."""
    import mithril as ml
    from mithril.errors import ArgumentError, ShapeError
    from mithril.models import Item, ToList

    with pytest.raises(ArgumentError, match="n must be a positive int, got 0"):
        ToList(0)
    with pytest.raises(ShapeError, match="item needs an input of one element"):
        ml.compile(_wrap(Item()), ml.NumpyBackend(), shapes={"input": [2, 3]})
    with pytest.raises(ShapeError):
        ml.compile(_wrap(Cholesky()), ml.NumpyBackend(), shapes={"input": [2, 3]})
