"""Checkpoint reading and the loader's report, independent of any model family."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import mithril as ml
import numpy as np
import pytest
from mithril.models import IOKey, Linear, Model, Relu

from mithril_models.checkpoints import (
    CheckpointError,
    Layout,
    SafetensorsFile,
    Target,
    load_hf,
    open_checkpoint,
    save_safetensors,
    transpose,
)
from mithril_models.family import FamilyModel

torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
safetensors_torch = pytest.importorskip("safetensors.torch")


# -- the format ----------------------------------------------------------------------------------
TENSORS = {
    "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
    "f64": np.linspace(-1, 1, 5),
    "f16": np.array([[0.5, -2.0]], dtype=np.float16),
    "i64": np.array([3, -7], dtype=np.int64),
    "u8": np.array([1, 255], dtype=np.uint8),
    "flag": np.array([True, False]),
    "scalar": np.array(2.5, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float32),
}


def test_our_writer_is_read_by_the_safetensors_package(tmp_path):
    path = tmp_path / "ours.safetensors"
    save_safetensors(path, TENSORS, metadata={"format": "np"})
    theirs = safetensors_numpy.load_file(str(path))
    assert set(theirs) == set(TENSORS)
    for key, value in TENSORS.items():
        np.testing.assert_array_equal(theirs[key], value)
        assert theirs[key].dtype == value.dtype


def test_our_reader_reads_the_safetensors_package(tmp_path):
    path = tmp_path / "theirs.safetensors"
    safetensors_numpy.save_file(TENSORS, str(path))
    ours = SafetensorsFile(path)
    assert set(ours.keys()) == set(TENSORS)
    for key, value in TENSORS.items():
        assert ours.shape(key) == value.shape
        np.testing.assert_array_equal(ours.read(key), value)


def test_bfloat16_is_widened_to_float32(tmp_path):
    path = tmp_path / "bf16.safetensors"
    values = torch.tensor([[1.0, -0.5], [3.25, 1e-3]], dtype=torch.bfloat16)
    safetensors_torch.save_file({"w": values}, str(path))
    got = SafetensorsFile(path).read("w")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, values.float().numpy())
    # and from an in-memory state dict
    np.testing.assert_array_equal(open_checkpoint({"w": values}).read("w"), values.float().numpy())


def _write_raw(path, header: bytes, data: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "8-byte header length"),
        (struct.pack("<Q", 10_000) + b"{}", "truncated"),
        (None, "corrupt safetensors header"),
        ("offsets", "do not hold"),
        ("beyond", "truncated"),
        ("dtype", "unsupported dtype"),
    ],
)
def test_broken_files_name_the_path_and_the_problem(tmp_path, content, message):
    path = tmp_path / "broken.safetensors"
    entry = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    if content is None:
        _write_raw(path, b"{not json")
    elif content == "offsets":
        _write_raw(path, json.dumps({"w": {**entry, "data_offsets": [0, 4]}}).encode(), b"\0" * 8)
    elif content == "beyond":
        _write_raw(path, json.dumps({"w": entry}).encode(), b"\0" * 4)
    elif content == "dtype":
        _write_raw(path, json.dumps({"w": {**entry, "dtype": "F8_E9"}}).encode(), b"\0" * 8)
    else:
        path.write_bytes(content)
    with pytest.raises(CheckpointError, match=message) as info:
        open_checkpoint(path)
    assert str(path) in str(info.value)


def test_pickle_files_and_missing_paths_are_refused(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"\x80\x04not really")
    with pytest.raises(CheckpointError, match="pickle"):
        open_checkpoint(tmp_path / "model.bin")
    with pytest.raises(CheckpointError, match="does not exist"):
        open_checkpoint(tmp_path / "nowhere.safetensors")
    with pytest.raises(CheckpointError, match="without model\\.safetensors"):
        open_checkpoint(tmp_path)


def test_save_pretrained_directories_single_and_sharded(tmp_path):
    single = tmp_path / "single"
    single.mkdir()
    save_safetensors(single / "model.safetensors", {"a": np.ones(2, np.float32)})
    assert open_checkpoint(single).keys() == ["a"]
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    save_safetensors(sharded / "part1.safetensors", {"a": np.ones(2, np.float32)})
    save_safetensors(sharded / "part2.safetensors", {"b": np.full(3, 2.0, np.float32)})
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "part1.safetensors", "b": "part2.safetensors"}})
    )
    source = open_checkpoint(sharded)
    assert sorted(source.keys()) == ["a", "b"]
    np.testing.assert_array_equal(source.read("b"), np.full(3, 2.0))


# -- the loader ----------------------------------------------------------------------------------
class TwoLayers(FamilyModel):
    """A minimal family: two Linear layers; the checkpoint stores ``fc2`` transposed and ties ``alias``."""

    family = "two-layers"

    def __init__(self) -> None:
        super().__init__({})
        self |= Linear(8, name="fc1")(input="input")
        self += Relu()
        self += Linear(3, name="fc2")(output=IOKey("output"))

    def checkpoint_layouts(self) -> list[Layout]:
        entries = {
            "fc1.weight": [Target("fc1.weight")],
            "fc1.bias": [Target("fc1.bias")],
            "alias.weight": [Target("fc1.weight")],  # a tied copy
            "fc2.weight_t": [Target("fc2.weight", transpose)],
            "fc2.bias": [Target("fc2.bias")],
        }
        return [Layout("test", entries, ignorable=lambda key: key.endswith("num_batches_tracked"))]


def _reference():
    rng = np.random.default_rng(0)
    w1, b1, w2, b2 = rng.normal(size=(8, 4)), rng.normal(size=8), rng.normal(size=(3, 8)), rng.normal(size=3)
    checkpoint = {
        "fc1.weight": w1,
        "fc1.bias": b1,
        "alias.weight": w1,
        "fc2.weight_t": w2.T,
        "fc2.bias": b2,
        "bn.num_batches_tracked": np.array(3),
    }
    return checkpoint, (lambda x: np.maximum(x @ w1.T + b1, 0) @ w2.T + b2)


@pytest.mark.parametrize("short", [True, False])
def test_load_maps_transforms_and_ties_in_both_naming_modes(short):
    checkpoint, forward = _reference()
    pm = ml.compile(TwoLayers(), ml.NumpyBackend(dtype=ml.float64), shapes={"input": [2, 4]}, use_short_namings=short)
    params = load_hf(pm, {k: torch.tensor(v) for k, v in checkpoint.items()})
    x = np.random.default_rng(1).normal(size=(2, 4))
    np.testing.assert_allclose(pm.evaluate(params, {"input": x})["output"], forward(x), rtol=1e-12)


def test_a_family_model_inside_a_wrapper_is_found():
    checkpoint, forward = _reference()
    wrapper = Model()
    wrapper |= TwoLayers()(input="input", output=IOKey("output"))
    pm = ml.compile(wrapper, ml.NumpyBackend(dtype=ml.float64), shapes={"input": [2, 4]}, use_short_namings=False)
    params = load_hf(pm, checkpoint)
    assert all(name.startswith("two_layers_0.") for name in params)
    x = np.ones((2, 4))
    np.testing.assert_allclose(pm.evaluate(params, {"input": x})["output"], forward(x), rtol=1e-12)


def test_strict_lists_every_problem_in_one_error():
    checkpoint, _ = _reference()
    broken = dict(checkpoint)
    del broken["fc2.bias"]
    broken["fc1.bias"] = np.zeros(5)
    broken["extra.weight"] = np.zeros(2)
    broken["alias.weight"] = checkpoint["fc1.weight"] + 1.0
    pm = ml.compile(TwoLayers(), ml.NumpyBackend(), shapes={"input": [2, 4]})
    with pytest.raises(CheckpointError) as info:
        load_hf(pm, broken)
    text = str(info.value)
    for fragment in (
        "missing",
        "bias_1",
        "unexpected",
        "extra.weight",
        "shape mismatch",
        "fc1.bias -> bias: checkpoint [5], model [8]",
        "differ",
    ):
        assert fragment in text, (fragment, text)
    assert "num_batches_tracked" not in text


def test_non_strict_loads_what_fits_and_warns():
    checkpoint, _ = _reference()
    del checkpoint["fc2.bias"]
    pm = ml.compile(TwoLayers(), ml.NumpyBackend(dtype=ml.float64), shapes={"input": [2, 4]})
    current = pm.randomize_params(seed=3)
    with pytest.warns(UserWarning, match="missing"):
        params = load_hf(pm, checkpoint, strict=False)
    np.testing.assert_array_equal(params["bias_1"], current["bias_1"])
    np.testing.assert_array_equal(params["weight"], checkpoint["fc1.weight"])


def test_models_not_built_by_mithril_models_are_refused():
    pm = ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [1, 2]})
    with pytest.raises(CheckpointError, match="exactly one model built by mithril_models"):
        load_hf(pm, {})


def test_builders_resolve_through_mithril_models_and_name_the_extra_when_missing():
    from mithril.models import create_gpt

    assert create_gpt.__module__.startswith("mithril_models")
    script = "from mithril.models import resnet18"
    env = {**os.environ, "MITHRIL_DISABLE_PLUGINS": "models"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0
    assert 'pip install "mithril-core[models]"' in result.stderr
