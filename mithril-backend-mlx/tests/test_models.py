"""Whole models on MLX: outputs and ``mx.vjp`` gradients against the NumPy backend in float64 (an MLP
and a small CNN, compiled and eager), and the MLX guide's ``mlx.optimizers`` training loop.

Tolerances: MLX computes in float32, the reference in float64; outputs and gradients agree to
``rtol=1e-4`` with ``atol=1e-5`` times the largest magnitude of the reference.
"""

from __future__ import annotations

import mithril as ml
import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
import pytest
from mithril.models import (
    MLP,
    Conv2d,
    CrossEntropy,
    Flatten,
    IOKey,
    LayerNorm,
    Linear,
    MaxPool2D,
    Model,
    Relu,
    Softmax,
    SquaredError,
)

from mithril_backend_mlx import MlxBackend

RTOL, ATOL = 1e-4, 1e-5
numpy_backend = pytest.importorskip("mithril_backend_numpy")


def mlp() -> tuple[Model, dict, dict]:
    model = Model()
    model |= MLP(input_size=6, hidden_sizes=[16, 8], output_size=4)(input="input", output=IOKey("logits"))
    model |= LayerNorm()(input="logits", output="normed")
    model |= Softmax()(input="normed", output=IOKey("probs"))
    model |= CrossEntropy(reduction="mean")(input="normed", target="target", output=IOKey("loss"))
    rng = np.random.default_rng(0)
    data = {"input": rng.standard_normal((5, 6)), "target": rng.integers(0, 4, (5,))}
    return model, {"input": [5, 6], "target": [5]}, data


def cnn() -> tuple[Model, dict, dict]:
    model = Model()
    model |= Conv2d(filters=4, kernel_size=3, padding="same")(input="input", output="conv1")
    model += Relu()(output="act1")
    model += MaxPool2D(kernel_size=2)(output="pool1")
    model += Conv2d(out_channels=6, kernel_size=3, stride=2, padding=1, groups=2)(output="conv2")
    model += Relu()(output="act2")
    model += Flatten()(output="flat")
    model += Linear(dimension=3)(output=IOKey("logits"))
    model |= CrossEntropy(reduction="mean")(input="logits", target="target", output=IOKey("loss"))
    rng = np.random.default_rng(1)
    data = {"input": rng.standard_normal((2, 2, 8, 8)), "target": rng.integers(0, 3, (2,))}
    return model, {"input": [2, 2, 8, 8], "target": [2]}, data


def _close(got, expected, what):
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), expected, rtol=RTOL, atol=ATOL * scale, err_msg=what)


@pytest.mark.parametrize("build", [mlp, cnn])
@pytest.mark.parametrize("jit", [True, False], ids=["compiled", "eager"])
def test_outputs_and_gradients_match_numpy_float64(build, jit):
    model, shapes, data = build()
    reference_backend = numpy_backend.NumpyBackend(dtype=ml.float64)
    reference = ml.compile(model, reference_backend, shapes=shapes, data_keys={"input", "target"})
    backend = MlxBackend()
    compiled = ml.compile(model, backend, shapes=shapes, data_keys={"input", "target"}, jit=jit)
    params64 = reference.randomize_params(seed=0)
    params = {k: backend.array(v) for k, v in params64.items()}  # float32-rounded, same numbers
    params64 = {k: np.asarray(backend.to_numpy(v), dtype=np.float64) for k, v in params.items()}
    data64 = {"input": np.asarray(data["input"], np.float32).astype(np.float64), "target": data["target"]}

    want_out, want_grads = reference.evaluate(params64, data64, output_gradients={"loss": np.array(1.0)})
    got_out, got_grads = compiled.evaluate(params, data, output_gradients={"loss": backend.array(1.0)})
    assert set(got_grads) == set(want_grads) == set(params)
    for key, value in want_out.items():
        _close(backend.to_numpy(got_out[key]), value, f"output {key}")
    for key, value in want_grads.items():
        assert got_grads[key].dtype == mx.float32
        _close(backend.to_numpy(got_grads[key]), value, f"gradient of {key}")


def test_mlx_optimizer_loop_decreases_the_loss():
    """The guide's loop: gradients from evaluate, ``mlx.optimizers.Adam`` updating the param dict."""
    model = Model()
    model |= Linear(dimension=16)(input="input", output="hidden")
    model += Relu()(output="hidden_act")
    model += Linear(dimension=1)(output=IOKey("output"))
    model |= SquaredError(reduction="mean")(input="output", target="target", output=IOKey("loss"))
    backend = MlxBackend(seed=0)
    pm = ml.compile(model, backend, shapes={"input": [32, 4], "target": [32, 1]}, data_keys={"input", "target"})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True))
    data = {"input": backend.array(x), "target": backend.array(y)}

    params = pm.get_parameters()
    optimizer = optim.Adam(learning_rate=0.01)
    losses = []
    for _ in range(60):
        outputs, gradients = pm.evaluate(params, data, output_gradients=True)
        losses.append(outputs["loss"].item())
        mlx_gradients = {name: backend.to_mlx(grad) for name, grad in gradients.items()}
        mlx_params = {name: backend.to_mlx(param) for name, param in params.items()}
        optimizer.update(mlx_params, mlx_gradients)  # updates the dict in place (returns None)
        params = {name: backend.from_mlx(param) for name, param in mlx_params.items()}
    assert losses[-1] < 0.25 * losses[0], f"loss went from {losses[0]:.4f} to {losses[-1]:.4f}"
    assert all(v.dtype == mx.float32 for v in params.values())


def test_plain_sgd_loop_from_the_guide():
    """The guide's classification loop: ``params[name] - learning_rate * grad`` on mx arrays."""
    model = Model()
    model |= Linear(dimension=32)(input="input", output="hidden1")
    model += Relu()(output="hidden1_act")
    model += Linear(dimension=3)(output="logits")
    model += Softmax()(output=IOKey("output"))
    backend = MlxBackend(dtype=mx.float32, seed=0)
    pm = ml.compile(model, backend, shapes={"input": [60, 5]}, data_keys={"input"})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 5)).astype(np.float32)
    y = np.argmax(x[:, :3], axis=1)
    one_hot = np.eye(3, dtype=np.float32)[y]
    params = pm.get_parameters()
    accuracy = []
    for _ in range(40):
        predictions = pm.evaluate(params, {"input": x})["output"]
        _, gradients = pm.evaluate(params, {"input": x}, output_gradients={"output": predictions - one_hot})
        params = {name: params[name] - 0.01 * grad for name, grad in gradients.items()}
        accuracy.append(float(np.mean(np.argmax(np.array(predictions), axis=1) == y)))
    assert accuracy[-1] > accuracy[0] and accuracy[-1] >= 0.8


@pytest.mark.parametrize("dtype", [ml.float16, ml.bfloat16])
def test_half_precision_gradients_follow_float32(dtype):
    model, shapes, data = mlp()
    full = MlxBackend(dtype=ml.float32)
    half = MlxBackend(dtype=dtype)
    pm_full = ml.compile(model, full, shapes=shapes, data_keys={"input", "target"})
    pm_half = ml.compile(model, half, shapes=shapes, data_keys={"input", "target"})
    params = pm_full.randomize_params(seed=0)
    params_half = {k: half.array(v) for k, v in params.items()}
    _, want = pm_full.evaluate(params, data, output_gradients=True)
    out, got = pm_half.evaluate(params_half, data, output_gradients=True)
    assert out["loss"].dtype == half.native_dtype()
    for key, value in want.items():
        assert got[key].dtype == half.native_dtype(), key
        expected = full.to_numpy(value)
        np.testing.assert_allclose(
            half.to_numpy(got[key]), expected, rtol=5e-2, atol=5e-2 * max(1.0, np.abs(expected).max())
        )
