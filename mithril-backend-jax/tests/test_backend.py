"""JaxBackend beyond the conformance suite: gradients against the NumPy backend on whole models (jitted),
float64/float32 coexistence, the PRNG, options and devices, and an optax training loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mithril as ml
import numpy as np
import pytest
from mithril.models import AvgPool2D, Conv2d, Dropout, Flatten, Linear, MaxPool2D, Model, Relu

from mithril_backend_jax import JaxBackend


def mlp() -> Model:
    model = Model()
    model |= Linear(dimension=16)(input="input")
    model += Relu()
    model += Linear(dimension=8)
    model += Relu()
    model += Linear(dimension=3)
    return model


def cnn() -> Model:
    model = Model()
    model |= Conv2d(in_channels=3, out_channels=4, kernel_size=3, padding="same")
    model += Relu()
    model += MaxPool2D(kernel_size=2, stride=2)
    model += Conv2d(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1, groups=2)
    model += Relu()
    model += AvgPool2D(kernel_size=3, stride=1, padding=1, count_include_pad=False)
    model += Flatten()
    model += Linear(dimension=5)
    return model


def dropout_mlp() -> Model:
    model = Model()
    model |= Linear(dimension=32)(input="input")
    model += Dropout(p=0.5)
    model += Linear(dimension=2)
    return model


# -- plugin --------------------------------------------------------------------------------------
def test_backend_resolves_through_the_registry() -> None:
    assert ml.JaxBackend is JaxBackend


def test_every_registered_primitive_is_implemented() -> None:
    from mithril.plugins import registry
    from mithril_testing.conformance import required_primitives

    from mithril_backend_jax import ops

    required = required_primitives(ml.JaxBackend())  # all but those with a decomposition (lstm_layer)
    missing = required - set(ops.TABLE) - set(registry().impls("*"))
    assert not missing
    assert not set(ops.TABLE) - set(registry().primitives)


# -- gradients against the NumPy backend ------------------------------------------------------------
@pytest.mark.parametrize(("build", "shape"), [(mlp, [4, 7]), (cnn, [2, 3, 8, 8])], ids=["mlp", "cnn"])
@pytest.mark.parametrize("dtype", [ml.float64, ml.float32], ids=["float64", "float32"])
def test_vjp_matches_numpy_backend(build, shape, dtype) -> None:
    pytest.importorskip("mithril_backend_numpy")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    results = []
    for backend in (ml.NumpyBackend(dtype=dtype), JaxBackend(dtype=dtype)):
        compiled = ml.compile(build(), backend, shapes={"input": shape}, jit=True)
        params = compiled.randomize_params(seed=7)
        cotangent = backend.array(np.random.default_rng(1).standard_normal(compiled.shapes["output"]))
        outputs, grads = compiled.evaluate(params, {"input": backend.array(x)}, output_gradients={"output": cotangent})
        results.append((backend, outputs, grads))
    (nb, n_out, n_grads), (jb, j_out, j_grads) = results
    tol = 1e-10 if dtype is ml.float64 else 2e-5
    np.testing.assert_allclose(jb.to_numpy(j_out["output"]), nb.to_numpy(n_out["output"]), rtol=tol, atol=tol)
    assert set(j_grads) == set(n_grads)
    for key in n_grads:
        assert j_grads[key].dtype == np.dtype(dtype.value)
        np.testing.assert_allclose(
            jb.to_numpy(j_grads[key]), nb.to_numpy(n_grads[key]), rtol=tol, atol=tol, err_msg=key
        )


def test_int_outputs_get_no_cotangent() -> None:
    from mithril.models import Primitive

    model = Model()
    model |= Linear(dimension=3)(input="input", output="logits")
    model |= Primitive("argmax", axis=1)(input=model.logits, output="label")
    backend = JaxBackend(dtype=ml.float64)
    compiled = ml.compile(model, backend, shapes={"input": [4, 2]})
    params = compiled.randomize_params(seed=0)
    outputs, grads = compiled.evaluate(
        params, {"input": backend.ones(4, 2)}, output_gradients={"logits": backend.ones(4, 3)}
    )
    assert outputs["label"].dtype == np.int64
    np.testing.assert_allclose(backend.to_numpy(grads["weight"]), np.full((3, 2), 4.0))


# -- precision --------------------------------------------------------------------------------------
def test_float64_and_float32_backends_coexist() -> None:
    b64 = JaxBackend(dtype=ml.float64)
    b32 = JaxBackend(dtype=ml.float32)
    assert not jax.config.jax_enable_x64  # never flipped globally
    pm64 = ml.compile(mlp(), b64, shapes={"input": [2, 7]})
    pm32 = ml.compile(mlp(), b32, shapes={"input": [2, 7]})
    x = np.random.default_rng(1).standard_normal((2, 7))
    out64 = pm64.evaluate(pm64.randomize_params(seed=1), {"input": x})["output"]
    out32 = pm32.evaluate(pm32.randomize_params(seed=1), {"input": x})["output"]
    assert out64.dtype == np.float64 and out32.dtype == np.float32
    _, g32 = pm32.evaluate(pm32.get_parameters(), {"input": x}, output_gradients={"output": np.ones((2, 3))})
    assert all(g.dtype == np.float32 for g in g32.values())
    assert b32.array([1, 2]).dtype == np.int32 and b64.array([1, 2]).dtype == np.int64
    assert b32.arange(3.0).dtype == np.float32 and b64.arange(3.0).dtype == np.float64
    np.testing.assert_allclose(np.asarray(out32), np.asarray(out64), rtol=1e-5, atol=1e-5)
    # float64 arithmetic really is float64 (1 + 1e-12 is not representable in float32)
    tiny = b64.add(b64.array(1.0), b64.array(1e-12))
    assert b64.to_numpy(tiny) - 1.0 == pytest.approx(1e-12, rel=1e-3)
    assert not jax.config.jax_enable_x64
    with pytest.raises(TypeError, match="float64"):
        b32.native_dtype(ml.float64)


@pytest.mark.parametrize("dtype", [ml.float16, ml.bfloat16])
def test_half_precision(dtype) -> None:
    backend = JaxBackend(dtype=dtype)
    compiled = ml.compile(mlp(), backend, shapes={"input": [2, 7]})
    params = compiled.randomize_params(seed=0)
    outputs, grads = compiled.evaluate(
        params, {"input": np.ones((2, 7))}, output_gradients={"output": backend.ones(2, 3)}
    )
    assert outputs["output"].dtype == jnp.dtype(dtype.value)
    assert all(g.dtype == jnp.dtype(dtype.value) for g in grads.values())


# -- PRNG -------------------------------------------------------------------------------------------
def _masks(seed: int, calls: int = 2, jit: bool = True) -> list[np.ndarray]:
    backend = JaxBackend(seed=seed, jit=jit)
    compiled = ml.compile(dropout_mlp(), backend, shapes={"input": [8, 4]})
    params = compiled.randomize_params(seed=0)
    x = backend.ones(8, 4)
    return [np.asarray(compiled.evaluate(params, {"input": x})["output"]) for _ in range(calls)]


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "eager"])
def test_dropout_is_fresh_per_call_and_reproducible(jit) -> None:
    first, second = _masks(seed=5, jit=jit)
    assert not np.array_equal(first, second), "two evaluate calls drew the same dropout mask"
    again = _masks(seed=5, jit=jit)
    np.testing.assert_array_equal(first, again[0])
    np.testing.assert_array_equal(second, again[1])
    other = _masks(seed=6, calls=1, jit=jit)
    assert not np.array_equal(first, other[0])


def test_dropout_mask_is_shared_by_forward_and_backward() -> None:
    backend = JaxBackend(seed=0)
    model = Model()
    model |= Dropout(p=0.5)(input="input")
    compiled = ml.compile(model, backend, shapes={"input": [64]}, trainable_keys={"input"})
    x = backend.ones(64)
    outputs, grads = compiled.evaluate({"input": x}, output_gradients={"output": backend.ones(64)})
    np.testing.assert_array_equal(np.asarray(outputs["output"]), np.asarray(grads["input"]))


def test_key_api() -> None:
    backend = JaxBackend(seed=42)
    key = backend.get_random_key()
    _, subkey = backend.split_key(key)
    sample = backend.random_normal(subkey, (3, 4))
    assert sample.shape == (3, 4) and sample.dtype == np.float32
    assert not np.array_equal(np.asarray(backend.get_random_key()), np.asarray(key))  # the state advances
    backend.set_seed(42)
    np.testing.assert_array_equal(np.asarray(backend.get_random_key()), np.asarray(key))
    a, b = JaxBackend(seed=1).randn(5), JaxBackend(seed=1).randn(5)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    r = backend.randint(0, 3, (100,))
    assert r.dtype == np.int32 and set(np.unique(np.asarray(r))) == {0, 1, 2}


# -- options and devices ----------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["colour", "use_ane"])  # precision=, xla_flags=, ...: tests/test_manual_options.py
def test_unknown_options_are_refused(option) -> None:
    with pytest.raises(TypeError, match=r"accepted options: dtype, device, seed, jit, device_mesh"):
        JaxBackend(**{option: 1})


def test_missing_device_names_the_available_ones() -> None:
    platforms = {d.platform for d in jax.devices()}
    for device in ("gpu", "tpu"):
        if device in platforms:
            continue
        with pytest.raises(ValueError, match=r"not available; JAX sees: cpu:0"):
            JaxBackend(device=device)
    with pytest.raises(ValueError, match="unknown device"):
        JaxBackend(device="quantum")


def test_device_mesh() -> None:
    count = len(jax.devices())
    with pytest.raises(ValueError, match=rf"needs {count * 4} .* only {count} are available"):
        JaxBackend(device_mesh=(count * 2, 2))
    backend = JaxBackend(device_mesh=(count,))
    assert isinstance(backend.mesh, jax.sharding.Mesh)
    assert backend.mesh.shape == {"mesh_0": count}
    compiled = ml.compile(mlp(), backend, shapes={"input": [count * 2, 7]})
    params = compiled.randomize_params(seed=0)
    x = backend.shard(backend.ones(count * 2, 7), "mesh_0")
    assert compiled.evaluate(params, {"input": x})["output"].shape == (count * 2, 3)


def test_jit_option() -> None:
    eager = JaxBackend(jit=False)
    fn = lambda x: x + 1  # noqa: E731
    assert eager.jit(fn)(1) == 2
    jitted = JaxBackend().jit(lambda x: x * 2)
    assert float(jitted(jnp.float32(3.0))) == 6.0
    compiled = ml.compile(mlp(), eager, shapes={"input": [2, 7]}, jit=True)
    params = compiled.randomize_params(seed=0)
    assert compiled.evaluate(params, {"input": np.ones((2, 7))})["output"].shape == (2, 3)


# -- optax ------------------------------------------------------------------------------------------
def test_optax_training_loop_decreases_the_loss() -> None:
    optax = pytest.importorskip("optax")
    backend = JaxBackend(dtype=ml.float32, seed=0)
    compiled = ml.compile(mlp(), backend, shapes={"input": [32, 7]})
    params = compiled.randomize_params()
    optimizer = optax.adam(learning_rate=0.01)
    opt_state = optimizer.init(params)
    rng = np.random.default_rng(0)
    x = backend.array(rng.standard_normal((32, 7)))
    y = backend.array(rng.standard_normal((32, 3)))
    losses = []
    for _ in range(60):
        prediction = compiled.evaluate(params, {"input": x})["output"]
        losses.append(float(jnp.mean((prediction - y) ** 2)))
        _, gradients = compiled.evaluate(
            params, {"input": x}, output_gradients={"output": 2 * (prediction - y) / y.size}
        )
        updates, opt_state = optimizer.update(gradients, opt_state)
        params = optax.apply_updates(params, updates)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert all(v.dtype == np.float32 for v in params.values())
