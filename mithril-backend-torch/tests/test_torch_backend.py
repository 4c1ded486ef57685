"""TorchBackend beyond the per-primitive suite: autograd against the NumPy backend's symbolic gradients on
whole models, construction options and their errors, seeded randomness, and training with torch.optim."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.models import (
    MLP,
    Conv2d,
    CrossEntropy,
    Dropout,
    Flatten,
    IOKey,
    Linear,
    MaxPool2D,
    Model,
    Relu,
    SquaredError,
)

from mithril_backend_torch import TorchBackend

numpy_backend = pytest.importorskip("mithril_backend_numpy")


def _cnn() -> Model:
    model = Model()
    model |= Conv2d(in_channels=2, out_channels=4, kernel_size=3, padding=1)
    model += Relu()
    model += MaxPool2D(kernel_size=2)
    model += Conv2d(in_channels=4, out_channels=3, kernel_size=3, stride=2, padding="valid", groups=1)
    model += Flatten()
    model += Linear(dimension=5)
    return model


def _compare_with_numpy(model: Model, shapes: dict[str, list[int]], seed: int = 0) -> None:
    """Same parameters (``randomize_params(seed)``), data and cotangents on both backends, float64:
    outputs and gradients (torch.autograd vs NumPy's symbolic backward graph) must agree."""
    rng = np.random.default_rng(seed)
    data = {k: rng.standard_normal(s) for k, s in shapes.items()}
    results = []
    for backend in (TorchBackend(dtype=ml.float64), ml.NumpyBackend(dtype=ml.float64)):
        pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), jit=False)
        params = pm.randomize_params(seed=seed)
        cotangent = np.random.default_rng(seed + 1).standard_normal(pm.shapes["output"])
        arrays = {k: backend.array(v) for k, v in data.items()}
        outputs, grads = pm.evaluate(params, arrays, output_gradients={"output": backend.array(cotangent)})
        results.append(
            (backend.to_numpy(outputs["output"]), {k: backend.to_numpy(g) for k, g in grads.items()}, params, backend)
        )
    (t_out, t_grads, t_params, tb), (n_out, n_grads, n_params, nb) = results
    for key in n_params:
        np.testing.assert_array_equal(tb.to_numpy(t_params[key]), nb.to_numpy(n_params[key]), err_msg=key)
    np.testing.assert_allclose(t_out, n_out, rtol=1e-10, atol=1e-12)
    assert set(t_grads) == set(n_grads)
    for key in n_grads:
        np.testing.assert_allclose(t_grads[key], n_grads[key], rtol=1e-9, atol=1e-11, err_msg=key)


def test_vjp_matches_numpy_on_an_mlp():
    _compare_with_numpy(MLP(input_size=6, hidden_sizes=[8, 8], output_size=3), {"input": [5, 6]})


def test_vjp_matches_numpy_on_a_small_cnn():
    _compare_with_numpy(_cnn(), {"input": [2, 2, 8, 8]})


def test_scalar_loss_gradients_match_numpy():
    model = Model()
    model |= MLP(input_size=4, hidden_sizes=[8], output_size=3)(input="input", output=IOKey("logits"))
    model |= CrossEntropy(reduction="mean")(input="logits", target="target", output=IOKey("loss"))
    x = np.random.default_rng(0).standard_normal((6, 4))
    target = np.array([0, 2, 1, 1, 0, 2])
    grads = []
    for backend in (TorchBackend(dtype=ml.float64), ml.NumpyBackend(dtype=ml.float64)):
        pm = ml.compile(model, backend, shapes={"input": [6, 4], "target": [6]}, data_keys={"input", "target"})
        params = pm.randomize_params(seed=3)
        outputs, g = pm.evaluate(params, {"input": x, "target": target}, output_gradients=True)
        grads.append({k: backend.to_numpy(v) for k, v in g.items()} | {"loss": backend.to_numpy(outputs["loss"])})
    for key in grads[1]:
        np.testing.assert_allclose(grads[0][key], grads[1][key], rtol=1e-9, atol=1e-12, err_msg=key)


def test_vjp_returns_zeros_for_unused_params_and_detached_tensors():
    backend = TorchBackend(dtype=ml.float64)
    primals = {"a": backend.array([1.0, 2.0]), "unused": backend.array([3.0])}
    outputs, grads = backend.vjp(
        lambda p: {"out": p["a"] * 3.0, "count": backend.array(2)}, primals, {"out": backend.array([1.0, -1.0])}
    )
    assert grads["a"].tolist() == [3.0, -3.0]
    assert grads["unused"].tolist() == [0.0]
    assert not outputs["out"].requires_grad and not grads["a"].requires_grad
    assert not primals["a"].requires_grad  # the caller's tensors are left alone


def test_registered_as_a_plugin_and_reachable_lazily():
    assert ml.TorchBackend is TorchBackend
    from mithril.backends import TorchBackend as from_backends

    assert from_backends is TorchBackend


@pytest.mark.parametrize("dtype", [ml.float16, ml.bfloat16, ml.float32, ml.float64])
def test_dtypes(dtype):
    backend = TorchBackend(dtype=dtype)
    assert backend.array([1.5]).dtype == backend.native_dtype() == getattr(torch, dtype.value)
    assert backend.array([1]).dtype == torch.int64
    assert backend.randn(3, 2).dtype == backend.native_dtype()
    assert backend.to_numpy(backend.ones(2)).tolist() == [1.0, 1.0]


def test_float64_data_keeps_its_precision():
    backend = TorchBackend(dtype=ml.float64)
    assert backend.to_numpy(backend.array([0.1]))[0] == 0.1
    assert backend.to_numpy(backend.array(np.float64(1 / 3))) == 1 / 3


def test_unsupported_dtype_is_refused():
    with pytest.raises(TypeError, match="int32"):
        TorchBackend(dtype=ml.int32)


@pytest.mark.parametrize("option", ["colour", "use_ane"])  # use_amp=, compile=: tests/test_manual_options.py
def test_unknown_options_name_the_accepted_ones(option):
    with pytest.raises(TypeError) as exc:
        TorchBackend(**{option: True})
    message = str(exc.value)
    assert (
        option in message and "dtype" in message and "device" in message and "seed" in message and "use_amp" in message
    )


@pytest.mark.parametrize("option", ["parallel_strategy", "devices"])
def test_parallel_options_point_at_device_mesh(option):
    with pytest.raises(TypeError) as exc:
        TorchBackend(**{option: True})
    assert option in str(exc.value) and "device_mesh" in str(exc.value)


def test_cuda_is_refused_clearly_when_missing():
    if torch.cuda.is_available():
        backend = TorchBackend(device="cuda")
        assert backend.array([1.0]).device.type == "cuda"
        return
    with pytest.raises(ValueError, match="CUDA is not available on this machine"):
        TorchBackend(device="cuda")
    with pytest.raises(ValueError, match="not available"):
        TorchBackend(device="tpu")
    backend = TorchBackend()
    with pytest.raises(ValueError, match="CUDA is not available"):
        backend.set_device("cuda:0")
    assert backend.device == "cpu"


def test_set_device_and_deterministic_mode():
    backend = TorchBackend(seed=3)
    backend.set_device("cpu")
    assert backend.generator.device.type == "cpu"
    previous = torch.are_deterministic_algorithms_enabled()
    try:
        backend.enable_deterministic()
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(previous)


def _dropout_model() -> Model:
    model = Model()
    model |= Linear(dimension=64)
    model += Dropout(p=0.5)
    return model


def test_dropout_is_reproducible_with_a_seed_and_leaves_the_global_rng_alone():
    x = np.ones((8, 16))

    def run(seed: int, draws: int = 2) -> list[np.ndarray]:
        backend = TorchBackend(seed=seed)
        pm = ml.compile(_dropout_model(), backend, shapes={"input": [8, 16]}, data_keys={"input"}, jit=False)
        params = pm.randomize_params(seed=0)
        return [backend.to_numpy(pm.evaluate(params, {"input": x})["output"]) for _ in range(draws)]

    global_state = torch.random.get_rng_state()
    first, second = run(7)
    again, _ = run(7)
    other, _ = run(8)
    assert torch.equal(global_state, torch.random.get_rng_state())
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second)
    assert not np.array_equal(first, other)
    assert 0.3 < np.mean(first == 0) < 0.7


def test_set_seed_restarts_the_stream():
    backend = TorchBackend(seed=1)
    a = backend.randn(4)
    backend.set_seed(1)
    assert torch.equal(a, backend.randn(4))
    assert backend.randint(0, 3, (50,)).unique().tolist() == [0, 1, 2]


def test_torch_optim_sgd_reduces_the_loss():
    model = Model()
    model |= MLP(input_size=3, hidden_sizes=[16], output_size=1)(input="input", output=IOKey("pred"))
    model |= SquaredError(reduction="mean")(input="pred", target="target", output=IOKey("loss"))
    backend = TorchBackend(seed=0)
    pm = ml.compile(model, backend, shapes={"input": [32, 3], "target": [32, 1]}, data_keys={"input", "target"})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 3))
    data = {"input": backend.array(x), "target": backend.array(x @ np.array([[1.0], [-2.0], [0.5]]))}
    params = pm.randomize_params(seed=0)
    optimizer = torch.optim.SGD(params.values(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(60):
        outputs, grads = pm.evaluate(params, data, output_gradients=True)
        for name, tensor in params.items():
            tensor.grad = grads[name]
        optimizer.step()
        losses.append(float(outputs["loss"]))
    assert losses[-1] < 0.2 * losses[0], losses[::10]


def test_jit_compiles_with_torch_compile_and_matches_eager():
    pytest.importorskip("torch._dynamo")
    model = MLP(input_size=4, hidden_sizes=[8], output_size=2)
    backend = TorchBackend(dtype=ml.float64)
    eager = ml.compile(model, backend, shapes={"input": [3, 4]}, data_keys={"input"}, jit=False)
    jitted = ml.compile(model, backend, shapes={"input": [3, 4]}, data_keys={"input"}, jit=True)
    params = eager.randomize_params(seed=0)
    data = {"input": backend.randn(3, 4)}
    cot = {"output": backend.ones(3, 2)}
    want_out, want_grads = eager.evaluate(params, data, output_gradients=cot)
    got_out, got_grads = jitted.evaluate(params, data, output_gradients=cot)
    torch.testing.assert_close(got_out["output"], want_out["output"])
    for key in want_grads:
        torch.testing.assert_close(got_grads[key], want_grads[key])
