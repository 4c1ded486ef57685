"""Hardening of core and the Python backends (NumPy, JAX, PyTorch, MLX): special float values, argument
validation through one mechanism, Mithril's own errors from ``evaluate`` before any framework sees the
input, cotangent checks, and parameter files. Each test failed before this work."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import mithril as ml
import numpy as np
import pytest
from _hardening_helpers import BACKENDS, PYTHON_BACKENDS, make_backend
from mithril.errors import (
    ArgumentError,
    CheckpointError,
    DtypeError,
    MissingAttributeError,
    ModelKeyError,
    ShapeError,
)
from mithril.models import (
    ArgMax,
    AvgPool2D,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    CrossEntropy,
    Dropout,
    Embedding,
    Flatten,
    Gelu,
    GroupNorm,
    IOKey,
    LayerNorm,
    Linear,
    MaxPool2D,
    Model,
    MultiHeadAttention,
    Primitive,
    Reshape,
    RMSNorm,
    Sum,
)
from mithril.plugins.lookup import backend_class
from mithril.types import Dtype
from mithril_testing.cases import CASES
from mithril_testing.conformance import run_reference

CORE_SRC = Path(ml.__file__).parent


# -- 1. special values ---------------------------------------------------------------------------
def _case(case_id: str):
    return next(c for c in CASES if c.id == case_id)


def test_special_value_expectations_are_in_the_tested_dtype():
    case = _case("nan_to_num-special")
    inputs = {k: v.astype(np.float32) for k, v in case.make_inputs().items()}
    got = run_reference(case, inputs, dtype=Dtype.float32)["output"]
    assert got[1] == np.finfo(np.float32).max and got[2] == -np.finfo(np.float32).max
    assert run_reference(case, case.make_inputs(), dtype=Dtype.float64)["output"][1] == np.finfo(np.float64).max
    assert run_reference(case, inputs, dtype=Dtype.bfloat16)["output"][1] == pytest.approx(3.3895313892515355e38)
    power = run_reference(
        Case_("power", left=[1e-30], right=[-2.0]),
        {"left": np.array([1e-30], np.float32), "right": np.array([-2.0], np.float32)},
        dtype=Dtype.float32,
    )
    assert np.isinf(power["output"][0])  # float32 overflows as the backend does; float64 would give 1e60


def Case_(primitive: str, **inputs):
    from mithril_testing.cases import Case

    return Case(primitive, {k: np.array(v) for k, v in inputs.items()}, grad=False)


@pytest.mark.parametrize("name", PYTHON_BACKENDS)
@pytest.mark.parametrize(
    "case_id",
    [
        "sign-special",
        "floor_divide-special",
        "nan_to_num-special",
        "gelu-special",
        "relu-special",
        "maximum-special",
        "minimum-special",
    ],
)
def test_special_values_match_numpy_on_every_python_backend(name, case_id):
    case = _case(case_id)
    backend = make_backend(name)
    arrays = {k: v.astype(np.float32) for k, v in case.make_inputs().items()}
    model = Primitive(case.primitive, **case.attrs)
    pm = ml.compile(
        model, backend, shapes={k: list(v.shape) for k, v in arrays.items()}, data_keys=set(arrays), jit=False
    )
    got = np.asarray(
        backend.to_numpy(pm.evaluate({}, {k: backend.array(v) for k, v in arrays.items()})["output"]), np.float64
    )
    expected = run_reference(case, arrays, dtype=Dtype.float32)["output"].astype(np.float64)
    np.testing.assert_allclose(
        got,
        expected,
        rtol=1e-5,
        atol=1e-5 * np.nanmax(np.abs(np.where(np.isfinite(expected), expected, 0)), initial=1),
        equal_nan=True,
        err_msg=f"{case_id} on {name}",
    )


# -- 2. validation -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: Conv2d(4, kernel_size=(3, 3, 3)), r"Conv2d: kernel_size must be .* 2 of them, got \(3, 3, 3\)"),
        (lambda: Conv2d(4, 3, groups=2, in_channels=3), "in_channels=3 must be divisible by groups=2"),
        (lambda: Conv2d(5, 3, groups=2), "out_channels=5 must be divisible by groups=2"),
        (lambda: Conv2d(4, 3, filters=5), "out_channels=4 and filters=5 disagree"),
        (lambda: Conv2d(4, 3, stride=(1, 0)), r"Conv2d: stride must be .*got \(1, 0\)"),
        (lambda: Conv2d(4, 3, padding=((1, -1), (0, 0))), "Conv2d: padding must be"),
        (lambda: Conv2d(4, 3, use_bias="no"), "use_bias must be True or False, got 'no'"),
        (lambda: Conv1d(4, 3, dilation=0), "Conv1d: dilation must be"),
        (lambda: MaxPool2D(2, padding=-1), "MaxPool2D: padding must be"),
        (lambda: MaxPool2D(2.5), r"MaxPool2D: kernel_size must be .*got 2.5"),
        (lambda: AvgPool2D(0), "AvgPool2D: kernel_size must be"),
        (lambda: Linear(3, use_bias="yes"), "Linear: use_bias must be True or False"),
        (lambda: Linear(3, in_features=0), "Linear: in_features must be a positive int"),
        (lambda: Dropout(1.5), r"Dropout: p must be a number in \[0.0, 1.0\), got 1.5"),
        (lambda: Dropout("a"), r"Dropout: p must be a number in \[0.0, 1.0\), got 'a' \(str\)"),
        (lambda: LayerNorm(eps=-1), "LayerNorm: eps must be a number >= 0.0, got -1"),
        (lambda: RMSNorm(0), "RMSNorm: dim must be a positive int or None, got 0"),
        (lambda: GroupNorm(0), "GroupNorm: num_groups must be a positive int, got 0"),
        (lambda: GroupNorm(3, 8), "GroupNorm: num_channels=8 must be divisible by num_groups=3"),
        (lambda: BatchNorm2d(0), "BatchNorm2d: num_features must be a positive int or None, got 0"),
        (lambda: BatchNorm2d(4, momentum=2.0), r"BatchNorm2d: momentum must be a number in \[0.0, 1.0\]"),
        (lambda: MultiHeadAttention(4, 0), "MultiHeadAttention: num_heads must be a positive int, got 0"),
        (lambda: MultiHeadAttention("4", 2), r"MultiHeadAttention: dim must be a positive int, got '4' \(str\)"),
        (lambda: MultiHeadAttention(5, 2), "dim=5 must be divisible by num_heads=2"),
        (lambda: CrossEntropy(reduction="x"), "CrossEntropy: reduction must be one of 'mean', 'sum', 'none', got 'x'"),
        (lambda: Flatten("a"), "Flatten: start_dim must be an int axis, got 'a'"),
        (lambda: Sum(axis="x"), r"Sum\('sum'\): axis must be an int axis or a tuple of them or None, got 'x'"),
        (lambda: Sum(1, 2, 3), "Sum takes at most 2 positional attributes"),
        (lambda: ml.NumpyBackend().sum(np.ones(3), 0, False, 7), r"NumpyBackend.sum takes at most 3 positional"),
        (lambda: Reshape(shape="x"), r"shape must be a tuple of ints >= -1 or None, got 'x'"),
        (lambda: Primitive("sum", foo=1), r"unknown attribute\(s\) \['foo'\]"),
        (lambda: Primitive("reshape"), r"needs attribute\(s\) \['shape'\]"),
        (lambda: Gelu(approximate="fast"), "approximate must be True/False"),
        (lambda: IOKey("x", shape=5), "IOKey\\('x'\\): shape must be a list or tuple"),
        (lambda: IOKey("x", shape=[-1]), r"entry -1 is none of them"),
        (lambda: IOKey("x", shape=[2.5]), r"entry 2.5 is none of them"),
        (lambda: IOKey("x", shape=[("A", ...), ("B", ...)]), "2 variadic segments"),
        (lambda: IOKey("x", init="bad"), "init must be an initialiser"),
        (lambda: IOKey("x", differentiable=True, buffer=True), "a buffer is never differentiated"),
        (lambda: IOKey("x", differentiable="yes"), "differentiable must be True or False"),
        (lambda: Linear(3, name=""), "Linear: name must be a non-empty string or None, got ''"),
        (lambda: Model(name=5), "Model: name must be a non-empty string or None, got 5"),
    ],
)
def test_invalid_arguments_get_one_clear_error(build, fragment):
    with pytest.raises(ArgumentError, match=fragment) as info:
        build()
    assert isinstance(info.value, (ValueError, TypeError))


def test_numpy_integers_are_accepted_as_sizes():
    pm = ml.compile(Linear(np.int64(3), in_features=np.int32(4)), ml.NumpyBackend(), shapes={"input": [np.int64(2), 4]})
    assert pm.shapes["weight"] == [3, 4] and pm.shapes["input"] == [2, 4]


def test_gelu_accepts_pytorchs_approximate_spelling():
    assert Gelu(approximate="none").attributes["approximate"] is False
    assert Gelu(approximate="tanh").attributes["approximate"] is True


def test_type_errors_are_dtype_errors():
    with pytest.raises(DtypeError, match=r"IOKey\('x'\): type must be float, int, bool or a dtype.*got 'complex'"):
        IOKey("x", type="complex")
    model = Model()
    model |= Linear(3)(input="x")
    with pytest.raises(DtypeError, match="set_types\\('x'\\): type must be"):
        model.set_types({"x": "complex"})
    with pytest.raises(DtypeError, match="unknown dtype 'complex64'"):
        ml.NumpyBackend(dtype="complex64")
    with pytest.raises(DtypeError, match="does not compute in int32"):
        ml.NumpyBackend(dtype="int32")


def test_compile_and_backend_misuse_gets_clear_errors(tmp_path):
    backend = ml.NumpyBackend()
    with pytest.raises(ArgumentError, match=r"backend instance.*create one: NumpyBackend\(\)"):
        ml.compile(Linear(3), ml.NumpyBackend)
    with pytest.raises(ArgumentError, match="backend instance"):
        ml.compile(Linear(3), "numpy")
    with pytest.raises(ArgumentError, match=r"unknown option\(s\) \['foo'\]"):
        ml.compile(Linear(3), backend, foo=1)
    with pytest.raises(
        ArgumentError, match=r"data_keys must be a set, list or tuple of key names, got 'input'.*\{'input'\}"
    ):
        ml.compile(Linear(3), backend, data_keys="input")
    with pytest.raises(ArgumentError, match="trainable_keys must be a set, list or tuple"):
        ml.compile(Linear(3), backend, trainable_keys=5)
    with pytest.raises(ArgumentError, match="data_keys must hold non-empty strings"):
        ml.compile(Linear(3), backend, data_keys=[""])
    with pytest.raises(ArgumentError, match="shapes must be a dict of key -> shape template"):
        ml.compile(Linear(3), backend, shapes=[2, 3])
    with pytest.raises(ArgumentError, match=r"shapes=\{'input': \.\.\.\}\): the shape must be a list or tuple.*got 3"):
        ml.compile(Linear(3), backend, shapes={"input": 3})
    with pytest.raises(ArgumentError, match="got 'ab'"):  # was: two symbols 'a' and 'b'
        ml.compile(Linear(3), backend, shapes={"input": "ab"})
    with pytest.raises(ArgumentError, match="entry -3 is none of them"):
        ml.compile(Linear(3), backend, shapes={"input": [2, -3]})
    with pytest.raises(ArgumentError, match="constant_keys must be a dict"):
        ml.compile(Linear(3), backend, constant_keys=["input"])
    with pytest.raises(ArgumentError, match="inference must be True or False"):
        ml.compile(Linear(3), backend, inference="no")
    with pytest.raises(ArgumentError, match=r"ml.compile\(file_path=.*cannot write .*model.py"):
        ml.compile(Linear(3), backend, shapes={"input": [2, 3]}, file_path=tmp_path / "missing" / "model.py")
    with pytest.raises(ArgumentError, match="NumpyBackend: seed must be a non-negative int or None, got 'a'"):
        ml.NumpyBackend(seed="a")
    with pytest.raises(ArgumentError, match="seed must be a non-negative int"):
        backend.set_seed(-1)
    with pytest.raises(ArgumentError, match=r"unknown option\(s\) \['foo'\]"):
        ml.NumpyBackend(foo=1)
    with pytest.raises(ArgumentError, match="device 'cuda' is not available"):
        ml.NumpyBackend(device="cuda")


def test_lookups_raise_mithril_errors_that_keep_their_builtin_class():
    with pytest.raises(MissingAttributeError, match="has no attribute or key 'nonexistent'"):
        Linear(3).nonexistent  # noqa: B018
    assert not hasattr(Linear(3), "nonexistent")
    with pytest.raises(MissingAttributeError, match="no backend named 'FooBackend'"):
        ml.FooBackend  # noqa: B018
    with pytest.raises(ModelKeyError, match="unknown primitive 'nope'"):
        Primitive("nope")
    with pytest.raises(ArgumentError, match="only models can be added to a Model, got 3"):
        Model().__ior__(3)
    with pytest.raises(ArgumentError, match="has no truth value"):
        bool(Linear(3).output)


_BUILTIN_ERRORS = {
    "Exception", "ValueError", "TypeError", "KeyError", "IndexError", "RuntimeError", "AttributeError",
    "NotImplementedError", "LookupError", "ZeroDivisionError", "OSError", "FileNotFoundError", "ImportError",
}  # fmt: skip


def _builtin_raises(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                if node.exc.func.id in _BUILTIN_ERRORS:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}: raise {node.exc.func.id}(...)")
    return found


def test_core_raises_only_mithril_errors():
    """Every error Mithril raises is a MithrilError (subclasses keep the builtin base callers may catch)."""
    found = [line for line in _builtin_raises(CORE_SRC) if "/testing/" not in line]
    assert not found, "bare builtin exceptions raised in mithril-core:\n" + "\n".join(found)


@pytest.mark.parametrize("name", PYTHON_BACKENDS)
def test_python_backend_packages_raise_only_mithril_errors(name):
    package = Path(importlib.import_module(backend_class(name).__module__.split(".")[0]).__file__).parent
    found = _builtin_raises(package)
    assert not found, f"bare builtin exceptions raised in the {name} backend:\n" + "\n".join(found)


# -- 3./4. evaluate: Mithril's errors before the framework's -------------------------------------
def _embedding_linear(backend):
    model = Model()
    model |= Embedding(10, 4)(input="tokens", output="hidden")
    model |= Linear(3)(input="hidden", output=IOKey("output"))
    model |= ArgMax(axis=-1)(input="output", output=IOKey("label"))
    pm = ml.compile(model, backend, shapes={"tokens": [2, 5]})
    return pm, pm.randomize_params(seed=0)


@pytest.mark.parametrize("name", PYTHON_BACKENDS)
def test_evaluate_errors_name_key_expected_and_given_on_every_python_backend(name):
    backend = make_backend(name)
    pm, params = _embedding_linear(backend)
    tokens = np.ones((2, 5), np.int64)
    cotangents = {"output": np.ones((2, 5, 3)), "hidden": np.zeros((2, 5, 4))}
    with pytest.raises(
        ShapeError, match=r"evaluate\(output_gradients\): 'output' has shape \(2, 5, 4\), expected \(2, 5, 3\)"
    ):
        pm.evaluate(params, {"tokens": tokens}, output_gradients={"output": backend.ones(2, 5, 4)})
    with pytest.raises(ShapeError, match=r"evaluate\(data\): 'tokens' has shape \(2, 6\), expected \(2, 5\)"):
        pm.evaluate(params, {"tokens": np.ones((2, 6), np.int64)})
    with pytest.raises(
        DtypeError, match=r"evaluate\(data\): 'tokens' has float values, but the model expects int values"
    ):
        pm.evaluate(params, {"tokens": np.ones((2, 5), np.float32)})
    with pytest.raises(DtypeError, match=r"evaluate\(data\): 'tokens' \(list\) is not an array of numbers"):
        pm.evaluate(params, {"tokens": [[1, 2], [3]]})
    with pytest.raises(ModelKeyError, match=r"evaluate\(params=\.\.\.\): missing \['bias'\]"):
        pm.evaluate({k: v for k, v in params.items() if k != "bias"}, {"tokens": tokens})
    with pytest.raises(ModelKeyError, match=r"unknown \['extra'\]"):
        pm.evaluate({**params, "extra": params["bias"]}, {"tokens": tokens})
    with pytest.raises(ShapeError, match=r"evaluate\(params\): 'bias' has shape \(4,\), expected \(3,\)"):
        pm.evaluate({**params, "bias": backend.ones(4)}, {"tokens": tokens})
    with pytest.raises(ShapeError, match=r"'weight' has shape \(3, 5\), expected \(10, 4\)"):
        pm.evaluate({**params, "weight": backend.ones(3, 5)}, {"tokens": tokens}, output_gradients=cotangents)
    if name != "numpy":
        with pytest.raises(DtypeError, match=r"evaluate\(params\): 'bias' is a ndarray; expected a .* array"):
            pm.evaluate({**params, "bias": np.ones(3, np.float32)}, {"tokens": tokens})


@pytest.mark.parametrize("name", PYTHON_BACKENDS)
def test_cotangents_whose_shape_follows_no_input_are_checked(name):
    """``reshape(-1)`` of a dynamic input: the cotangent's size is known only in the call."""
    backend = make_backend(name)
    model = Model()
    model |= Linear(3)(input="input", output="hidden")
    model |= Reshape(shape=(-1,))(input="hidden", output=IOKey("output"))
    pm = ml.compile(model, backend, shapes={"input": [None, None, 4]}, data_keys={"input"})
    params = pm.randomize_params(seed=0)
    x = np.ones((2, 5, 4))
    for wrong in (np.ones(29), np.ones(1)):  # the second would broadcast on NumPy
        with pytest.raises(
            ShapeError, match=rf"'output' has shape \({wrong.size},\), but the output 'output' has shape \(30,\)"
        ):
            pm.evaluate(params, {"input": x}, output_gradients={"output": wrong})
    _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": np.ones(30)})  # 'hidden' gets zeros
    np.testing.assert_allclose(backend.to_numpy(grads["bias"]), np.full(3, 10.0), rtol=1e-6)


@pytest.mark.parametrize("name", PYTHON_BACKENDS)
def test_cotangents_are_converted_to_the_models_dtype(name):
    backend = make_backend(name)
    pm = ml.compile(Linear(3), backend, shapes={"input": [2, 4]})
    params = pm.randomize_params(seed=0)
    x = np.ones((2, 4), np.float32)
    for cotangent in (np.ones((2, 3)), np.ones((2, 3), np.int64), np.ones((2, 3)).tolist()):
        _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": cotangent})
        assert {str(backend.to_numpy(g).dtype) for g in grads.values()} == {"float32"}
        np.testing.assert_allclose(backend.to_numpy(grads["bias"]), [2.0, 2.0, 2.0])
    with pytest.raises(DtypeError, match=r"evaluate\(output_gradients\): 'output' is str"):
        pm.evaluate(params, {"input": x}, output_gradients={"output": "abc"})
    for bad in ("output", False, [1.0]):
        with pytest.raises(
            ArgumentError, match=r"evaluate\(output_gradients=\.\.\.\): expected a dict of output name -> cotangent"
        ):
            pm.evaluate(params, {"input": x}, output_gradients=bad)


@pytest.mark.parametrize("name", BACKENDS)
def test_output_gradients_naming_a_non_output_is_an_error(name):
    backend = make_backend(name)
    pm, params = _embedding_linear(backend)
    tokens = np.ones((2, 5), np.int64)
    good = {"output": np.ones((2, 5, 3))}
    with pytest.raises(
        ModelKeyError, match=r"'weight' is an input, not an output.*differentiable outputs are \['hidden', 'output'\]"
    ):
        pm.evaluate(params, {"tokens": tokens}, output_gradients={**good, "weight": np.ones((3, 4))})
    with pytest.raises(ModelKeyError, match=r"'label' is an output of kind int, which has no gradient"):
        pm.evaluate(params, {"tokens": tokens}, output_gradients={**good, "label": np.ones((2, 5))})
    with pytest.raises(ModelKeyError, match=r"'nope' is not a key of the model"):
        pm.evaluate(params, {"tokens": tokens}, output_gradients={**good, "nope": np.ones(1)})
    with pytest.raises(ModelKeyError, match=r"output_gradients is empty.*\['hidden', 'output'\]"):
        pm.evaluate(params, {"tokens": tokens}, output_gradients={})


# -- 5. parameter files --------------------------------------------------------------------------
def test_parameter_file_errors_name_the_file(tmp_path):
    pm = ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [2, 4]})
    params = pm.randomize_params(seed=0)
    for suffix in (".npz", ".safetensors"):
        target = tmp_path / "missing" / f"p{suffix}"
        with pytest.raises(
            CheckpointError, match=rf"save_params\({target}\): the directory {target.parent} does not exist"
        ):
            pm.save_params(target, params)
        with pytest.raises(ModelKeyError, match=rf"^save_params\(.*p{suffix}\)\(params=\.\.\.\): missing \['bias'\]"):
            pm.save_params(tmp_path / f"p{suffix}", {"weight": params["weight"]})
        directory = tmp_path / f"dir{suffix}"
        directory.mkdir()
        with pytest.raises(CheckpointError, match="is a directory, not a file"):
            pm.load_params(directory)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.npz", "dir.safetensors"]  # nothing half-written
    with pytest.raises(ArgumentError, match=r"save_params: path must be a str or path .* got 5 \(int\)"):
        pm.save_params(5)
    with pytest.raises(ArgumentError, match="params must be a dict of name -> array, got list"):
        pm.save_params(tmp_path / "q.npz", [1])
    pm.save_params(tmp_path / "ok.safetensors", params)
    other = ml.compile(Linear(5), ml.NumpyBackend(), shapes={"input": [2, 4]})
    with pytest.raises(
        ShapeError, match=r"^load_params\(.*ok\.safetensors\)\(params\): 'weight' has shape \(3, 4\), expected \(5, 4\)"
    ):
        other.load_params(tmp_path / "ok.safetensors")


def test_unwritable_parameter_file_is_a_checkpoint_error(tmp_path, monkeypatch):
    pm = ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [2, 4]})
    params = pm.randomize_params(seed=0)

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    for suffix in (".npz", ".safetensors"):
        monkeypatch.setattr(np, "savez", refuse)
        monkeypatch.setattr("mithril.serialization.safetensors.struct.pack", refuse)
        with pytest.raises(
            CheckpointError, match=rf"cannot write {tmp_path / ('x' + suffix)}: No space left on device"
        ):
            pm.save_params(tmp_path / f"x{suffix}", params)
        monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_no_warnings_from_reference_special_values():
    case = _case("power-special")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_reference(case, case.make_inputs(), dtype=Dtype.float32)
