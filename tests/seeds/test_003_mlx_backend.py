"""Seed 003 "MLX Backend": one test per Mithril code block (blocks numbered from 0 over all fenced blocks).
Blocks 00 (bash), 11 (`batch_size = 32`), 21, 22 (comments only) and 24 (`del large_tensor`) are not
Mithril code. MLX options that map to nothing real are asserted to be rejected by name."""

from __future__ import annotations

import pickle

import mithril as ml
import numpy as np
import pytest
from _seed_helpers import assert_option_rejected, check_against_numpy, construct_or_clear_error, has_backend, to_np


def _classifier():
    model = ml.Model()
    model |= ml.Linear(dimension=32)(input="input", output="hidden1")
    model += ml.Relu()(input="hidden1", output="hidden1_act")
    model += ml.Linear(dimension=16)(input="hidden1_act", output="hidden2")
    model += ml.Relu()(input="hidden2", output="hidden2_act")
    model += ml.Linear(dimension=10)(input="hidden2_act", output="logits")
    model += ml.Softmax()(input="logits", output="output")
    return model


def _is_mlx(cls):
    return getattr(cls, "backend_type", "") == "mlx"


def _rejects(cls, *names, **options):
    with pytest.raises((TypeError, ValueError)) as exc:
        cls(**options)
    assert_option_rejected(exc, *(names or options))


def test_003_mlx_backend_block01_creating_backend(backend_class_or_numpy):
    if has_backend("mlx"):
        from mithril.backends import MLXBackend  # the seed's spelling resolves lazily through the registry

        assert MLXBackend is backend_class_or_numpy("mlx")
    else:
        with pytest.raises(ImportError, match=r"mithril-core\[mlx\]"):
            from mithril.backends import MLXBackend
    cls = backend_class_or_numpy("mlx")
    backend = cls()
    model = ml.Model()
    model |= ml.Linear(dimension=3)
    compiled_model = ml.compile(model, backend)
    assert compiled_model.output_keys == ["output"]


def test_003_mlx_backend_block02_configuration_options(backend_class_or_numpy):
    mx = pytest.importorskip("mlx.core")
    cls = backend_class_or_numpy("mlx")
    assert not hasattr(mx, "devices")  # `mx.devices.gpu` does not exist in MLX itself (it is mx.gpu): device="cpu"
    if not _is_mlx(cls):
        _rejects(cls, "random_seed", "compute_precision", "use_graph", dtype=ml.float16, device="cpu", random_seed=42,
                 compute_precision="float32", use_graph=True)
        return
    backend = cls(dtype=mx.float16, device=mx.cpu, random_seed=42, compute_precision="float32", use_graph=True)
    assert backend.dtype == ml.float16 and backend.seed == 42 and backend.compute_dtype == ml.float32
    pm = ml.compile(ml.Linear(dimension=2), backend, shapes={"input": [1, 3]})  # use_graph: mx.compile by default
    out = pm.evaluate(pm.randomize_params(), {"input": backend.ones(1, 3)})["output"]
    assert out.dtype == mx.float16  # computed in float32, stored in float16


def test_003_mlx_backend_block03_data_types(backend_class_or_numpy):
    mx = pytest.importorskip("mlx.core")
    cls = backend_class_or_numpy("mlx")
    assert cls(dtype=mx.float32).dtype == ml.float32  # MLX dtypes are accepted as dtype
    assert cls(dtype=mx.float16).dtype == ml.float16
    result = construct_or_clear_error(cls, dtype=mx.bfloat16)  # NumPy cannot hold bfloat16: clear error
    assert isinstance(result, TypeError) or result.dtype == ml.bfloat16


def test_003_mlx_backend_block04_selecting_devices(backend_class_or_numpy):
    cls = backend_class_or_numpy("mlx")
    assert cls(device="cpu").device == "cpu"  # mx.devices.cpu -> device="cpu"
    construct_or_clear_error(cls, device="gpu")


def test_003_mlx_backend_block05_memory_management(backend_class_or_numpy):
    cls = backend_class_or_numpy("mlx")
    if not _is_mlx(cls):
        _rejects(cls, memory_limit="4GB", auto_free_tensors=True)
        return
    import mlx.core as mx

    backend = cls(memory_limit="4GB", auto_free_tensors=True)  # as written
    assert mx.set_memory_limit(backend.previous_memory_limit) == 4 * 2**30  # restore the process-wide limit
    assert mx.set_cache_limit(2**34) == 0  # auto_free_tensors: no buffer cache


def test_003_mlx_backend_block06_creating_tensors(backend_or_numpy):
    backend = backend_or_numpy("mlx")
    x = backend.array([[1, 2, 3], [4, 5, 6]])
    assert tuple(x.shape) == (2, 3) and backend.dtype_of(x) in (ml.int32, ml.int64)
    x = backend.array(np.random.randn(3, 4))
    assert backend.dtype_of(x) == ml.float32
    assert (
        tuple(backend.zeros(3, 4).shape)
        == tuple(backend.ones(3, 4).shape)
        == tuple(backend.randn(3, 4).shape)
        == (3, 4)
    )


def test_003_mlx_backend_block07_tensor_conversion(backend_or_numpy):
    # from_mlx/to_mlx are not in the design: backend.array() takes MLX (or NumPy) data, to_numpy gives NumPy.
    mx = pytest.importorskip("mlx.core")
    backend = backend_or_numpy("mlx")
    mx_array = mx.random.normal((3, 4))
    x = backend.array(np.array(mx_array)) if not has_backend("mlx") else backend.array(mx_array)
    np.testing.assert_allclose(to_np(backend, x), np.array(mx_array), rtol=1e-6)
    np_array = np.random.randn(3, 4)
    np.testing.assert_allclose(backend.to_numpy(backend.from_numpy(np_array)), np_array, rtol=1e-6)
    assert isinstance(backend.to_numpy(x), np.ndarray)


def test_003_mlx_backend_block08_automatic_differentiation(backend_or_numpy):
    backend = backend_or_numpy("mlx")
    model = ml.models.MLP(input_size=5, hidden_sizes=[8], output_size=2)
    compiled_model = ml.compile(model, backend)
    params = compiled_model.randomize_params()
    inputs, targets = backend.randn(4, 5), np.zeros((4, 2), np.float32)
    outputs = compiled_model.evaluate(params, {"input": inputs})
    loss = float(((to_np(backend, outputs["output"]) - targets) ** 2).mean())
    loss_gradients = backend.array(2 * (to_np(backend, outputs["output"]) - targets) / targets.size)
    outputs, gradients = compiled_model.evaluate(params, {"input": inputs}, output_gradients={"output": loss_gradients})
    assert loss >= 0 and set(gradients) == set(params)
    check_against_numpy(model, backend, params, {"input": inputs}, {"output": loss_gradients})


def test_003_mlx_backend_block09_lazy_evaluation(backend_or_numpy):
    backend = backend_or_numpy("mlx")
    z = backend.add(backend.array([1.0, 2.0, 3.0]), backend.array([4.0, 5.0, 6.0]))
    np.testing.assert_array_equal(backend.to_numpy(z), [5.0, 7.0, 9.0])


def test_003_mlx_backend_block10_computational_graphs(backend_class_or_numpy, backend_or_numpy):
    # `@mx.compile` over the seed's undefined model_fn -> ml.compile (mx.compile by default with use_graph=True);
    # forward+backward is one evaluate call.
    cls = backend_class_or_numpy("mlx")
    backend = cls(use_graph=True) if _is_mlx(cls) else backend_or_numpy("mlx")
    assert not _is_mlx(cls) or backend.jit_by_default
    pm = ml.compile(
        ml.models.MLP(input_size=4, hidden_sizes=[6], output_size=1), backend, jit=True, shapes={"input": [3, 4]}
    )
    params = pm.randomize_params()
    outputs, grads = pm.evaluate(params, {"input": backend.ones(3, 4)}, output_gradients={"output": backend.ones(3, 1)})
    assert tuple(outputs["output"].shape) == (3, 1) and set(grads) == set(params)


def test_003_mlx_backend_block12_basic_training_loop(backend_or_numpy):
    # The seed uses `outputs` before computing it: forward first, then the squared-error cotangent.
    backend = backend_or_numpy("mlx")
    compiled_model = ml.compile(
        ml.models.MLP(input_size=6, hidden_sizes=[12], output_size=2), backend, shapes={"input": [8, 6]}
    )
    params = compiled_model.get_parameters()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 6)).astype(np.float32)
    data_loader = [(backend.array(x), x[:, :2] * 0.5)]
    learning_rate, losses = 0.05, []
    for _epoch in range(20):
        for batch_inputs, batch_targets in data_loader:
            outputs = compiled_model.evaluate(params, {"input": batch_inputs})
            diff = to_np(backend, outputs["output"]) - batch_targets
            losses.append(float((diff**2).mean()))
            outputs, gradients = compiled_model.evaluate(
                params, {"input": batch_inputs}, output_gradients={"output": backend.array(2 * diff / diff.size)}
            )
            for name, grad in gradients.items():
                params[name] = params[name] - learning_rate * grad
    assert losses[-1] < losses[0]


def test_003_mlx_backend_block13_mlx_optimizers(backend_or_numpy):
    # mlx.optimizers' update(model, grads) updates a module in place and returns None; with plain dicts the
    # functional form is apply_gradients(grads, params). to_mlx/from_mlx -> mx.array(to_numpy(.)) / array(.).
    mx = pytest.importorskip("mlx.core")
    optim = pytest.importorskip("mlx.optimizers")
    backend = backend_or_numpy("mlx")
    compiled_model = ml.compile(
        ml.models.MLP(input_size=4, hidden_sizes=[8], output_size=1), backend, shapes={"input": [6, 4]}
    )
    params = compiled_model.randomize_params()
    optimizer = optim.Adam(learning_rate=0.01)
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    targets = x[:, :1]
    losses = []
    for _epoch in range(10):
        outputs = compiled_model.evaluate(params, {"input": backend.array(x)})
        diff = to_np(backend, outputs["output"]) - targets
        losses.append(float((diff**2).mean()))
        _, gradients = compiled_model.evaluate(
            params, {"input": backend.array(x)}, output_gradients={"output": backend.array(2 * diff / diff.size)}
        )
        mlx_gradients = {name: mx.array(backend.to_numpy(g)) for name, g in gradients.items()}
        mlx_params = {name: mx.array(backend.to_numpy(p)) for name, p in params.items()}
        mlx_params = optimizer.apply_gradients(mlx_gradients, mlx_params)
        params = {name: backend.array(np.array(p)) for name, p in mlx_params.items()}
    assert losses[-1] < losses[0]


def test_003_mlx_backend_block14_custom_activation_lambda(backend_or_numpy):
    backend = backend_or_numpy("mlx")

    def custom_activation(x):
        return backend.maximum(0.01 * x, x)

    model = ml.Model()
    model |= ml.Linear(dimension=8)(input="input", output="hidden")
    model += ml.Lambda(custom_activation)(input="hidden", output="hidden_act")
    model += ml.Linear(dimension=3)(input="hidden_act", output="output")
    pm = ml.compile(model, backend, shapes={"input": [4, 5]}, inference=True)
    outs = pm.evaluate(pm.randomize_params(), {"input": backend.randn(4, 5)})
    h = to_np(backend, outs["hidden"])
    np.testing.assert_allclose(to_np(backend, outs["hidden_act"]), np.maximum(0.01 * h, h), rtol=1e-6)
    if backend.supports_autograd:  # MLX differentiates the Python function itself
        pm = ml.compile(model, backend, shapes={"input": [4, 5]})
        _, grads = pm.evaluate(
            pm.randomize_params(), {"input": backend.randn(4, 5)}, output_gradients={"output": backend.ones(4, 3)}
        )
        assert tuple(grads["weight"].shape) == (8, 5)
    else:  # manual-gradient backends have no rule to differentiate fn: the documented error
        with pytest.raises(ml.errors.UnsupportedPrimitiveError, match="inference=True"):
            ml.compile(model, backend, shapes={"input": [4, 5]})


def test_003_mlx_backend_block15_serialization(backend_or_numpy, tmp_path):
    backend = backend_or_numpy("mlx")
    pm = ml.compile(ml.Linear(dimension=3), backend, shapes={"input": [2, 4]})
    params = pm.randomize_params()
    with open(tmp_path / "model_params.pkl", "wb") as f:  # the user's own pickle of NumPy arrays
        pickle.dump({k: backend.to_numpy(v) for k, v in params.items()}, f)
    with open(tmp_path / "model_params.pkl", "rb") as f:
        loaded = {k: backend.array(v) for k, v in pickle.load(f).items()}
    pm.save_params(tmp_path / "params.npz", params)  # Mithril's own format: npz/safetensors, never pickle
    for other in (loaded, pm.load_params(tmp_path / "params.npz")):
        for k in params:
            np.testing.assert_array_equal(to_np(backend, other[k]), to_np(backend, params[k]))


def test_003_mlx_backend_block16_mps_optimization(backend_class_or_numpy):
    _rejects(backend_class_or_numpy("mlx"), enable_mps_optimization=True)


def test_003_mlx_backend_block17_use_ane(backend_class_or_numpy):
    _rejects(backend_class_or_numpy("mlx"), use_ane=True)


def test_003_mlx_backend_block18_coreml_memory_sharing(backend_or_numpy):
    # coremltools is not installed (and MLTensor is not its API): the MLX array is handed to backend.array.
    mx = pytest.importorskip("mlx.core")
    backend = backend_or_numpy("mlx")
    np_array = np.random.randn(3, 4).astype(np.float32)
    x = backend.array(mx.array(np_array) if has_backend("mlx") else np_array)
    np.testing.assert_array_equal(to_np(backend, x), np_array)


def test_003_mlx_backend_block19_precision_by_task(backend_class_or_numpy):
    mx = pytest.importorskip("mlx.core")
    cls = backend_class_or_numpy("mlx")
    for mx_dtype, dtype in [(mx.float16, ml.float16), (mx.float32, ml.float32)]:
        backend = cls(dtype=mx_dtype)
        pm = ml.compile(ml.Linear(dimension=2), backend, shapes={"input": [1, 3]})
        assert backend.dtype_of(pm.evaluate(pm.randomize_params(), {"input": backend.ones(1, 3)})["output"]) == dtype


@pytest.mark.parametrize("block,options", [
    ("block20", {"use_graph": True}), ("block23", {"compute_precision": "float32"}),
    ("block29", {"use_graph": False}), ("block31", {"use_graph": False}),
])
def test_003_mlx_backend_block20_23_29_31_graph_and_precision_options(backend_class_or_numpy, block, options):
    cls = backend_class_or_numpy("mlx")
    if not _is_mlx(cls):
        _rejects(cls, **options)
        return
    backend = cls(**options)  # as written
    if "use_graph" in options:
        assert backend.jit_by_default is options["use_graph"]
    else:
        assert backend.compute_dtype == ml.float32 and cls(compute_precision="float16").compute_dtype == ml.float16


def test_003_mlx_backend_block25_memory_info(backend_or_numpy):
    backend = backend_or_numpy("mlx")
    if hasattr(type(backend), "get_memory_info"):  # the MLX backend reports MLX's memory counters
        memory_info = backend.get_memory_info()
        assert "used" in memory_info
    else:
        with pytest.raises(AttributeError, match="get_memory_info"):
            backend.get_memory_info()


def test_003_mlx_backend_block26_verbose(backend_or_numpy, caplog):
    model, backend = ml.Linear(dimension=2), backend_or_numpy("mlx")
    with caplog.at_level("INFO", logger="mithril.compile"):
        compiled_model = ml.compile(model, backend, verbose=True)  # as written
    assert "codegen" in caplog.text and "shape output" in caplog.text and compiled_model.output_keys == ["output"]


def test_003_mlx_backend_block27_tensor_info(backend_or_numpy):
    # backend.shape(t) is the `shape` primitive; backend.dtype is the backend's dtype (not callable):
    # shape_of / dtype_of are the introspection helpers.
    backend = backend_or_numpy("mlx")
    tensor = backend.ones(2, 3)
    assert [int(v) for v in np.asarray(backend.to_numpy(backend.shape(tensor)))] == [2, 3]
    assert tuple(backend.shape_of(tensor)) == (2, 3) and backend.dtype_of(tensor) == ml.float32
    with pytest.raises(TypeError):
        backend.dtype(tensor)


def test_003_mlx_backend_block28_isnan(backend_or_numpy):
    backend = backend_or_numpy("mlx")
    tensor = backend.array([1.0, float("nan")])
    assert bool(backend.isnan(tensor).any())
    assert not bool(backend.isnan(backend.ones(3)).any())


def test_003_mlx_backend_block30_float16(backend_class_or_numpy):
    mx = pytest.importorskip("mlx.core")
    assert backend_class_or_numpy("mlx")(dtype=mx.float16).dtype == ml.float16


def test_003_mlx_backend_block32_numerical_instability(backend_class_or_numpy):
    mx = pytest.importorskip("mlx.core")
    cls = backend_class_or_numpy("mlx")
    if _is_mlx(cls):
        assert cls(dtype=mx.float32, compute_precision="float32").compute_dtype == ml.float32  # as written
    else:
        _rejects(cls, "compute_precision", dtype=mx.float32, compute_precision="float32")
    inputs = np.random.default_rng(0).normal(3.0, 2.0, size=(8, 4))
    normalized = (inputs - inputs.mean(0)) / inputs.std(0)
    assert np.allclose(cls(dtype=mx.float32).to_numpy(cls(dtype=mx.float32).array(normalized)).mean(0), 0, atol=1e-5)


def test_003_mlx_backend_block33_classification(backend_or_numpy):
    backend = backend_or_numpy("mlx")
    model = _classifier()
    # As written (no input shape), parameter shapes are unknown: a ShapeError says to give shapes.
    with pytest.raises(ml.ShapeError, match="shapes"):
        ml.compile(model, backend).get_parameters()
    compiled_model = ml.compile(model, backend, shapes={"input": [100, 20]})  # 784 -> 20 features
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 20))
    y = rng.integers(0, 10, size=(100,))
    y_one_hot = np.zeros((100, 10))
    y_one_hot[np.arange(100), y] = 1
    params = compiled_model.get_parameters()
    learning_rate, errors, accuracy = 0.01, [], 0.0
    for _epoch in range(10):
        outputs = compiled_model.evaluate(params, {"input": X})
        predictions = to_np(backend, outputs["output"])
        np.testing.assert_allclose(predictions.sum(1), 1.0, rtol=1e-5)
        errors.append(float(((predictions - y_one_hot) ** 2).sum()))
        loss_grad = backend.array(predictions - y_one_hot)
        _, gradients = compiled_model.evaluate(params, {"input": X}, output_gradients={"output": loss_grad})
        for name, grad in gradients.items():
            params[name] = params[name] - learning_rate * grad
        accuracy = np.mean(np.argmax(predictions, axis=1) == y)
    assert errors[-1] < errors[0] and 0.0 <= accuracy <= 1.0


def test_003_mlx_backend_block34_image_processing(backend_or_numpy):
    model = ml.Model()
    model |= ml.Conv2d(filters=4, kernel_size=3, stride=1, padding="same")(input="input", output="conv1")
    model += ml.Relu()(input="conv1", output="conv1_act")
    model += ml.MaxPool2d(kernel_size=2)(input="conv1_act", output="pool1")
    model += ml.Conv2d(filters=8, kernel_size=3, stride=1, padding="same")(input="pool1", output="conv2")
    model += ml.Relu()(input="conv2", output="conv2_act")
    model += ml.MaxPool2d(kernel_size=2)(input="conv2_act", output="pool2")
    model += ml.Flatten()(input="pool2", output="flat")
    model += ml.Linear(dimension=16)(input="flat", output="hidden")
    model += ml.Relu()(input="hidden", output="hidden_act")
    model += ml.Linear(dimension=10)(input="hidden_act", output="output")
    backend = backend_or_numpy("mlx", dtype=ml.float16)
    ml.compile(model, backend)  # as written: compiles without shapes
    pm = ml.compile(model, backend, shapes={"input": [2, 3, 16, 16]})
    params = pm.randomize_params()
    assert tuple(params["weight_2"].shape) == (16, 8 * 4 * 4)
    out = pm.evaluate(params, {"input": backend.randn(2, 3, 16, 16)})
    assert tuple(out["output"].shape) == (2, 10) and backend.dtype_of(out["output"]) == ml.float16
