"""The plugin system: robust entry-point loading, clear errors, and in-process extension."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import mithril as ml
import numpy as np
import pytest
from mithril import plugins
from mithril.backends import Backend
from mithril.errors import BackendNotAvailableError, PluginError, UnsupportedPrimitiveError
from mithril.extend import PrimitiveSpec, rules
from mithril.models import IOKey, Model, Multiply, Primitive
from mithril.plugins import hookimpl, manager

manager_module = importlib.import_module("mithril.plugins.manager")  # the module (``manager`` is also a function)


@pytest.fixture(autouse=True)
def fresh_plugins():
    plugins.reset()
    yield
    plugins.reset()


class _FakeEntryPoint:
    def __init__(self, name: str, dist: str, error: Exception) -> None:
        self.name = name
        self.dist = SimpleNamespace(metadata={"Name": dist}, version="9.9")
        self._error = error

    def load(self):
        raise self._error


def test_broken_plugin_is_recorded_not_fatal(monkeypatch):
    broken = _FakeEntryPoint("jax", "mithril-backend-jax", ImportError("No module named 'jaxlib'"))
    monkeypatch.setattr(manager_module, "_entry_points", lambda: [broken])
    pm = manager()
    assert [b.name for b in pm.broken] == ["jax"]
    assert not hasattr(ml, "JaxBackend")
    with pytest.raises(BackendNotAvailableError) as info:
        from mithril.backends import JaxBackend  # noqa: F401
    text = str(info.value)
    assert "jaxlib" in text and "mithril-backend-jax" in text and 'pip install "mithril-core[jax]"' in text


def test_missing_backend_names_package_and_install_line(monkeypatch):
    monkeypatch.setattr(manager_module, "_entry_points", lambda: [])
    with pytest.raises(BackendNotAvailableError, match=r'mithril-backend-torch.*pip install "mithril-core\[torch\]"'):
        from mithril.backends import TorchBackend  # noqa: F401


def test_disable_env_blocks_a_plugin(monkeypatch):
    class Loaded(_FakeEntryPoint):
        def load(self):
            return SimpleNamespace()

    monkeypatch.setattr(manager_module, "_entry_points", lambda: [Loaded("numpy", "mithril-backend-numpy", None)])
    monkeypatch.setenv("MITHRIL_DISABLE_PLUGINS", "numpy")
    pm = manager()
    assert "numpy" in pm.disabled and all(p.name != "numpy" for p in pm.loaded)


def test_duplicate_primitive_registration_names_both_plugins():
    pm = manager(entry_points=False)
    dup = PrimitiveSpec("relu", ("input",), rules.same_shape, rules.same_kind)
    with pytest.raises(PluginError, match="already registered by 'mithril-core'"):
        pm.registry.add_primitive(dup, plugin="third-party")


def test_misspelled_hook_is_rejected():
    @hookimpl
    def mithril_register_primitivez(register):  # typo on purpose
        pass

    with pytest.raises(Exception, match="mithril_register_primitivez"):
        manager(entry_points=False).register_plugin(
            SimpleNamespace(mithril_register_primitivez=mithril_register_primitivez), "typo"
        )


# -- an in-process custom primitive and custom backend ------------------------------------------------


class TinyBackend(Backend):
    """A NumPy-backed backend implementing only what the test model needs."""

    backend_type = "tiny"
    supported_dtypes = (ml.float64,)

    def native_dtype(self, dtype=None):
        kind = dtype.kind if hasattr(dtype, "kind") else (dtype or "float")
        return {"float": np.float64, "int": np.int64, "bool": np.bool_}[kind]

    def array(self, data, dtype=None):
        kind = "float" if dtype is None and np.asarray(data).dtype.kind == "f" else (dtype or "float")
        return np.asarray(data, dtype=self.native_dtype(kind))

    def to_numpy(self, array):
        return np.asarray(array)

    def is_array(self, value):
        return isinstance(value, np.ndarray)


def _sum_to_like(input, like):
    extra = input.ndim - like.ndim
    axes = tuple(range(extra)) + tuple(
        i + extra for i, n in enumerate(like.shape) if n == 1 and input.shape[i + extra] != 1
    )
    return np.sum(input, axis=axes, keepdims=True).reshape(like.shape)


TINY_OPS = {
    "multiply": lambda left, right: left * right,
    "add": lambda left, right: left + right,
    "sin": np.sin,
    "cos": np.cos,
    "sum_to_like": _sum_to_like,
    "zeros_like": np.zeros_like,
    "sin_times_x": lambda input: np.sin(input) * input,
}


def _sin_times_x_vjp(ctx):
    x = ctx["input"]
    return {"input": ctx.cotangent * (ctx.ops.sin(x) + x * ctx.ops.cos(x))}


class TinyPlugin:
    @hookimpl
    def mithril_register_primitives(self, register):
        register(PrimitiveSpec("sin_times_x", ("input",), rules.same_shape, rules.float_result, doc="sin(x) * x"))

    @hookimpl
    def mithril_register_backends(self, register):
        register("tiny", TinyBackend, aliases=("TinyBackend",))

    @hookimpl
    def mithril_register_impls(self, register):
        register("tiny", TINY_OPS)

    @hookimpl
    def mithril_register_gradients(self, register):
        register("sin_times_x", _sin_times_x_vjp)


@pytest.fixture
def tiny():
    manager().register_plugin(TinyPlugin(), "tiny-plugin")
    yield ml.TinyBackend(dtype=ml.float64)
    manager().unregister_plugin("tiny-plugin")


def test_custom_primitive_and_backend_compute_values_and_gradients(tiny):
    model = Model()
    model |= Multiply()(left=IOKey("x", shape=[3]), right=IOKey("w", shape=[1], differentiable=True))
    model += Primitive("sin_times_x")(output=IOKey("y"))
    pm = ml.compile(model, tiny, data_keys={"x"})
    x, w = np.array([0.1, 0.5, 1.0]), np.array([2.0])
    out, grads = pm.evaluate({"w": w}, {"x": x}, output_gradients={"y": np.ones(3)})
    u = x * w
    np.testing.assert_allclose(out["y"], np.sin(u) * u)
    np.testing.assert_allclose(grads["w"], [np.sum((np.sin(u) + u * np.cos(u)) * x)])
    assert "sin_times_x(" in pm.source


def test_unsupported_primitive_names_backend_and_op(tiny):
    model = Model()
    model |= Primitive("relu")(input="x", output="y")
    with pytest.raises(UnsupportedPrimitiveError, match=r"TinyBackend does not implement 'relu'"):
        ml.compile(model, tiny)


def test_plugins_cli_lists_loaded(capsys):
    from mithril.cli import main

    assert main(["plugins"]) == 0
    assert "mithril-core" in capsys.readouterr().out
