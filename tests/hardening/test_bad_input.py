"""Bad input gets Mithril's own clear error on every installed backend, never a crash, a framework's
internal message or a silently wrong answer (each test failed before the hardening work)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import mithril as ml
import numpy as np
import pytest
from _hardening_helpers import BACKENDS, PYTHON_BACKENDS, make_backend
from mithril.errors import (
    ArgumentError,
    CheckpointError,
    DtypeError,
    IndexRangeError,
    MithrilError,
    ModelKeyError,
    ShapeError,
)
from mithril.models import Add, Conv2d, CrossEntropy, Embedding, IOKey, Linear, MaxPool2D, Model, Positions, Relu
from mithril.shapes import ShapeMismatch

# -- generated code is inert ---------------------------------------------------------------------
HOSTILE = "x\nimport os; os.environ['MITHRIL_PWNED'] = '1'\n#"


@pytest.mark.parametrize("name", PYTHON_BACKENDS)
def test_block_and_key_names_cannot_inject_python(name, monkeypatch):
    monkeypatch.delenv("MITHRIL_PWNED", raising=False)
    model = Model()
    key = "in\n'\"put" + HOSTILE
    out_key = "out\"\n" + HOSTILE
    model |= Linear(3, name=HOSTILE)(input=key)
    model += Relu(name=HOSTILE + "2")(output=IOKey(out_key))
    backend = make_backend(name)
    pm = ml.compile(model, backend, shapes={key: [1, 2]})
    params = pm.randomize_params(seed=0)
    out = pm.evaluate(params, {key: backend.array(np.ones((1, 2)))})
    assert "MITHRIL_PWNED" not in os.environ
    w, b = (backend.to_numpy(params[k]) for k in pm.param_keys)
    np.testing.assert_allclose(backend.to_numpy(out[out_key]), np.maximum(np.ones((1, 2)) @ w.T + b, 0), rtol=1e-5)
    assert all(line.startswith("#") or "\n" not in line for line in pm.source.splitlines())


# -- indices out of range ------------------------------------------------------------------------
@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("bad", [10, -1])
def test_embedding_index_out_of_range_is_an_error_naming_key_value_and_range(name, bad):
    model = Model()
    model |= Embedding(10, 4)(input="tokens", output=IOKey("output"))
    backend = make_backend(name)
    pm = ml.compile(model, backend, shapes={"tokens": [2, 3]})
    params = pm.randomize_params(seed=0)
    ids = np.array([[1, 2, 3], [4, 5, bad]])
    with pytest.raises(IndexRangeError, match=rf"'tokens' holds index {bad} at position \(1, 2\).*0 <= index < 10"):
        pm.evaluate(params, {"tokens": ids})


@pytest.mark.parametrize("name", BACKENDS)
def test_class_target_out_of_range_is_an_error(name):
    model = Model()
    model |= Linear(5)(input="input", output="logits")
    model |= CrossEntropy(reduction="mean")(input="logits", target="target", output=IOKey("loss"))
    backend = make_backend(name)
    pm = ml.compile(model, backend, shapes={"input": [2, 3]})
    params = pm.randomize_params(seed=0)
    with pytest.raises(IndexRangeError, match=r"'target' holds index 5.*0 <= index < 5"):
        pm.evaluate(params, {"input": np.ones((2, 3)), "target": np.array([1, 5])}, output_gradients=True)


def test_positions_longer_than_the_table_are_an_error():
    model = Model()
    model |= Positions(axis=1)(input="input", output="pos")
    model |= Embedding(4, 2)(input="pos", output=IOKey("output"))
    pm = ml.compile(model, ml.NumpyBackend(), data_keys={"input"})
    params = pm.randomize_params(seed=0)
    pm.evaluate(params, {"input": np.zeros((1, 4), np.int64)})
    with pytest.raises(IndexRangeError, match=r"length 5 along axis 1.*at most 4 positions"):
        pm.evaluate(params, {"input": np.zeros((1, 5), np.int64)})


# -- silent wrong answers ------------------------------------------------------------------------
@pytest.mark.parametrize("name", BACKENDS)
def test_empty_output_gradients_is_an_error_not_zero_gradients(name):
    backend = make_backend(name)
    pm = ml.compile(Linear(3), backend, shapes={"input": [2, 4]})
    with pytest.raises(ModelKeyError, match=r"output_gradients is empty.*\['output'\]"):
        pm.evaluate(pm.randomize_params(seed=0), {"input": np.ones((2, 4))}, output_gradients={})


@pytest.mark.parametrize("name", [b for b in PYTHON_BACKENDS if b != "numpy"] or ["numpy"])
def test_wrong_cotangent_shape_is_mithrils_error_before_the_framework_sees_it(name):
    backend = make_backend(name)
    pm = ml.compile(Linear(3), backend, shapes={"input": [None, 4]}, data_keys={"input"})
    params = pm.randomize_params(seed=0)
    with pytest.raises(ShapeError, match=r"'output' axis 0 has size 5.*'input' axis 0, of size 2"):
        pm.evaluate(params, {"input": np.ones((2, 4))}, output_gradients={"output": backend.ones(5, 3)})


def test_save_params_writes_exactly_the_named_file_and_checks_first(tmp_path):
    pm = ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [2, 4]})
    params = pm.randomize_params(seed=0)
    with pytest.raises(ArgumentError, match=r"must end in \.safetensors or \.npz"):
        pm.save_params(tmp_path / "x.bin", params)
    assert pm.save_params(tmp_path / "x.npz", params) == tmp_path / "x.npz"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz"]
    bad = {**params, "weight": np.ones((5, 5), np.float32)}
    with pytest.raises(ShapeError, match=r"save_params\(.*y\.npz\).*'weight' has shape \(5, 5\)"):
        pm.save_params(tmp_path / "y.npz", bad)
    assert not (tmp_path / "y.npz").exists()


@pytest.mark.parametrize("content", [b"", b"junk that is not a file format", b"PK\x03\x04broken zip"])
@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_load_params_errors_name_the_file(tmp_path, content, suffix):
    pm = ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [2, 4]})
    path = tmp_path / f"params{suffix}"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        pm.load_params(path)
    assert str(path) in str(info.value)
    with pytest.raises(CheckpointError, match="does not exist"):
        pm.load_params(tmp_path / f"missing{suffix}")


# -- validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: Conv2d(4, kernel_size=0), "kernel_size"),
        (lambda: Conv2d(4, 3, dilation=0), "dilation"),
        (lambda: Conv2d(4, 3, stride=0), "stride"),
        (lambda: Conv2d(4, 3, padding=-1), "padding"),
        (lambda: Conv2d(0, 3), "out_channels"),
        (lambda: Conv2d(4, kernel_size=2.5), "kernel_size"),
        (lambda: Conv2d(4, 3, groups=0, in_channels=4), "groups"),
        (lambda: Linear(dimension="4"), "dimension"),
        (lambda: MaxPool2D(2, stride=0), "stride"),
        (lambda: Embedding(0, 3), "num_embeddings"),
    ],
)
def test_invalid_layer_arguments_name_the_argument(build, fragment):
    with pytest.raises(ArgumentError, match=fragment) as info:
        build()
    assert isinstance(info.value, MithrilError) and isinstance(info.value, ValueError)


def test_api_misuse_gets_clear_errors():
    pm = ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [2, 4]})
    params = pm.randomize_params(seed=0)
    with pytest.raises(ArgumentError, match="needs a logical model"):
        ml.compile(None, ml.NumpyBackend())
    with pytest.raises(ArgumentError, match=r"evaluate\(data=\.\.\.\): expected a dict"):
        pm.evaluate(params, np.ones((2, 4)))
    with pytest.raises(DtypeError, match="'input' is str"):
        pm.evaluate(params, {"input": "abc"})
    with pytest.raises(ArgumentError, match="seed must be a non-negative int"):
        pm.randomize_params(seed=-1)
    with pytest.raises(ArgumentError, match="non-empty"):
        IOKey("")
    model = Model()
    with pytest.raises(ArgumentError, match="non-empty"):
        model |= Linear(3)(input="")
    assert issubclass(ShapeMismatch, ShapeError)


def test_cli_prints_one_line_errors_and_finds_modules_in_the_current_directory(tmp_path):
    (tmp_path / "my_models.py").write_text("from mithril.models import Linear\n\ndef build():\n    return Linear(3)\n")
    cli = [sys.executable, "-m", "mithril.cli"]
    missing = subprocess.run(
        [*cli, "export", "my_models:nothing", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "has no attribute 'nothing'" in lines[0] and "--traceback" in lines[0]
    full = subprocess.run(
        [*cli, "--traceback", "export", "my_models:nothing", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" in full.stderr


@pytest.mark.skipif("c" not in BACKENDS, reason="needs the C backend")
def test_cli_export_says_what_it_wrote_and_never_overwrites_silently(tmp_path):
    (tmp_path / "my_models.py").write_text("from mithril.models import Linear\n\ndef build():\n    return Linear(3)\n")
    command = [
        sys.executable,
        "-m",
        "mithril.cli",
        "export",
        "my_models:build",
        str(tmp_path / "out"),
        "--shape",
        "input=2,4",
    ]
    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "seed=0" in first.stdout and "model.c" in first.stdout
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "overwrite" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    forced = subprocess.run(
        [*command, "--overwrite", "--seed", "3"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert forced.returncode == 0 and "seed=3" in forced.stdout


# -- stable parameter names ----------------------------------------------------------------------
def _mlp(extra_layers: int) -> Model:
    model = Model()
    model |= Linear(8)(input="input")
    model += Relu()
    model += Linear(3)
    for _ in range(extra_layers):
        model += Linear(3)
    return model


def test_names_are_stable_when_blocks_are_added_and_old_files_still_load(tmp_path):
    before = ml.compile(_mlp(0), ml.NumpyBackend(), shapes={"input": [2, 4]})
    assert before.param_keys == ["weight", "bias", "weight_1", "bias_1"]
    saved = before.randomize_params(seed=1)
    before.save_params(tmp_path / "v1.safetensors", saved)

    after = ml.compile(_mlp(1), ml.NumpyBackend(), shapes={"input": [2, 4]})
    assert after.param_keys == ["weight", "bias", "weight_1", "bias_1", "weight_2", "bias_2"]
    assert all(after.input_paths[k] == before.input_paths[k] for k in before.param_keys)  # the same blocks
    with pytest.raises(ModelKeyError, match=r"missing \['bias_2', 'weight_2'\]"):
        after.load_params(tmp_path / "v1.safetensors")
    with pytest.warns(UserWarning, match="kept current values"):
        loaded = after.load_params(tmp_path / "v1.safetensors", strict=False)
    for key in before.param_keys:
        np.testing.assert_array_equal(loaded[key], saved[key])


# -- shape rules refuse what NumPy refuses (before any backend sees it) --------------------------
@pytest.mark.parametrize(
    ("primitive", "attrs", "shape", "fragment"),
    [
        ("broadcast_to", {"shape": (3, 4)}, [2, 1], "does not broadcast to [3, 4]"),
        ("broadcast_to", {"shape": (4,)}, [2, 4], "cannot broadcast"),
        ("max", {"axis": 1}, [3, 0], "axis 1 has size 0"),
        ("argmin", {"axis": None}, [0], "axis 0 has size 0"),
    ],
)
@pytest.mark.parametrize("name", BACKENDS)
def test_shapes_numpy_refuses_are_refused_at_compile_time(name, primitive, attrs, shape, fragment):
    from mithril.models import Primitive

    model = Model()
    model |= Primitive(primitive, **attrs)(input="x", output=IOKey("y"))
    with pytest.raises(ShapeError, match=re.escape(fragment)):
        ml.compile(model, make_backend(name), shapes={"x": shape})


def test_broadcast_to_and_empty_reductions_that_numpy_accepts_still_compile():
    from mithril.models import Primitive

    for primitive, attrs, shape in [("broadcast_to", {"shape": (3, 4)}, [1, 4]), ("sum", {"axis": 1}, [3, 0])]:
        model = Model()
        model |= Primitive(primitive, **attrs)(input="x", output=IOKey("y"))
        pm = ml.compile(model, ml.NumpyBackend(), shapes={"x": shape})
        x = np.ones(shape, dtype=np.float32)
        expected = np.broadcast_to(x, attrs["shape"]) if primitive == "broadcast_to" else x.sum(1)
        np.testing.assert_array_equal(pm.evaluate({}, {"x": x})["y"], expected)


@pytest.mark.skipif("ggml" not in BACKENDS, reason="needs the GGML backend")
def test_data_the_backend_cannot_hold_is_an_error_naming_the_key():
    model = Model()
    model |= Add()(left=IOKey("a", type=ml.Tensor[int]), right="b", output=IOKey("y"))
    pm = ml.compile(model, make_backend("ggml"), shapes={"a": [2], "b": [2]}, data_keys={"a", "b"})
    with pytest.raises(DtypeError, match=r"'a'.*int32.*1099511627776"):
        pm.evaluate({}, {"a": np.array([1, 2**40]), "b": np.array([1, 2])})
    # an index the backend cannot hold is first of all out of range: the more specific error
    model = Model()
    model |= Embedding(10, 3)(input="ids", output=IOKey("y"))
    pm = ml.compile(model, make_backend("ggml"), shapes={"ids": [2]}, data_keys={"ids"})
    with pytest.raises(IndexRangeError, match=r"'ids' holds index 1099511627776"):
        pm.evaluate(pm.randomize_params(), {"ids": np.array([1, 2**40])})
