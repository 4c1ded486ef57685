"""Seed 001 "JAX Backend": one test per Mithril code block (blocks numbered from 0 over all fenced blocks).
Block 00 is a bash install block (not Mithril code)."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from _seed_helpers import assert_option_rejected, check_against_numpy, construct_or_clear_error, forget_primitive, to_np
from mithril.models import Linear, Model
from mithril_testing.devices import run_with_jax_devices


def _linear_model(backend):
    model = Linear(dimension=64)
    compiled_model = ml.compile(model=model, backend=backend, shapes={"input": [4, 128]}, jit=True)
    return model, compiled_model


def test_001_jax_backend_block01_creating_backend(backend_or_numpy, backend_class_or_numpy):
    assert backend_or_numpy("jax", dtype=ml.float32).dtype == ml.float32
    assert backend_or_numpy("jax", dtype=ml.float64).dtype == ml.float64
    cls = backend_class_or_numpy("jax")
    construct_or_clear_error(cls, jit=True)  # JIT is an ml.compile option; a backend may also accept it
    result = construct_or_clear_error(cls, device="gpu")  # no GPU here: a clear error naming the device
    assert isinstance(result, ValueError) or str(getattr(result, "device", "")).startswith("gpu")


def test_001_jax_backend_block02_creating_tensors(backend_or_numpy):
    backend = backend_or_numpy("jax", dtype=ml.float32)
    assert tuple(backend.zeros(3, 4).shape) == (3, 4) and to_np(backend, backend.zeros(3, 4)).sum() == 0
    assert to_np(backend, backend.ones(3, 4)).sum() == 12
    assert tuple(backend.randn(3, 4).shape) == (3, 4)
    rand = to_np(backend, backend.rand(3, 4))
    assert rand.shape == (3, 4) and (rand >= 0).all() and (rand < 1).all()
    numpy_array = np.random.randn(3, 4)
    jax_tensor = backend.array(numpy_array)
    assert backend.dtype_of(jax_tensor) == ml.float32  # float64 data -> the backend's float dtype
    np.testing.assert_allclose(to_np(backend, jax_tensor), numpy_array, rtol=1e-6)
    np.testing.assert_array_equal(to_np(backend, backend.arange(10)), np.arange(10))
    assert backend.dtype_of(backend.ones(3, 4, dtype=ml.float16)) == ml.float16
    assert backend.dtype_of(backend.ones(3, 4, dtype=ml.int32)) == ml.int32


def test_001_jax_backend_block03_math_operations(backend_or_numpy):
    backend = backend_or_numpy("jax")
    a, b = backend.ones(3, 4), backend.ones(3, 4)
    np.testing.assert_array_equal(to_np(backend, backend.add(a, b)), np.full((3, 4), 2.0))
    np.testing.assert_array_equal(to_np(backend, backend.subtract(a, b)), np.zeros((3, 4)))
    np.testing.assert_array_equal(to_np(backend, backend.multiply(a, b)), np.ones((3, 4)))
    np.testing.assert_array_equal(to_np(backend, backend.divide(a, b)), np.ones((3, 4)))
    np.testing.assert_array_equal(
        to_np(backend, backend.matmul(backend.ones(3, 4), backend.ones(4, 5))), np.full((3, 5), 4.0)
    )
    assert float(to_np(backend, backend.sum(a))) == 12.0
    np.testing.assert_array_equal(to_np(backend, backend.sum(a, axis=0)), np.full(4, 3.0))
    assert float(to_np(backend, backend.mean(a))) == 1.0
    assert float(to_np(backend, backend.max(a))) == 1.0
    np.testing.assert_array_equal(to_np(backend, backend.relu(a)), np.ones((3, 4)))
    np.testing.assert_allclose(to_np(backend, backend.sigmoid(a)), np.full((3, 4), 1 / (1 + np.exp(-1))), rtol=1e-6)
    np.testing.assert_allclose(to_np(backend, backend.tanh(a)), np.full((3, 4), np.tanh(1)), rtol=1e-6)


def test_001_jax_backend_block04_shape_manipulation(backend_or_numpy):
    backend = backend_or_numpy("jax")
    assert tuple(backend.reshape(backend.ones(12), (3, 4)).shape) == (3, 4)
    assert tuple(backend.transpose(backend.ones(3, 4)).shape) == (4, 3)
    assert tuple(backend.concat([backend.ones(3, 4), backend.ones(3, 4)], axis=0).shape) == (6, 4)


def test_001_jax_backend_block05_compiling_models(backend_or_numpy):
    backend = backend_or_numpy("jax", dtype=ml.float32)
    _, compiled_model = _linear_model(backend)
    assert compiled_model.shapes["weight"] == [64, 128] and compiled_model.shapes["bias"] == [64]
    assert compiled_model.output_keys == ["output"]


def test_001_jax_backend_block06_running_inference(backend_or_numpy):
    backend = backend_or_numpy("jax", dtype=ml.float32)
    model, compiled_model = _linear_model(backend)
    params = compiled_model.randomize_params()
    inputs = {"input": backend.randn(4, 128)}
    output_tensor = compiled_model.evaluate(params, inputs)["output"]
    assert tuple(output_tensor.shape) == (4, 64)
    x, w, b = (to_np(backend, v) for v in (inputs["input"], params["weight"], params["bias"]))
    np.testing.assert_allclose(to_np(backend, output_tensor), x @ w.T + b, rtol=1e-4, atol=1e-5)
    check_against_numpy(model, backend, params, inputs, shapes={"input": [4, 128]})


def test_001_jax_backend_block07_computing_gradients(backend_or_numpy):
    backend = backend_or_numpy("jax", dtype=ml.float32)
    model, compiled_model = _linear_model(backend)
    params = compiled_model.randomize_params()
    inputs = {"input": backend.randn(4, 128)}
    outputs = compiled_model.evaluate(params, inputs)
    output_gradients = {"output": backend.ones_like(outputs["output"])}
    outputs, gradients = compiled_model.evaluate(params, inputs, output_gradients=output_gradients)
    weight_grad, bias_grad = gradients["weight"], gradients["bias"]
    np.testing.assert_allclose(to_np(backend, bias_grad), np.full(64, 4.0), rtol=1e-6)
    expected = np.ones((64, 4)) @ to_np(backend, inputs["input"])
    np.testing.assert_allclose(to_np(backend, weight_grad), expected, rtol=1e-4, atol=1e-5)
    check_against_numpy(model, backend, params, inputs, output_gradients, shapes={"input": [4, 128]})


def test_001_jax_backend_block08_enabling_jit(backend_or_numpy, backend_class_or_numpy):
    construct_or_clear_error(backend_class_or_numpy("jax"), jit=True)
    backend = backend_or_numpy("jax")
    compiled_model = ml.compile(model=Linear(dimension=3), backend=backend, jit=True)
    pm = ml.compile(model=Linear(dimension=3), backend=backend, shapes={"input": [2, 5]}, jit=True)
    out = pm.evaluate(pm.randomize_params(), {"input": backend.randn(2, 5)})["output"]
    assert tuple(out.shape) == (2, 3) and compiled_model.output_keys == ["output"]


def test_001_jax_backend_block09_device_mesh(backend_class_or_numpy):
    cls = backend_class_or_numpy("jax")
    for mesh in [(2,), (2, 2)]:  # one CPU device in this process: a clear error naming the mesh
        construct_or_clear_error(cls, device_mesh=mesh)
    if cls is ml.JaxBackend:  # as written, on simulated devices
        found = run_with_jax_devices(
            """
import mithril as ml
backend = ml.JaxBackend(device_mesh=(2,))
backend2 = ml.JaxBackend(device_mesh=(2, 2))
emit([backend.mesh.devices.shape, backend2.mesh.devices.shape, list(backend2.mesh.axis_names)])
""",
            devices=4,
        )
        assert found == [[2], [2, 2], ["mesh_0", "mesh_1"]]


_SHARDED = """
import mithril as ml, numpy as np
backend = ml.JaxBackend(device_mesh=(2,))
sharded_tensor = backend.ones(128, 64, device_mesh=(2,))
replicated = [s.data.shape for s in sharded_tensor.addressable_shards]
sharded_tensor = backend.ones(128, 64, device_mesh=(2,), tensor_split=(0,))
split = [s.data.shape for s in sharded_tensor.addressable_shards]
emit({"replicated": replicated, "split": split, "sum": float(backend.to_numpy(sharded_tensor).sum())})
"""


def test_001_jax_backend_block10_sharded_tensors(backend_or_numpy):
    backend = backend_or_numpy("jax")
    for kwargs in [{"device_mesh": (2,)}, {"device_mesh": (2,), "tensor_split": (0,)}]:
        with pytest.raises((TypeError, ValueError)) as exc:  # this backend has no mesh: a clear error
            backend.ones(128, 64, **kwargs)
        assert "device_mesh" in str(exc.value)
    if isinstance(backend, ml.JaxBackend):
        found = run_with_jax_devices(_SHARDED, devices=2)
        assert found == {"replicated": [[128, 64], [128, 64]], "split": [[64, 64], [64, 64]], "sum": 128 * 64}


def test_001_jax_backend_block11_parallel_evaluation(backend_or_numpy, backend_class_or_numpy):
    # Sizes reduced (1024/2048 -> 32/64); run as written on 2 simulated devices, compared with one device.
    model = ml.models.MLP(input_size=32, hidden_sizes=[64, 64], output_size=32)
    construct_or_clear_error(backend_class_or_numpy("jax"), device_mesh=(2,))
    backend = backend_or_numpy("jax")
    compiled_model = ml.compile(model, backend)
    params = compiled_model.randomize_params()
    assert tuple(params["weight0"].shape) == (64, 32)
    inputs = {"input": backend.ones(8, 32)}
    outputs = compiled_model.evaluate(params, inputs)
    assert tuple(outputs["output"].shape) == (8, 32)
    check_against_numpy(model, backend, params, inputs)
    if isinstance(backend, ml.JaxBackend):
        found = run_with_jax_devices(
            """
import mithril as ml, numpy as np
model = ml.models.MLP(input_size=32, hidden_sizes=[64, 64], output_size=32)
backend = ml.JaxBackend(device_mesh=(2,))
compiled_model = ml.compile(model, backend)
params = compiled_model.randomize_params(seed=0)
batch_size = 8
inputs = {"input": backend.ones(batch_size, 32, device_mesh=(2,), tensor_split=(0,))}
outputs = compiled_model.evaluate(params, inputs)
single = ml.compile(model, ml.JaxBackend())
expected = single.evaluate(single.randomize_params(seed=0), {"input": np.ones((8, 32), np.float32)})["output"]
emit({"error": float(np.abs(backend.to_numpy(outputs["output"]) - np.asarray(expected)).max()),
      "shards": [s.data.shape for s in outputs["output"].addressable_shards]})
""",
            devices=2,
        )
        assert found["error"] <= 1e-5 and found["shards"] == [[4, 32], [4, 32]], found


def test_001_jax_backend_block12_custom_jax_operations(backend_or_numpy):
    backend = backend_or_numpy("jax")
    if isinstance(backend, ml.JaxBackend):  # the registration, as written (a per-backend implementation)
        import jax.numpy as jnp

        @backend.register_op("gelu_seed_tanh")  # "gelu" is a built-in primitive name; the seed's op under its own
        def gelu_jax(x):
            return 0.5 * x * (1 + jnp.tanh(jnp.sqrt(2 / jnp.pi) * (x + 0.044715 * x**3)))

        custom = Model()
        custom |= Linear(dimension=16)(input="input", output="hidden")
        custom += ml.Operator("gelu_seed_tanh")(input="hidden", output="hidden_act")  # the seed's `"gelu"(...)` is
        custom += Linear(dimension=10)(input="hidden_act", output="output")  # a str call, a Python TypeError
        pm_custom = ml.compile(custom, backend, shapes={"input": [4, 8]})
    with pytest.raises(TypeError, match="not callable"):
        op = "gelu"
        op(input="hidden", output="hidden_act")  # the seed's string call
    # Also the built-in: the seed's tanh formula is gelu(approximate=True).
    model = Model()
    model |= Linear(dimension=16)(input="input", output="hidden")
    model += ml.Gelu(approximate=True)(input="hidden", output="hidden_act")
    model += Linear(dimension=10)(input="hidden_act", output="output")
    pm = ml.compile(model, backend, shapes={"input": [4, 8]})
    params = pm.randomize_params()
    x = backend.randn(4, 8)
    outs = pm.evaluate(params, {"input": x})
    h = to_np(backend, outs["hidden"])
    expected = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    np.testing.assert_allclose(to_np(backend, outs["hidden_act"]), expected, rtol=1e-4, atol=1e-6)
    assert tuple(outs["output"].shape) == (4, 10)
    check_against_numpy(model, backend, params, {"input": x}, {"output": backend.ones(4, 10)}, shapes={"input": [4, 8]})
    if isinstance(backend, ml.JaxBackend):
        custom_outs, custom_grads = pm_custom.evaluate(
            params, {"input": x}, output_gradients={"output": backend.ones(4, 10)}
        )
        np.testing.assert_allclose(to_np(backend, custom_outs["hidden_act"]), expected, rtol=1e-4, atol=1e-6)
        _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": backend.ones(4, 10)})
        for k in grads:
            np.testing.assert_allclose(to_np(backend, custom_grads[k]), to_np(backend, grads[k]), rtol=1e-4, atol=1e-5)
        forget_primitive("gelu_seed_tanh")  # registered in this process only for this block


def test_001_jax_backend_block13_random_numbers(backend_or_numpy):
    backend = backend_or_numpy("jax")
    backend.set_seed(42)
    if hasattr(type(backend), "get_random_key"):  # the JAX backend exposes its PRNG keys
        key = backend.get_random_key()
        _new_key, subkey = backend.split_key(key)
        random_numbers = backend.random_normal(subkey, shape=(3, 4))
        assert tuple(random_numbers.shape) == (3, 4)
        backend.set_seed(42)
    else:  # NumPy fallback: no keys (DESIGN section 5: the backend manages randomness); set_seed + randn
        assert not hasattr(type(backend), "split_key")
    first = to_np(backend, backend.randn(3, 4))
    backend.set_seed(42)
    np.testing.assert_array_equal(to_np(backend, backend.randn(3, 4)), first)


def test_001_jax_backend_block14_jax_specific_options(backend_class_or_numpy):
    cls = backend_class_or_numpy("jax")
    if cls is not ml.JaxBackend:
        with pytest.raises((TypeError, ValueError)) as exc:
            cls(precision="highest", debug=True, platform="gpu", jit=True)
        assert_option_rejected(exc, "precision", "debug", "platform", "jit")
        return
    import jax

    options = {"precision": jax.lax.Precision.HIGHEST, "debug": True, "platform": "gpu", "jit": True}
    result = construct_or_clear_error(cls, **options)  # as written: no GPU here, a clear error naming it
    backend = result if not isinstance(result, Exception) else cls(**{**options, "platform": "cpu"})
    assert backend.matmul_precision == "highest" and backend.debug and backend.jit_enabled


def test_001_jax_backend_block15_optax(backend_or_numpy):
    # optax -> plain gradient descent when optax is missing; X_batch/y_batch/num_epochs/compute_loss_gradient
    # are left undefined by the seed (here: a regression task and the squared-error gradient).
    backend = backend_or_numpy("jax", dtype=ml.float32)
    model = ml.models.MLP(input_size=20, hidden_sizes=[16, 8], output_size=3)
    compiled_model = ml.compile(model, backend)
    params = compiled_model.randomize_params(seed=3)
    rng = np.random.default_rng(0)
    X_batch = rng.normal(size=(16, 20)).astype(np.float32)
    y_batch = X_batch[:, :3] * 0.5

    def compute_loss_gradient(out, target):
        return 2 * (to_np(backend, out) - target) / target.size

    try:
        import optax

        optimizer = optax.adam(learning_rate=0.01)
    except ImportError:
        optimizer = None
    opt_state = optimizer.init(params) if optimizer else None
    losses = []
    for _epoch in range(30):
        inputs = {"input": backend.array(X_batch)}
        outputs = compiled_model.evaluate(params, inputs)
        losses.append(float(((to_np(backend, outputs["output"]) - y_batch) ** 2).mean()))
        outputs, gradients = compiled_model.evaluate(
            params,
            inputs,
            output_gradients={"output": backend.array(compute_loss_gradient(outputs["output"], y_batch))},
        )
        if optimizer:
            updates, opt_state = optimizer.update(gradients, opt_state)
            params = {k: backend.array(np.asarray(optax.apply_updates(params, updates)[k])) for k in params}
        else:
            params = {k: params[k] - 0.1 * gradients[k] for k in params}
    assert losses[-1] < losses[0]


def test_001_jax_backend_block16_float16(backend_or_numpy):
    backend = backend_or_numpy("jax", dtype=ml.float16)
    assert backend.dtype == ml.float16
    pm = ml.compile(Linear(dimension=4), backend, shapes={"input": [2, 8]})
    out = pm.evaluate(pm.randomize_params(), {"input": backend.randn(2, 8)})["output"]
    assert backend.dtype_of(out) == ml.float16


def test_001_jax_backend_block17_verbose(backend_or_numpy, caplog):
    model, backend = Linear(dimension=4), backend_or_numpy("jax")
    with caplog.at_level("INFO", logger="mithril.compile"):
        compiled_model = ml.compile(model, backend, verbose=True)  # as written
    for stage in ("flatten", "passes", "shapes", "codegen", "jit"):
        assert stage in caplog.text
    assert "shape output:" in caplog.text and compiled_model.output_keys == ["output"]


def test_001_jax_backend_block18_jit_enabled(backend_or_numpy):
    backend = backend_or_numpy("jax")
    pm = ml.compile(Linear(dimension=4), backend, jit=True, shapes={"input": [2, 3]})
    assert tuple(pm.evaluate(pm.randomize_params(), {"input": backend.ones(2, 3)})["output"].shape) == (2, 4)


def test_001_jax_backend_block19_device_placement(backend_class_or_numpy):
    try:
        import jax

        assert len(jax.devices()) >= 1
    except ImportError:
        pass
    result = construct_or_clear_error(backend_class_or_numpy("jax"), device="gpu:0")
    assert isinstance(result, ValueError) or str(result.device).startswith("gpu")
