"""Seed 004 "Backends API": one test per Mithril code block (all blocks are Mithril code). The upstream
module paths (mithril.backends.with_autograd...) and several upstream methods are not in the design; each
test asserts the error and runs the closest working equivalent."""

from __future__ import annotations

import importlib

import mithril as ml
import numpy as np
import pytest
from _seed_helpers import CLASS_NAMES, assert_option_rejected, has_backend, to_np
from mithril.backends.backend import Backend
from mithril.errors import BackendNotAvailableError


def _import_or_explain(name):
    import mithril.backends as mb

    try:
        return getattr(mb, CLASS_NAMES[name])
    except BackendNotAvailableError as exc:
        assert f"mithril-core[{name}]" in str(exc)
        return None


@pytest.mark.parametrize("block,names", [("block00", ["jax", "torch", "mlx"]), ("block01", ["numpy", "c", "ggml"])])
def test_004_backends_api_block00_01_imports(block, names):
    path = "with_autograd" if block == "block00" else "with_manualgrad"
    for name in names:
        # the upstream module paths are kept as lazy aliases: `from ...jax_backend import JaxBackend` runs as written
        module = importlib.import_module(f"mithril.backends.{path}.{name}_backend")
        if has_backend(name):
            assert getattr(module, CLASS_NAMES[name]) is _import_or_explain(name)
        else:
            with pytest.raises(BackendNotAvailableError, match=rf"mithril-core\[{name}\]"):
                getattr(module, CLASS_NAMES[name])
        cls = _import_or_explain(name)  # `from mithril.backends import TorchBackend` (DESIGN section 2)
        assert (cls is not None) == has_backend(name)


def test_004_backends_api_block02_backend_interface():
    assert {"array", "to_numpy", "is_array", "native_dtype"} <= Backend.__abstractmethods__
    for method in ["tensor", "zeros", "ones"]:
        assert callable(getattr(Backend, method))
    backend = ml.NumpyBackend()
    assert tuple(backend.zeros((3, 4)).shape) == (3, 4)  # shape as a tuple, as in the interface
    assert backend.tensor([1.0, 2.0], dtype=ml.float64).dtype == np.float64


def test_004_backends_api_block03_backend_selection(backend_or_numpy):
    from mithril.models import LogicalModel

    # As written (the block's "define your model" filled with one Linear of 4 input features).
    model = LogicalModel()
    model |= ml.Linear(dimension=3)(input_size=4)
    backend = backend_or_numpy("jax")
    physical_model = model.compile(backend)
    input_data = {"input": backend.ones(2, 4)}
    output = physical_model(input_data)  # evaluate with the current parameters
    assert tuple(output["output"].shape) == (2, 3)
    params = physical_model.get_parameters()
    np.testing.assert_allclose(to_np(backend, output["output"]), to_np(backend, physical_model.evaluate(params, input_data)["output"]))
    assert tuple(physical_model(params, input_data)["output"].shape) == (2, 3)  # and __call__(params, data)


def test_004_backends_api_block04_backend_configuration(backend_class_or_numpy):
    for name, options, closest in [
        ("jax", {"jit_compile": True, "platform": "gpu", "precision": "float32"}, {"dtype": ml.float32}),
        ("torch", {"device": "cpu", "use_amp": True, "compile": True}, {"device": "cpu"}),
        ("mlx", {"seed": 42, "default_dtype": "float16"}, {"seed": 42, "dtype": ml.float16}),
    ]:
        cls = backend_class_or_numpy(name)
        try:
            backend = cls(**options)
        except TypeError as exc:
            assert_option_rejected(pytest.ExceptionInfo.from_exc_info((type(exc), exc, exc.__traceback__)),
                                   *[k for k in options if k not in ("device", "seed")])
        else:  # a backend may honour an alias (MLX: default_dtype -> dtype)
            assert name == "mlx" and backend.dtype == ml.float16
        cls(**closest)


def test_004_backends_api_block05_backend_specific_features(backend_or_numpy):
    for name, methods in [("jax", ["set_platform", "enable_x64"]), ("torch", ["set_device", "enable_deterministic"]),
                          ("mlx", ["set_default_device"])]:
        backend = backend_or_numpy(name)
        for method in methods:  # configuration happens at construction (dtype=, device=, seed=)
            if hasattr(type(backend), method):  # a backend may offer it (torch: set_device, ...)
                assert callable(getattr(backend, method))
            else:
                with pytest.raises(AttributeError, match=method):
                    getattr(backend, method)


def test_004_backends_api_block06_backend_operations(backend_or_numpy):
    backend = backend_or_numpy("jax")
    x = backend.tensor([1, 2, 3], dtype="float32")
    y = backend.tensor([4, 5, 6], dtype="float32")
    z = backend.add(x, y)
    w = backend.matmul(x, y)
    a, b = backend.relu(z), backend.sigmoid(w)
    assert float(to_np(backend, w)) == 32.0
    for name in ["reduce_sum", "reduce_mean"]:  # not our API: sum / mean
        with pytest.raises(AttributeError, match=name):
            getattr(backend, name)
    assert float(to_np(backend, backend.sum(a))) == 21.0
    assert abs(float(to_np(backend, backend.mean(b))) - 1.0) < 1e-6


def test_004_backends_api_block07_backend_utilities(backend_or_numpy):
    backend = backend_or_numpy("jax")
    tensor = backend.from_numpy(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(backend.to_numpy(tensor), np.arange(6.0).reshape(2, 3))
    assert tuple(backend.shape_of(tensor)) == (2, 3) and backend.dtype_of(tensor) in (ml.float32, ml.float64)
    if not hasattr(type(backend), "random_normal"):
        with pytest.raises(AttributeError):
            backend.random_normal(shape=(3, 4), mean=0.0, stddev=1.0)
    backend.set_seed(42)
    first = backend.to_numpy(backend.randn(3, 4))
    backend.set_seed(42)
    np.testing.assert_array_equal(backend.to_numpy(backend.randn(3, 4)), first)


def test_004_backends_api_block08_automatic_differentiation(backend_or_numpy):
    # backend.grad(f) is not our API: differentiate a compiled model with output_gradients=True.
    backend = backend_or_numpy("jax")
    model = ml.Model()
    model |= ml.Square()(input=ml.IOKey("x", shape=[3]))
    model += ml.Sum()(output=ml.IOKey("output"))
    pm = ml.compile(model, backend, trainable_keys={"x"})
    _, grads = pm.evaluate({"x": backend.tensor([1.0, 2.0, 3.0])}, output_gradients=True)
    np.testing.assert_allclose(backend.to_numpy(grads["x"]), [2.0, 4.0, 6.0])


def test_004_backends_api_block09_parallelization(backend_or_numpy):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mithril.backends.with_autograd.jax_backend.parallel")
    backend = backend_or_numpy("jax")
    with pytest.raises(AttributeError, match="place_model"):
        backend.place_model  # noqa: B018 - placement is the backend's device_mesh (DESIGN section 5)


def test_004_backends_api_block10_custom_backend():
    class MyCustomBackend(Backend):  # the seed's partial subclass stays abstract
        def __init__(self, *args, **kwargs):
            super().__init__()

        def tensor(self, data, dtype=None):
            pass

        def zeros(self, shape, dtype=None):
            pass

    with pytest.raises(TypeError, match="abstract"):
        MyCustomBackend()

    class ListBackend(ml.NumpyBackend):  # closest: implement the abstract methods (here by reusing NumPy's)
        backend_type = "numpy"

    backend = ListBackend()
    pm = ml.compile(ml.Linear(dimension=2), backend, shapes={"input": [1, 3]})
    assert tuple(pm.evaluate(pm.randomize_params(), {"input": backend.ones(1, 3)})["output"].shape) == (1, 2)


def test_004_backends_api_numpy_unknown_option_names_accepted_options():
    with pytest.raises(TypeError) as exc:
        ml.NumpyBackend(use_ane=True)
    assert "use_ane" in str(exc.value) and "dtype" in str(exc.value) and "seed" in str(exc.value)
