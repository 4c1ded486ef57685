"""The manual's options that map to real features (issue 12): ``ml.compile(verbose=, jit_options=,
static_shapes=, optimizations=)``, the JAX/PyTorch/MLX constructor options, and the backend helpers
(``grad``, ``reduce_sum``, ``random_normal``, ``cross_entropy_grad``, ``register_op``,
``@ml.register_primitive``). Each test checks the behaviour, not only that the option is accepted."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError
from mithril.models import Linear, Model, Primitive, Relu

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")


def _linear(backend, jit=True, **options):
    pm = ml.compile(Linear(dimension=4), backend, shapes={"input": [2, 3]}, jit=jit, **options)
    return pm, pm.randomize_params(seed=0), {"input": backend.array(np.arange(6.0).reshape(2, 3))}


# -- ml.compile options ---------------------------------------------------------------------------
def test_compile_verbose_logs_each_stage_with_times_and_shapes(caplog):
    backend = ml.JaxBackend()
    with caplog.at_level(logging.INFO, logger="mithril.compile"):
        pm, params, data = _linear(backend, verbose=True)
        pm.evaluate(params, data)
    text = caplog.text
    for stage in ("flatten", "passes", "shapes", "codegen", "jit", "total"):
        assert f": {stage}" in text, stage
    assert "shape weight: [4, 3]" in text and "shape output: [2, 4]" in text
    assert "first call" in text  # the JIT's trace + compile time at the first evaluate
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mithril.compile"):
        _linear(backend)  # silent by default
    assert caplog.text == ""


def test_compile_verbose_shows_on_stderr_without_logging_configured():
    code = (
        "import mithril as ml; from mithril.models import Linear; ml.compile(Linear(dimension=2), "
        "ml.NumpyBackend(), shapes={'input': [1, 3]}, verbose=True)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"MITHRIL_DISABLE_PLUGINS": "jax,torch,mlx", "PATH": ""},
    )
    assert "codegen" in result.stderr and "shape output: [1, 2]" in result.stderr


def test_jit_options_donate_argnums_reuses_the_input_buffer():
    backend = ml.JaxBackend()
    model = Model()
    model |= Relu()(input="input", output="output")
    pm = ml.compile(
        model, backend, shapes={"input": [8, 8]}, jit=True, inference=True, jit_options={"donate_argnums": (1,)}
    )
    x = backend.array(np.ones((8, 8)))
    pm.evaluate({}, {"input": x})
    assert x.is_deleted()  # donated: XLA wrote the output into the input's buffer
    plain = ml.compile(model, backend, shapes={"input": [8, 8]}, jit=True, inference=True)
    y = backend.array(np.ones((8, 8)))
    plain.evaluate({}, {"input": y})
    assert not y.is_deleted()


def test_jit_options_static_argnums_and_lowered_text():
    backend = ml.JaxBackend()
    pm, params, data = _linear(backend, jit_options={"static_argnums": (0,), "xla_computation": True})
    out = pm.evaluate(params, data)["output"]
    w, b = (np.asarray(params[k]) for k in ("weight", "bias"))
    np.testing.assert_allclose(np.asarray(out), np.arange(6.0).reshape(2, 3) @ w.T + b, rtol=1e-5)
    text = pm.lowered_text()  # kept at the first call (xla_computation=True)
    assert (
        "stablehlo" in text and "tensor<4x3xf32>" not in text.split("@main(")[1].split(")")[0]
    )  # params are constants
    new = {k: v * 2 for k, v in params.items()}  # another static dict: recompiled, new constants
    np.testing.assert_allclose(np.asarray(pm.evaluate(new, data)["output"]), 2 * np.asarray(out), rtol=1e-5)
    dynamic, _, _ = _linear(backend)
    assert "tensor<4x3xf32>" in dynamic.lowered_text(params, data)  # weights are arguments there
    with pytest.raises(ArgumentError, match="not options of JaxBackend's JIT"):
        _linear(backend, jit_options={"donate": True})


def test_static_shapes_and_optimizations_map_to_the_compiler():
    backend = ml.JaxBackend()
    pm, params, data = _linear(
        backend, static_shapes=True, optimizations={"fusion": True, "buffer_reuse": True, "layout_optimization": True}
    )
    assert tuple(pm.evaluate(params, data)["output"].shape) == (2, 4)
    with pytest.raises(ArgumentError, match="one program per input shape"):
        _linear(backend, static_shapes=False)
    with pytest.raises(ArgumentError, match="always does operator fusion"):
        _linear(backend, optimizations={"fusion": False})
    with pytest.raises(ArgumentError, match="has no JIT compiler"):
        _linear(ml.NumpyBackend(), static_shapes=True)
    assert ml.TorchBackend().shape_jit_options(False) == {"dynamic": True}
    # Mithril's own passes: CSE off keeps the duplicated computation
    model = Model()
    model |= Relu()(input="input", output="a")
    model |= Relu()(input="input", output="b")
    on = ml.compile(model, ml.NumpyBackend(), shapes={"input": [2]})
    off = ml.compile(model, ml.NumpyBackend(), shapes={"input": [2]}, optimizations={"cse": False})
    assert (on.primitive_count, off.primitive_count) == (1, 2)


# -- backend constructor options ------------------------------------------------------------------
def test_jax_precision_dtype_and_matmul_precision():
    assert ml.JaxBackend(precision="float64").dtype == ml.float64
    assert ml.JaxBackend(precision="bfloat16").dtype == ml.bfloat16
    backend = ml.JaxBackend(precision=jax.lax.Precision.HIGHEST)
    pm, params, data = _linear(backend)
    assert "HIGHEST" in pm.lowered_text(params, data)
    pm, params, data = _linear(ml.JaxBackend())
    assert "HIGHEST" not in pm.lowered_text(params, data)
    with pytest.raises(ArgumentError, match="matmul precision"):
        ml.JaxBackend(precision="double-ish")


def test_jax_debug_checks_nans_platform_and_jit_compile():
    model = Model()
    model |= ml.models.Log()(input="input", output="output")
    data = {"input": np.array([-1.0, 1.0], np.float32)}
    quiet = ml.compile(model, ml.JaxBackend(), shapes={"input": [2]}, inference=True)
    assert np.isnan(np.asarray(quiet.evaluate({}, data)["output"])[0])
    checked = ml.compile(model, ml.JaxBackend(debug=True), shapes={"input": [2]}, inference=True)
    with pytest.raises(FloatingPointError, match="nan"):
        checked.evaluate({}, data)
    assert ml.JaxBackend(platform="cpu").jax_device.platform == "cpu"
    with pytest.raises(ArgumentError, match="not available"):
        ml.JaxBackend(platform="tpu")
    assert ml.JaxBackend(jit_compile=False).jit_enabled is False


def test_jax_xla_flags_before_and_after_start():
    code = textwrap.dedent(
        """
        import mithril as ml, jax
        backend = ml.JaxBackend(xla_flags=["--xla_force_host_platform_device_count=3"])
        print(len(jax.devices("cpu")))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "3"
    jax.devices()  # started in this process: new flags are an error naming why
    with pytest.raises(ArgumentError, match="already started"):
        ml.JaxBackend(xla_flags=["--xla_force_host_platform_device_count=5"])


def test_jax_set_platform_and_enable_x64():
    backend = ml.JaxBackend()
    backend.enable_x64()
    assert backend.dtype == ml.float64 and str(backend.array([1.5]).dtype) == "float64"
    backend.set_platform("cpu")
    assert backend.device == "cpu"
    with pytest.raises(ArgumentError, match="not available"):
        backend.set_platform("gpu")


def test_torch_use_amp_and_compile():
    backend = ml.TorchBackend(use_amp=True)
    pm, params, data = _linear(backend, jit=False)
    outputs, grads = pm.evaluate(params, data, output_gradients={"output": backend.ones(2, 4)})
    assert outputs["output"].dtype == torch.bfloat16  # the matmul ran under torch.autocast
    assert grads["weight"].dtype == torch.float32  # parameters and gradients keep the backend dtype
    expected = np.ones((4, 2)) @ np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(grads["weight"].numpy(), expected, rtol=1e-2)
    assert ml.TorchBackend(compile=True).jit_by_default is True and ml.TorchBackend().jit_by_default is False
    compiled = ml.compile(
        Linear(dimension=4), ml.TorchBackend(compile=True), shapes={"input": [2, 3]}, jit_options={"backend": "eager"}
    )
    assert compiled.jit_options == {"backend": "eager"}
    w, b = params["weight"].numpy(), params["bias"].numpy()
    want = np.arange(6.0).reshape(2, 3) @ w.T + b
    np.testing.assert_allclose(compiled.evaluate(params, data)["output"].numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pm.evaluate(params, data)["output"].float().numpy(), want, rtol=2e-2, atol=2e-2)


def test_mlx_memory_limit_graph_precision_seed():
    mx = pytest.importorskip("mlx.core")
    backend = ml.MlxBackend(memory_limit="1GB", random_seed=7, use_graph=False)
    assert mx.set_memory_limit(backend.previous_memory_limit) == 2**30  # set, and restored here
    assert backend.seed == 7 and backend.jit_by_default is False and ml.MlxBackend(use_graph=True).jit_by_default
    np.testing.assert_array_equal(
        np.array(ml.MlxBackend(random_seed=7).randn(3)), np.array(ml.MlxBackend(seed=7).randn(3))
    )
    # float16 storage, float32 compute: 300**2 overflows float16 but not float32
    model = Model()
    model |= ml.models.Square()(input="input", output="sq")
    model |= Linear(dimension=1, use_bias=False)(input="sq", output="output")  # times 1e-3: back in float16 range
    for compute, finite in (("float32", True), (None, False)):
        b = ml.MlxBackend(dtype="float16", compute_precision=compute)
        pm = ml.compile(model, b, shapes={"input": [1, 1]})
        out = pm.evaluate({"weight": b.array([[1e-3]])}, {"input": b.array([[300.0]])})["output"]
        assert out.dtype == mx.float16 and bool(np.isfinite(np.array(out)).all()) is finite
    ml.MlxBackend(auto_free_tensors=True)
    assert mx.set_cache_limit(2**30) == 0  # freed buffers are not cached
    with pytest.raises(ArgumentError, match="Apple Neural Engine"):
        ml.MlxBackend(use_ane=True)


# -- backend helpers -------------------------------------------------------------------------------
AUTOGRAD = ["jax", "torch", "mlx"]


def _backend(name):
    return {"numpy": ml.NumpyBackend, "jax": ml.JaxBackend, "torch": ml.TorchBackend, "mlx": ml.MlxBackend}[name]()


@pytest.mark.parametrize("name", AUTOGRAD)
def test_backend_grad(name):
    backend = _backend(name)
    grad_f = backend.grad(lambda x: backend.reduce_sum(backend.power(x, 2)))
    np.testing.assert_allclose(backend.to_numpy(grad_f(backend.tensor([1.0, 2.0, 3.0]))), [2.0, 4.0, 6.0])
    both = backend.grad(lambda x, y: backend.reduce_sum(x * y), argnums=(0, 1))
    gx, gy = both(backend.tensor([1.0, 2.0]), backend.tensor([3.0, 4.0]))
    np.testing.assert_allclose(backend.to_numpy(gx), [3.0, 4.0])
    np.testing.assert_allclose(backend.to_numpy(gy), [1.0, 2.0])


def test_numpy_grad_is_refused_naming_autograd():
    with pytest.raises(ml.errors.UnsupportedPrimitiveError, match="no autograd"):
        ml.NumpyBackend().grad(lambda x: x)


@pytest.mark.parametrize("name", ["numpy", *AUTOGRAD])
def test_reductions_random_normal_cross_entropy_grad(name):
    backend = _backend(name)
    a = backend.array(np.arange(6.0).reshape(2, 3))
    assert float(backend.to_numpy(backend.reduce_sum(a))) == 15.0
    np.testing.assert_allclose(backend.to_numpy(backend.reduce_mean(a, axis=0)), [1.5, 2.5, 3.5])
    backend.set_seed(0)
    draw = backend.to_numpy(backend.random_normal(shape=(2000,), mean=3.0, stddev=0.5))
    assert draw.shape == (2000,) and abs(draw.mean() - 3.0) < 0.05 and abs(draw.std() - 0.5) < 0.05
    assert backend.shape(a) is not None and tuple(backend.shape_of(a)) == (2, 3)
    logits, targets = backend.array(np.array([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]])), backend.array(np.array([1, 2]))
    grad = backend.to_numpy(backend.cross_entropy_grad(logits, targets))
    x = np.array([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]])
    expected = np.exp(x) / np.exp(x).sum(1, keepdims=True) - np.eye(3)[[1, 2]]
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)
    loss = backend.to_numpy(backend.cross_entropy(logits, targets))
    np.testing.assert_allclose(loss, -np.log((np.exp(x) / np.exp(x).sum(1, keepdims=True))[[0, 1], [1, 2]]), rtol=1e-5)


@pytest.mark.parametrize("name", ["numpy", *AUTOGRAD])
def test_register_op_is_used_by_name_in_a_model(name):
    backend = _backend(name)
    op = f"cube_plus_one_{name}"

    @backend.register_op(op)
    def cube_plus_one(x):
        return x * x * x + 1

    model = Model()
    model |= Primitive(op)(input="input", output="output")
    pm = ml.compile(model, backend, shapes={"input": [3]}, inference=True)
    out = pm.evaluate({}, {"input": backend.array(np.array([0.0, 1.0, 2.0]))})["output"]
    np.testing.assert_allclose(backend.to_numpy(out), [1.0, 2.0, 9.0])
    other = _backend(name)  # registered on that instance only
    try:
        with pytest.raises(ml.errors.UnsupportedPrimitiveError):
            ml.compile(model, other, shapes={"input": [3]}, inference=True)
    finally:
        _forget(op)


def _forget(*names):
    """In-process primitives of these tests leave the registry afterwards (other tests check that every
    registered primitive is implemented)."""
    from mithril.plugins import registry

    reg = registry()
    for name in names:
        reg.primitives.pop(name, None)
        reg.primitive_owner.pop(name, None)
        reg.gradients.pop(name.removesuffix("_grad"), None) if name.endswith("_grad") else None


def test_register_primitive_decorator_with_grad_companion_on_every_backend():
    @ml.register_primitive("manual_sin_times_x")
    def sin_times_x(backend, x):
        return backend.sin(x) * x

    @ml.register_primitive("manual_sin_times_x_grad")
    def sin_times_x_grad(backend, x, grad):
        return grad * (backend.sin(x) + x * backend.cos(x))

    model = Model()
    model |= Linear(dimension=5)(input="input", output="h")
    model += Primitive("manual_sin_times_x")(input="h", output="output")
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    results = {}
    for name in ["numpy", *AUTOGRAD]:
        backend = _backend(name)
        pm = ml.compile(model, backend, shapes={"input": [2, 4]})
        params = {
            k: backend.array(v)
            for k, v in ml.compile(model, ml.NumpyBackend(), shapes={"input": [2, 4]}).randomize_params(seed=1).items()
        }
        outputs, grads = pm.evaluate(
            params, {"input": backend.array(x)}, output_gradients={"output": backend.ones(2, 5)}
        )
        results[name] = (backend.to_numpy(outputs["output"]), backend.to_numpy(grads["weight"]))
    ref_out, ref_grad = results["numpy"]
    for name, (out, grad) in results.items():
        np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-5, err_msg=name)
    _forget("manual_sin_times_x", "manual_sin_times_x_grad")
    h = x @ np.asarray(params["weight"]).T + np.asarray(params["bias"])  # last backend's params, same values
    np.testing.assert_allclose(ref_out, np.sin(h) * h, rtol=1e-5, atol=1e-6)
