"""Seed 004 "Backends API": one test per Mithril code block (all blocks are Mithril code). The upstream
module paths (mithril.backends.with_autograd...) and several upstream methods are not in the design; each
test asserts the error and runs the closest working equivalent."""

from __future__ import annotations

import importlib

import mithril as ml
import numpy as np
import pytest
from _seed_helpers import CLASS_NAMES, construct_or_clear_error, has_backend, to_np
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
    np.testing.assert_allclose(
        to_np(backend, output["output"]), to_np(backend, physical_model.evaluate(params, input_data)["output"])
    )
    assert tuple(physical_model(params, input_data)["output"].shape) == (2, 3)  # and __call__(params, data)


def test_004_backends_api_block04_backend_configuration(backend_class_or_numpy):
    # As written; platform="gpu" / device="cuda" need hardware this machine lacks: a clear error naming the
    # device, and the same options with the CPU run.
    for name, options in [
        ("jax", {"jit_compile": True, "platform": "gpu", "precision": "float32"}),
        ("torch", {"device": "cuda", "use_amp": True, "compile": True}),
        ("mlx", {"seed": 42, "default_dtype": "float16"}),
    ]:
        cls = backend_class_or_numpy(name)
        if cls is ml.NumpyBackend:
            with pytest.raises(TypeError):
                cls(**options)
            continue
        backend = construct_or_clear_error(cls, **options)
        if isinstance(backend, Exception):
            assert "gpu" in str(backend) or "cuda" in str(backend).lower()
            backend = cls(**{**options, **{k: "cpu" for k in ("platform", "device") if k in options}})
        if name == "jax":
            assert backend.jit_enabled and backend.dtype == ml.float32
        elif name == "torch":
            assert backend.use_amp and backend.jit_by_default
        else:
            assert backend.dtype == ml.float16 and backend.seed == 42


def test_004_backends_api_block05_backend_specific_features(backend_or_numpy):
    jax_backend = backend_or_numpy("jax")
    if isinstance(jax_backend, ml.NumpyBackend):
        return
    construct_or_clear_error(type(jax_backend))
    try:
        jax_backend.set_platform("gpu")  # no GPU here: a clear error naming it
    except ValueError as exc:
        assert "gpu" in str(exc)
    jax_backend.enable_x64()
    assert jax_backend.dtype == ml.float64 and str(jax_backend.array([1.5]).dtype) == "float64"
    torch_backend = backend_or_numpy("torch")
    try:
        torch_backend.set_device("cuda:0")
    except ValueError as exc:
        assert "cuda" in str(exc).lower()
    assert callable(torch_backend.enable_deterministic)
    mlx_backend = backend_or_numpy("mlx")
    if hasattr(type(mlx_backend), "set_default_device"):
        try:
            mlx_backend.set_default_device("gpu")
        except ValueError as exc:
            assert "gpu" in str(exc)


def test_004_backends_api_block06_backend_operations(backend_or_numpy):
    backend = backend_or_numpy("jax")
    # as written
    x = backend.tensor([1, 2, 3], dtype="float32")
    y = backend.tensor([4, 5, 6], dtype="float32")
    z = backend.add(x, y)
    w = backend.matmul(x, y)
    a = backend.relu(z)
    b = backend.sigmoid(w)
    c = backend.reduce_sum(a)
    d = backend.reduce_mean(b)
    assert float(to_np(backend, w)) == 32.0 and float(to_np(backend, c)) == 21.0
    assert abs(float(to_np(backend, d)) - 1.0) < 1e-6


def test_004_backends_api_block07_backend_utilities(backend_or_numpy):
    backend = backend_or_numpy("jax")
    tensor = backend.ones(2, 3)
    # as written, except backend.dtype(tensor): backend.dtype is the backend's dtype attribute -> dtype_of
    np_array = backend.to_numpy(tensor)
    tensor = backend.from_numpy(np_array)
    shape = backend.shape(tensor)
    dtype = backend.dtype_of(tensor)
    random_tensor = backend.random_normal(shape=(3, 4), mean=0.0, stddev=1.0)
    backend.set_seed(42)
    assert [int(v) for v in np.asarray(to_np(backend, shape))] == [2, 3] and dtype == ml.float32
    assert tuple(random_tensor.shape) == (3, 4)
    first = backend.to_numpy(backend.random_normal(shape=(3, 4), mean=1.0, stddev=2.0))
    backend.set_seed(42)
    np.testing.assert_array_equal(backend.to_numpy(backend.random_normal(shape=(3, 4), mean=1.0, stddev=2.0)), first)


def test_004_backends_api_block08_automatic_differentiation(backend_or_numpy):
    backend = backend_or_numpy("jax")
    if not backend.supports_autograd:  # NumPy fallback: no autograd, a clear error
        with pytest.raises(ml.errors.UnsupportedPrimitiveError, match="autograd"):
            backend.grad(lambda x: x)
        return

    def f(x):  # as written
        return backend.reduce_sum(backend.power(x, 2))

    x = backend.tensor([1.0, 2.0, 3.0])
    grad_f = backend.grad(f)
    grad_x = grad_f(x)
    np.testing.assert_allclose(backend.to_numpy(grad_x), [2.0, 4.0, 6.0])


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
