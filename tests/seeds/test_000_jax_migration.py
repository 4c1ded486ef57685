"""Seed 000 "Migrating from JAX to Mithril": one test per Mithril code block (blocks numbered from 0 over
all fenced code blocks of the file). Pure-JAX/Haiku blocks 00, 02, 04, 06, 08, 10, 15 are not Mithril code."""

from __future__ import annotations

import itertools

import mithril as ml
import numpy as np
import pytest
from _seed_helpers import assert_option_rejected, check_against_numpy, construct_or_clear_error, to_np
from mithril.models import Conv2d, Dropout, Flatten, Linear, MaxPool2d, Model, Relu
from mithril_testing.devices import run_with_jax_devices


def create_mlp(layer_sizes):
    """Block 01's builder, as written (``input_size=`` at connect time fixes the input features)."""
    model = Model()
    for i, (in_size, out_size) in enumerate(zip(layer_sizes[:-1], layer_sizes[1:], strict=False)):  # noqa: RUF007 - as written
        if i == 0:
            model |= Linear(dimension=out_size)(input_size=in_size)
        else:
            model += Linear(dimension=out_size)(input_size=in_size)
        if i < len(layer_sizes) - 2:
            model += Relu()
    return model


def create_cnn():
    model = Model()
    model |= Conv2d(in_channels=3, out_channels=16, kernel_size=3, padding="same")
    model += Relu()
    model += MaxPool2d(kernel_size=2, stride=2)
    model += Conv2d(in_channels=16, out_channels=32, kernel_size=3, padding="same")
    model += Relu()
    model += MaxPool2d(kernel_size=2, stride=2)
    model += Flatten()
    model += Linear(dimension=10, in_features=32 * 8 * 8)
    return model


def test_000_jax_migration_block01_mithril_mlp(backend_or_numpy):
    # As written: `Linear(dimension=512)(input_size=784)` fixes the weight's input features.
    assert create_mlp([784, 512]).shapes["input"][-1] == 784

    layer_sizes = [784, 512, 256, 10]
    model = create_mlp(layer_sizes)
    backend = backend_or_numpy("jax", dtype=ml.float32)
    compiled_model = ml.compile(model=model, backend=backend, shapes={"input": [4, 784]}, jit=True)
    params = compiled_model.randomize_params()
    assert {k: tuple(v.shape) for k, v in params.items() if k.startswith("weight")} == {
        "weight": (512, 784), "weight_1": (256, 512), "weight_2": (10, 256)
    }
    inputs = {"input": backend.randn(4, 784)}
    output = compiled_model.evaluate(params, inputs)["output"]
    assert tuple(output.shape) == (4, 10)
    assert backend.dtype_of(output) == ml.float32
    check_against_numpy(model, backend, params, inputs, shapes={"input": [4, 784]})


def test_000_jax_migration_block03_compilation_options(backend_or_numpy, backend_class_or_numpy):
    model = create_mlp([16, 8, 4])
    backend = backend_or_numpy("jax")
    jitted_model = ml.compile(model=model, backend=backend, jit=True)
    params = jitted_model.randomize_params()
    # Parallelism: the block as written, on 8 simulated CPU devices (a fresh interpreter with XLA_FLAGS);
    # a mesh of 8 devices does not exist in this process.
    cls = backend_class_or_numpy("jax")
    for mesh in [(8,), (1, 4), (2, 2)]:
        construct_or_clear_error(cls, device_mesh=mesh)
    if cls is ml.JaxBackend:
        found = run_with_jax_devices(
            """
import mithril as ml, numpy as np
from mithril.models import MLP
model = MLP(input_size=16, hidden_sizes=[8], output_size=4)
data_parallel = ml.compile(model=model, backend=ml.JaxBackend(device_mesh=(8,)), parallelism="data")
model_parallel = ml.compile(model=model, backend=ml.JaxBackend(device_mesh=(1, 4)), parallelism="model")
mixed_parallel = ml.compile(model=model, backend=ml.JaxBackend(device_mesh=(2, 2)), parallelism="mixed")
single = ml.compile(model=model, backend=ml.JaxBackend())
x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
expected = np.asarray(single.evaluate(single.randomize_params(seed=0), {"input": x})["output"])
errors = {}
for name, pm in [("data", data_parallel), ("model", model_parallel), ("mixed", mixed_parallel)]:
    out = pm.evaluate(pm.randomize_params(seed=0), {"input": x})["output"]
    errors[name] = float(np.abs(pm.backend.to_numpy(out) - expected).max())
emit(errors)
""",
            devices=8,
        )
        assert found.keys() == {"data", "model", "mixed"} and max(found.values()) <= 1e-5, found
    # Automatic differentiation, built into evaluate.
    inputs = {"input": backend.randn(4, 16)}
    grads = {"output": backend.ones(4, 4)}
    _outputs, gradients = jitted_model.evaluate(params, inputs, output_gradients=grads)
    assert set(gradients) == set(params)
    assert all(tuple(gradients[k].shape) == tuple(params[k].shape) for k in params)
    # bias of the last layer: d(sum of outputs)/d bias = batch size
    np.testing.assert_allclose(to_np(backend, gradients["bias_1"]), np.full(4, 4.0), rtol=1e-5)
    check_against_numpy(model, backend, params, inputs, grads)


def test_000_jax_migration_block05_mithril_cnn(backend_or_numpy):
    model = create_cnn()
    backend = backend_or_numpy("jax")
    compiled_model = ml.compile(model=model, backend=backend, shapes={"input": [4, 3, 32, 32]}, jit=True)
    params = compiled_model.randomize_params()
    assert tuple(params["weight"].shape) == (16, 3, 3, 3)  # PyTorch layout, NCHW
    assert tuple(params["weight_2"].shape) == (10, 2048)
    inputs = {"input": backend.randn(4, 3, 32, 32)}
    outputs = compiled_model.evaluate(params, inputs)
    assert tuple(outputs["output"].shape) == (4, 10)
    check_against_numpy(
        model, backend, params, inputs, {"output": backend.randn(4, 10)}, shapes={"input": [4, 3, 32, 32]}
    )


class _Adam:
    """Stand-in for optax.adam (optax is not installed): ``update(grads, state) -> (updates, state)``."""

    def __init__(self, learning_rate):
        self.lr, self.b1, self.b2, self.eps = learning_rate, 0.9, 0.999, 1e-8

    def init(self, params):
        return {"t": 0, "m": {k: 0.0 for k in params}, "v": {k: 0.0 for k in params}}

    def update(self, grads, state):
        t = state["t"] + 1
        m = {k: self.b1 * state["m"][k] + (1 - self.b1) * g for k, g in grads.items()}
        v = {k: self.b2 * state["v"][k] + (1 - self.b2) * g * g for k, g in grads.items()}
        updates = {
            k: -self.lr * (m[k] / (1 - self.b1**t)) / (np.sqrt(v[k] / (1 - self.b2**t)) + self.eps) for k in grads
        }
        return updates, {"t": t, "m": m, "v": v}


def test_000_jax_migration_block07_mithril_training(backend_or_numpy):
    # Changes: `backend.cross_entropy_grad(logits, targets)` is a gradient-helper primitive taking
    # (output_grad, input, target); the loss and its gradient come from a CrossEntropy loss attached to the
    # model and evaluate(..., output_gradients=True). optax -> a hand-written Adam on NumPy arrays.
    backend = backend_or_numpy("jax")
    # The block's compute_loss_and_grad, as written: backend.cross_entropy_grad(logits, targets) is
    # d sum(cross_entropy) / d logits (softmax - onehot), pulled back through the model by evaluate.
    net_alone = create_mlp([8, 16, 3])
    plain = ml.compile(net_alone, backend, shapes={"input": [12, 8]})

    def compute_loss_and_grad(compiled_model, params, inputs, targets):
        outputs = compiled_model.evaluate(params, inputs)
        logits = outputs["output"]
        loss = backend.cross_entropy(logits, targets)
        grad = backend.cross_entropy_grad(logits, targets)
        output_gradients = {"output": grad}
        _, gradients = compiled_model.evaluate(params, inputs, output_gradients)
        return loss, gradients

    rng0 = np.random.default_rng(0)
    xb = rng0.normal(size=(12, 8)).astype(np.float32)
    yb = (xb[:, 0] > 0).astype(np.int64) + (xb[:, 1] > 0)
    p0 = plain.randomize_params(seed=0)
    history = []
    for _step in range(20):
        loss, gradients = compute_loss_and_grad(plain, p0, {"input": backend.array(xb)}, backend.array(yb))
        history.append(float(to_np(backend, loss).sum()))
        p0 = {k: p0[k] - 0.02 * gradients[k] for k in p0}
    assert history[-1] < history[0] * 0.8, history
    # The same training with the loss in the model (its CrossEntropy block, output_gradients=True):

    net = create_mlp([8, 16, 3])
    model = Model()
    model |= net(input="input", output="output")
    model |= ml.CrossEntropy(reduction="mean")(input="output", target="target", output=ml.IOKey("loss"))
    compiled_model = ml.compile(
        model, backend, shapes={"input": [12, 8], "target": [12]}, data_keys={"input", "target"}
    )
    params = compiled_model.randomize_params(seed=0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    data_loader = [(x, y)]
    try:
        import optax

        optimizer = optax.adam(learning_rate=0.05)
    except ImportError:  # the seeds tox env installs optax; the dev venv may not
        optimizer = _Adam(learning_rate=0.05)
    np_params = {k: to_np(backend, v) for k, v in params.items()}
    opt_state = optimizer.init(np_params)
    losses = []
    for _epoch in range(15):
        for x_batch, y_batch in data_loader:
            data = {"input": backend.array(x_batch), "target": backend.array(y_batch)}
            outputs, gradients = compiled_model.evaluate(params, data, output_gradients={"loss": backend.array(1.0)})
            losses.append(float(to_np(backend, outputs["loss"])))
            updates, opt_state = optimizer.update({k: to_np(backend, g) for k, g in gradients.items()}, opt_state)
            np_params = {k: np.asarray(np_params[k] + updates[k]) for k in np_params}
            params = {k: backend.array(v.astype(np.float32)) for k, v in np_params.items()}
    assert losses[-1] < losses[0] * 0.7, losses
    # backend.cross_entropy agrees with the model's loss (per-sample values, mean-reduced by the block)
    logits = compiled_model.evaluate(params, data)["output"]
    per_sample = to_np(backend, backend.cross_entropy(logits, backend.array(y)))
    np.testing.assert_allclose(
        per_sample.mean(), float(to_np(backend, compiled_model.evaluate(params, data)["loss"])), rtol=1e-4
    )


def test_000_jax_migration_block09_mithril_prng(backend_or_numpy):
    backend = backend_or_numpy("jax", seed=42)
    model = create_mlp([6, 8, 3])
    compiled_model = ml.compile(model, backend)
    params = compiled_model.randomize_params()
    again = ml.compile(model, backend_or_numpy("jax", seed=42)).randomize_params()
    for k in params:  # deterministic: same seed, same parameters
        np.testing.assert_array_equal(to_np(backend, params[k]), to_np(backend, again[k]))

    model = Model()
    model |= Linear(dimension=64)
    model += Relu()
    model += Dropout(p=0.5)(training=True)
    model += Linear(dimension=10)
    pm = ml.compile(model, backend, shapes={"input": [4, 6]})
    params = pm.randomize_params()
    x = backend.randn(4, 6)
    out = pm.evaluate(params, {"input": x})["output"]
    assert tuple(out.shape) == (4, 10)

    # The dropout mask: about half dropped, survivors scaled by 1/(1-p); training=False is the identity.
    drop = Model()
    drop |= Dropout(p=0.5)(training=True)
    pm = ml.compile(drop, backend, shapes={"input": [64, 64]})
    y = to_np(backend, pm.evaluate({}, {"input": backend.ones(64, 64)})["output"])
    assert set(np.unique(y)) <= {0.0, 2.0}
    assert 0.4 < (y == 0).mean() < 0.6
    ident = Model()
    ident |= Dropout(p=0.5)(training=False)
    pm = ml.compile(ident, backend, shapes={"input": [8, 8]})
    np.testing.assert_array_equal(
        to_np(backend, pm.evaluate({}, {"input": backend.ones(8, 8)})["output"]), np.ones((8, 8))
    )


@pytest.fixture
def fresh_registry():
    """The test registers an in-process primitive; forget it afterwards so other tests see only the
    installed plugins (a registry rebuilt from the entry points)."""
    from mithril.plugins.manager import reset

    yield
    reset()


def test_000_jax_migration_block11_mithril_custom_primitive(backend_or_numpy, fresh_registry):
    # As written: an `Operator` subclass with `compute`, and `@ml.register_primitive` decorators with a
    # `_grad` companion. Sizes kept; the model is then compiled and checked (not part of the block).
    from mithril.models import Operator

    backend = backend_or_numpy("jax", dtype=ml.float64)

    # --- the block ---
    class SinTimeX(Operator):
        def __init__(self):
            super().__init__()

        # Define the computation
        def compute(self, inputs):
            x = inputs["input"]
            return {"output": backend.sin(x) * x}

    # Register with gradient
    @ml.register_primitive("sin_times_x")
    def sin_times_x(backend, x):
        return backend.sin(x) * x

    @ml.register_primitive("sin_times_x_grad")
    def sin_times_x_grad(backend, x, grad):
        return grad * (backend.sin(x) + x * backend.cos(x))

    # Use in model
    model = Model()
    model |= Linear(dimension=64)
    model += Relu()
    model += SinTimeX()
    model += Linear(dimension=10)
    # --- end of the block ---

    pm = ml.compile(model, backend, shapes={"input": [4, 5]})
    params = pm.randomize_params(seed=1)
    x = backend.randn(4, 5)
    hidden = np.maximum(to_np(backend, x) @ to_np(backend, params["weight"]).T + to_np(backend, params["bias"]), 0)
    expected = (np.sin(hidden) * hidden) @ to_np(backend, params["weight_1"]).T + to_np(backend, params["bias_1"])
    np.testing.assert_allclose(to_np(backend, pm.evaluate(params, {"input": x})["output"]), expected, rtol=1e-10)
    if backend.supports_autograd:  # the subclass's compute is differentiated by the framework
        cot = backend.randn(4, 10)
        _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": cot})
        d_hidden = to_np(backend, cot) @ to_np(backend, params["weight_1"])
        np.testing.assert_allclose(
            to_np(backend, grads["bias"]),
            ((d_hidden * (np.sin(hidden) + hidden * np.cos(hidden))) * (hidden > 0)).sum(0),
            rtol=1e-9,
        )

    # The decorated primitive with its companion has gradients on NumPy too (the symbolic backend).
    numpy_backend = ml.NumpyBackend(dtype=ml.float64)
    decorated = Model()
    decorated |= Linear(dimension=6)
    decorated += Operator("sin_times_x")()
    decorated += Linear(dimension=3)
    pm = ml.compile(decorated, numpy_backend, shapes={"input": [4, 5]})
    params = pm.randomize_params(seed=1)
    x, cot = numpy_backend.randn(4, 5), numpy_backend.randn(4, 3)
    _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": cot})

    def loss(p):
        return float((pm.evaluate(p, {"input": x})["output"] * cot).sum())

    eps = 1e-6
    for key in ["weight", "bias"]:
        fd = np.zeros_like(params[key])
        for idx in np.ndindex(params[key].shape):
            plus, minus = dict(params), dict(params)
            plus[key], minus[key] = params[key].copy(), params[key].copy()
            plus[key][idx] += eps
            minus[key][idx] -= eps
            fd[idx] = (loss(plus) - loss(minus)) / (2 * eps)
        np.testing.assert_allclose(grads[key], fd, rtol=1e-5, atol=1e-7)


_BLOCK12 = """
import jax, mithril as ml, numpy as np
from mithril.models import Model, Linear
model = Model()
model |= Linear(dimension=3)(input_size=4)
# the block, as written (a fresh process: XLA_FLAGS are read when JAX starts)
jax.config.update('jax_disable_jit', False)
jax.config.update('jax_enable_x64', True)
backend = ml.JaxBackend(
    precision="float64",
    xla_flags=["--xla_gpu_autotune_level=4"]
)
compiled_model = ml.compile(
    model=model,
    backend=backend,
    jit=True,
    jit_options={
        "static_argnums": (0,),
        "donate_argnums": (0,),
        "xla_computation": True
    }
)
params = compiled_model.randomize_params(seed=0)
out = compiled_model.evaluate(params, {"input": np.ones((2, 4))})["output"]
import os
emit({"dtype": str(out.dtype), "flags": os.environ["XLA_FLAGS"], "hlo": "stablehlo" in compiled_model.lowered_text()})
"""


def test_000_jax_migration_block12_xla_options(backend_class_or_numpy):
    cls = backend_class_or_numpy("jax")
    if cls is not ml.JaxBackend:
        with pytest.raises(TypeError) as exc:
            cls(precision="float64", xla_flags=["--xla_gpu_autotune_level=4"])
        assert_option_rejected(exc, "precision", "xla_flags")
        return
    from mithril_testing.devices import run_with_jax_devices

    found = run_with_jax_devices(_BLOCK12, devices=1)
    assert found["dtype"] == "float64" and "--xla_gpu_autotune_level=4" in found["flags"] and found["hlo"], found
    # in this process JAX has started: the flags cannot take effect any more, and the error says why
    with pytest.raises(ValueError, match="already started"):
        cls(precision="float64", xla_flags=["--xla_gpu_autotune_level=4"])


def test_000_jax_migration_block13_tpu_usage(backend_class_or_numpy, backend_or_numpy):
    cls = backend_class_or_numpy("jax")
    with pytest.raises((TypeError, ValueError)) as exc:
        cls(device="tpu", device_mesh=(8,))
    assert_option_rejected(exc, "tpu", "device_mesh")
    with pytest.raises(TypeError) as exc:
        ml.compile(
            model=create_mlp([4, 3]),
            backend=backend_or_numpy("jax"),
            tpu_options={"replicate_inputs": True, "allow_spmd": True},
        )
    assert_option_rejected(exc, "tpu_options")


def test_000_jax_migration_block14_jax_optimizations(backend_class_or_numpy, backend_or_numpy):
    cls = backend_class_or_numpy("jax")
    with pytest.raises((TypeError, ValueError)) as exc:  # no TPU here: a clear error naming it
        cls(precision="bfloat16", device="tpu")
    assert_option_rejected(exc, "precision", "tpu")
    backend = backend_or_numpy("jax")
    if not isinstance(backend, ml.JaxBackend):
        return
    backend = cls(precision="bfloat16")  # the block as written, on the CPU
    compiled_model = ml.compile(
        model=create_mlp([4, 3]),
        backend=backend,
        jit=True,
        jit_options={"donate_argnums": (0,)},
        static_shapes=True,
        optimizations={"fusion": True, "buffer_reuse": True, "layout_optimization": True},
    )
    params = compiled_model.randomize_params(seed=0)
    with pytest.warns(UserWarning, match="donated buffers"):  # forwarded to jax.jit: no output can reuse the
        out = compiled_model.evaluate(params, {"input": backend.ones(2, 4)})["output"]  # params' buffers, XLA says so
    assert str(out.dtype) == "bfloat16" and tuple(out.shape) == (2, 3)


def test_000_jax_migration_block16_mithril_haiku_equivalent(backend_or_numpy):
    def create_mlp_784():
        model = Model()
        model |= Linear(dimension=512)
        model += Relu()
        model += Linear(dimension=256)
        model += Relu()
        model += Linear(dimension=10)
        return model

    backend = backend_or_numpy("jax")
    compiled_model = ml.compile(create_mlp_784(), backend, shapes={"input": [1, 784]})
    assert compiled_model.get_layer_names() == ["linear_0", "relu_0", "linear_1", "relu_1", "linear_2"]
    rng = np.random.default_rng(0)
    sizes = [784, 512, 256, 10]
    haiku_params = {
        f"mlp/~/linear_{i}": {
            "w": rng.normal(size=(m, n)).astype(np.float32) * 0.05,
            "b": rng.normal(size=n).astype(np.float32),
        }
        for i, (m, n) in enumerate(itertools.pairwise(sizes))
    }

    def import_haiku_params(haiku_params, compiled_model):
        # Haiku keeps w as [in, out]; Mithril's Linear.weight is [out, in] (PyTorch layout).
        mithril_params = {}
        for layer_idx in range(len(sizes) - 1):
            layer = haiku_params[f"mlp/~/linear_{layer_idx}"]
            suffix = f"_{layer_idx}" if layer_idx else ""  # short names in order of use: weight, weight_1, ...
            mithril_params[f"weight{suffix}"] = backend.array(layer["w"].T)
            mithril_params[f"bias{suffix}"] = backend.array(layer["b"])
        assert set(mithril_params) == set(compiled_model.randomize_params())
        return mithril_params

    params = import_haiku_params(haiku_params, compiled_model)
    x = rng.normal(size=(1, 784)).astype(np.float32)
    out = to_np(backend, compiled_model.evaluate(params, {"input": backend.array(x)})["output"])
    ref = x
    for i in range(3):
        layer = haiku_params[f"mlp/~/linear_{i}"]
        ref = ref @ layer["w"] + layer["b"]
        if i < 2:
            ref = np.maximum(ref, 0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
