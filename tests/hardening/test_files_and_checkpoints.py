"""Files and checkpoints (issue 25, "Files"): every writer replaces its file through one safe-writing function
(a temporary created exclusively in the target's folder, then renamed: a symlink planted at any name is
replaced, never written through), an output folder that is a symlink is refused, damaged ``.safetensors``,
shard index and ``weights.bin`` files give one :class:`CheckpointError` naming the file, ``to_checkpoint``
checks what it writes, ``load_hf`` names the checkpoint key it missed, and the exported C programs check
every number they parse and every write. Each test failed before this work (except the two header cases
marked as guards)."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import struct
import subprocess
from pathlib import Path
from typing import Any

import mithril as ml
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mithril.errors import ArgumentError, CheckpointError, MithrilError, ModelKeyError, ShapeError
from mithril.models import Linear
from mithril.plugins.lookup import available_backends
from mithril.serialization import SafetensorsFile, save_safetensors

HAVE_CC = shutil.which("cc") is not None
NEEDS_C = pytest.mark.skipif("c" not in available_backends() or not HAVE_CC, reason="needs the C backend and cc")
RESNET = {"family": "resnet", "block": "basic", "depths": [1], "widths": [8], "stem_width": 8, "num_classes": 3}
GPT = {"family": "gpt2", "bias": True, "block_size": 8, "dims": 16, "num_heads": 2, "num_layers": 1, "vocab_size": 32}
FUZZ = settings(
    max_examples=200, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _victim(tmp_path: Path, name: str = "victim.txt") -> Path:
    """A file outside the folder written to, which a planted symlink points at."""
    victim = tmp_path / name
    victim.write_text("precious")
    return victim


def _assert_untouched(victim: Path) -> None:
    assert victim.read_text() == "precious", "a writer wrote through a symlink"


# -- 1. one safe writer: links are replaced, never written through ------------------------------------------
def _params_model() -> Any:
    pm = ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [2, 4]})
    return pm, pm.randomize_params(seed=0)


def _write_weights_file(path: Path) -> None:
    from mithril_models.export.weights import INPUT, Tensor, write_weights

    write_weights(path, [Tensor("w", np.ones((2, 3), np.float32)), Tensor("input", shape=(1, 3), role=INPUT)])


WRITERS = {
    "save_safetensors": lambda path: save_safetensors(path, {"w": np.arange(6, dtype=np.float32)}),
    "save_params .safetensors": lambda path: _params_model()[0].save_params(path.with_suffix(".safetensors")),
    "save_params .npz": lambda path: _params_model()[0].save_params(path.with_suffix(".npz")),
    "write_weights": _write_weights_file,
}


def _target(path: Path, writer: str) -> Path:
    return path.with_suffix(".npz") if writer.endswith(".npz") else path.with_suffix(".safetensors")


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_writers_replace_links_planted_at_the_file_and_at_the_old_temporary_name(writer, tmp_path):
    """The writers wrote ``<path>.partial`` with truncation, following a symlink planted there (its target was
    overwritten)."""
    victims = [_victim(tmp_path, "victim1.txt"), _victim(tmp_path, "victim2.txt")]
    folder = tmp_path / "out"
    folder.mkdir()
    target = _target(folder / "file", writer) if writer != "write_weights" else folder / "weights.bin"
    (folder / (target.name + ".partial")).symlink_to(victims[0])
    target.symlink_to(victims[1])
    WRITERS[writer](target)
    for victim in victims:
        _assert_untouched(victim)
    assert target.is_file() and not target.is_symlink()
    assert sorted(p.name for p in folder.iterdir()) == sorted([target.name, target.name + ".partial"])


def test_compile_file_path_replaces_a_link_instead_of_writing_through_it(tmp_path):
    """``ml.compile(file_path=...)`` wrote the generated source with ``Path.write_text``, through a symlink
    already at that path."""
    victim = _victim(tmp_path)
    target = tmp_path / "model.py"
    target.symlink_to(victim)
    ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [2, 4]}, file_path=target)
    _assert_untouched(victim)
    assert not target.is_symlink() and "def evaluate" in target.read_text()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is not installed (apt-get install graphviz)")
def test_plot_replaces_a_link_instead_of_writing_through_it(tmp_path):
    """``model.plot(path)`` wrote the picture with ``Path.write_bytes``, through a symlink already there."""
    victim = _victim(tmp_path)
    target = tmp_path / "model.svg"
    target.symlink_to(victim)
    Linear(3).plot(target)
    _assert_untouched(victim)
    assert not target.is_symlink() and "<svg" in target.read_text()


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    from mithril.extend import write_file_atomically

    target = tmp_path / "kept.bin"
    target.write_bytes(b"old")

    def fail(handle: Any) -> None:
        handle.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(CheckpointError, match=rf"cannot write {target}: No space left on device"):
        write_file_atomically(target, fail, where="test")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["kept.bin"]
    with pytest.raises(CheckpointError, match=r"cannot write .*: .*[Ii]s a directory"):
        write_file_atomically(tmp_path, b"x", where="test")
    assert [p.name for p in tmp_path.iterdir()] == ["kept.bin"]


def test_a_long_non_ascii_file_name_is_written(tmp_path):
    """The temporary's name kept 200 characters of the target's: 120 two-byte characters (a valid 244-byte
    name) made a temporary name over the file system's 255-byte limit, so the write failed."""
    from mithril.extend import write_file_atomically

    target = tmp_path / ("\u00e9" * 120 + ".bin")
    assert write_file_atomically(target, b"ok", where="test").read_bytes() == b"ok"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_rewriting_a_private_file_keeps_its_mode(tmp_path):
    """Replacing a file must not widen who can read it (a 0o600 checkpoint stays 0o600)."""
    path = tmp_path / "private.safetensors"
    save_safetensors(path, {"w": np.ones(2, np.float32)})
    path.chmod(0o600)
    save_safetensors(path, {"w": np.zeros(2, np.float32)})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    np.testing.assert_array_equal(SafetensorsFile(path).read("w"), np.zeros(2))


# -- 2. exports: links in the folder are replaced; a symlinked folder is refused -----------------------------
def _export_c(out: Path, overwrite: bool = False) -> Any:
    pm = ml.compile(Linear(2), ml.CBackend(dtype=ml.float32, threads=1), shapes={"input": [1, 3]}, inference=True)
    return pm.export(out, pm.randomize_params(seed=0), overwrite=overwrite)


def _export_resnet(out: Path, overwrite: bool = False) -> Any:
    from mithril_models.checkpoints import to_checkpoint
    from mithril_models.export import export_program, resolve_model

    _, pm = resolve_model(RESNET, image_size=16)
    return export_program(
        RESNET, to_checkpoint(pm, pm.randomize_params(seed=0)), out, image_size=16, overwrite=overwrite
    )


EXPORTS = {
    "pm.export": (_export_c, ["model.c", "main.c", "model.weights", "manifest.json", "input_input.bin"]),
    "export_program": (_export_resnet, ["model.c", "main.c", "weights.bin", "Makefile", "program.h"]),
}


@NEEDS_C
@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_export_with_overwrite_replaces_links_in_the_folder(export, tmp_path):
    """``overwrite=True`` wrote through symlinks already in the folder, changing files outside it."""
    write, names = EXPORTS[export]
    out = tmp_path / "out"
    out.mkdir()
    victims = {name: _victim(tmp_path, f"victim-{name}") for name in names}
    for name, victim in victims.items():
        (out / name).symlink_to(victim)
    result = write(out, overwrite=True)
    for victim in victims.values():
        _assert_untouched(victim)
    assert all((out / name).is_file() and not (out / name).is_symlink() for name in names)
    assert sorted(p.name for p in out.iterdir()) == sorted(result.files)


@NEEDS_C
@pytest.mark.parametrize("export", sorted(EXPORTS))
@pytest.mark.parametrize("dangling", [True, False], ids=["dangling", "to-a-folder"])
def test_export_refuses_an_out_dir_that_is_a_symlink(export, dangling, tmp_path):
    """A dangling symlink as ``out_dir`` gave a raw FileExistsError; one to a folder wrote there silently."""
    write, _ = EXPORTS[export]
    real = tmp_path / "real"
    if not dangling:
        real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ArgumentError) as info:
        write(link, overwrite=True)
    message = str(info.value)
    assert f"'{link}' is a symbolic link to '{real}'" in message and f"pass '{real}'" in message, message
    assert (not real.exists()) if dangling else list(real.iterdir()) == []


# -- 3. the safetensors header: one validating parser ------------------------------------------------------
def _raw(header: Any, data: bytes = b"", text: str | None = None) -> bytes:
    raw = (json.dumps(header) if text is None else text).encode()
    return struct.pack("<Q", len(raw)) + raw + data


W = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
BAD_HEADERS = {
    "deeply nested": (_raw(None, text='{"w": ' + "[" * 100_000 + "]" * 100_000 + "}"), "nested deeper than"),
    "dtype a list": (_raw({"w": {**W, "dtype": ["F32"]}}, b"\0" * 8), "tensor 'w': unsupported dtype [\"F32\"]"),
    "shape of booleans": (_raw({"w": {**W, "shape": [True, True]}}, b"\0" * 8), "tensor 'w': shape [true, true]"),
    "shape beyond any array": (_raw({"w": {**W, "shape": [0, 2**70], "data_offsets": [0, 0]}}), "too large"),
    # a guard: refused before this work too
    "negative offset": (_raw({"w": {**W, "data_offsets": [-8, 0]}}, b"\0" * 8), "offsets [-8, 0]"),
    "offsets of booleans": (
        _raw({"w": {**W, "shape": [], "data_offsets": [False, 4]}}, b"\0" * 8),
        "offsets [false, 4]",
    ),
    "too many dims": (_raw({"w": {**W, "shape": [1] * 65, "data_offsets": [0, 4]}}, b"\0" * 8), "dimensions"),
    "overlapping offsets": (
        _raw({"a": {**W, "data_offsets": [0, 8]}, "b": {**W, "data_offsets": [4, 12]}}, b"\0" * 12),
        "tensor 'b': bytes [4, 12) overlap tensor 'a' at [0, 8)",
    ),
    "duplicate keys": (_raw(None, b"\0" * 16, text=f'{{"w": {json.dumps(W)}, "w": {json.dumps(W)}}}'), "'w' twice"),
    "metadata not a dict": (_raw({"__metadata__": ["x"], "w": W}, b"\0" * 8), "__metadata__"),
    "metadata values not strings": (_raw({"__metadata__": {"epoch": 3}, "w": W}, b"\0" * 8), "'epoch': 3"),
    # a guard: refused before this work too
    "entry not a dict": (_raw({"w": [1, 2]}, b"\0" * 8), "tensor 'w'"),
    "huge integer": (_raw(None, b"\0" * 8, text='{"w": {"dtype": "F32", "shape": [' + "9" * 5000 + "]}}"), "header"),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
def test_malformed_headers_are_a_checkpoint_error_naming_the_file(case, tmp_path):
    content, words = BAD_HEADERS[case]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        SafetensorsFile(path)
    assert str(path) in str(info.value) and words in str(info.value), str(info.value)[:500]


def test_an_unclosed_string_of_escaped_quotes_is_removed_in_one_pass(tmp_path):
    """The nesting check removed JSON strings with a pattern that had to find the closing quote: from every
    quote of an unclosed ``{"\\"\\"...`` it scanned to the end again (quadratic: 40 KB took 3 s, a 100 MB
    header hung the loader). Now an unclosed string is one match to the end of the text."""
    from mithril.serialization.safetensors import _STRINGS

    header = b'{"' + b'\\"' * 200_000
    assert [m.span() for m in _STRINGS.finditer(header)] == [(1, len(header))]
    path = tmp_path / "escapes.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(CheckpointError, match=rf"{path}: corrupt safetensors header \(Unterminated string"):
        SafetensorsFile(path)


def test_a_key_the_file_lacks_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "w.safetensors"
    save_safetensors(path, {"w": np.ones(2, np.float32)})
    with pytest.raises(CheckpointError, match=rf"{path}: no tensor 'v'; it holds 'w'"):
        SafetensorsFile(path).read("v")


@pytest.mark.parametrize(
    ("tensors", "metadata", "words"),
    [
        ({"__metadata__": np.ones(2)}, None, "'__metadata__' is reserved"),
        ({"w": np.ones(2)}, {"epoch": 3}, "metadata must map str to str; got 'epoch': 3 (str: int)"),
        ({"w": np.ones(2)}, {1: "x"}, "metadata must map str to str; got 1: 'x' (int: str)"),
        ({1: np.ones(2)}, None, "tensor names must be str, got 1 (int)"),
    ],
)
def test_writer_refuses_what_the_format_cannot_hold(tensors, metadata, words, tmp_path):
    """A tensor named ``__metadata__`` disappeared on write; non-string metadata gave a raw TypeError."""
    path = tmp_path / "w.safetensors"
    with pytest.raises(ArgumentError) as info:
        save_safetensors(path, tensors, metadata)
    assert words in str(info.value) and str(path) in str(info.value)
    assert list(tmp_path.iterdir()) == []


# -- 4. sharded checkpoints: the index is validated -----------------------------------------------------
def _sharded(tmp_path: Path, weight_map: Any) -> Path:
    save_safetensors(tmp_path / "part1.safetensors", {"a": np.ones(2, np.float32)})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    return index


@pytest.mark.parametrize(
    ("weight_map", "words"),
    [
        (["a"], "weight_map must be an object of tensor name -> shard file, got list"),
        ({"a": 3}, "weight_map['a'] must be a shard file name (str), got 3"),
        ({"a": "/etc/passwd"}, "shard '/etc/passwd' of 'a' must be a file name relative to"),
        ({"a": "../part1.safetensors"}, "shard '../part1.safetensors' of 'a' must be a file name relative to"),
        (
            {"a": "part1.safetensors", "b": "part1.safetensors"},
            "part1.safetensors lacks 'b', which the index maps to it",
        ),
    ],
)
def test_a_bad_shard_index_is_a_checkpoint_error_naming_it(weight_map, words, tmp_path):
    """A weight_map that was not a dict gave AttributeError, a key its shard lacked a bare KeyError at load time;
    absolute and ``..`` shard names were followed."""
    from mithril_models.checkpoints import open_checkpoint

    index = _sharded(tmp_path, weight_map)
    with pytest.raises(CheckpointError) as info:
        open_checkpoint(tmp_path)
    assert str(index) in str(info.value) and words in str(info.value), str(info.value)


def test_a_checkpoint_of_a_wrong_type_is_an_argument_error():
    """``open_checkpoint(5)`` raised a bare TypeError (now ArgumentError, still a TypeError)."""
    from mithril_models.checkpoints import open_checkpoint

    with pytest.raises(ArgumentError, match=r"a checkpoint is a state dict or a path to a \.safetensors file, got int"):
        open_checkpoint(5)


def test_a_deeply_nested_shard_index_is_a_checkpoint_error(tmp_path):
    from mithril_models.checkpoints import open_checkpoint

    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(CheckpointError, match=rf"{index}: .*nested deeper than"):
        open_checkpoint(index)


# -- 5. property tests: damaged files load correctly or raise one MithrilError naming the file ---------------
SAFE_DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=6)
    | st.sampled_from(["F32", "F64", "BF16", "I64", "U8", "BOOL", "__metadata__", "w0"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


@st.composite
def safetensors_files(draw: Any) -> dict[str, np.ndarray]:
    count = draw(st.integers(1, 3))
    tensors = {}
    for i in range(count):
        dtype = draw(st.sampled_from(SAFE_DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        tensors[f"w{i}"] = (np.arange(math.prod(shape)) % 7).astype(dtype).reshape(shape)
    return tensors


def _damage_header(draw: Any, content: bytes) -> bytes:
    """Replace one field of one entry (or the metadata) of the header with any JSON value."""
    (length,) = struct.unpack("<Q", content[:8])
    header = json.loads(content[8 : 8 + length])
    name = draw(st.sampled_from(sorted(header)))
    value = draw(JSON_VALUES)
    if name == "__metadata__" or draw(st.booleans()):
        header[name] = value
    else:
        header[name][draw(st.sampled_from(["dtype", "shape", "data_offsets", "other"]))] = value
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + content[8 + length :]


def _damage_bytes(draw: Any, content: bytes) -> bytes:
    data = bytearray(content)
    kind = draw(st.sampled_from(["set bytes", "truncate", "append"]))
    if kind == "truncate":
        return bytes(data[: draw(st.integers(0, len(data)))])
    if kind == "append":
        return bytes(data) + draw(st.binary(min_size=1, max_size=16))
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def _check_loaded_or_refused(path: Path, load: Any) -> Any:
    """``load(path)``'s result, or ``None`` when it raised one MithrilError naming ``path``."""
    try:
        return load(path)
    except MithrilError as exc:
        assert isinstance(exc, CheckpointError), f"{type(exc).__name__}: {exc}"
        assert str(path) in str(exc), str(exc)
        return None


@FUZZ
@given(data=st.data(), tensors=safetensors_files())
def test_damaged_safetensors_load_correctly_or_raise_a_checkpoint_error(data, tensors, tmp_path_factory):
    path = tmp_path_factory.mktemp("st") / "damaged.safetensors"
    save_safetensors(path, tensors, metadata={"format": "np"})
    content = path.read_bytes()
    damage = data.draw(st.sampled_from(["header", "bytes", "both"]))
    if damage in ("header", "both"):
        content = _damage_header(data.draw, content)
    if damage in ("bytes", "both"):
        content = _damage_bytes(data.draw, content)
    path.write_bytes(content)

    def load(path: Path) -> dict[str, np.ndarray]:
        file = SafetensorsFile(path)
        return {key: file.read(key) for key in file.keys()}

    loaded = _check_loaded_or_refused(path, load)
    if loaded is None:
        return
    file = SafetensorsFile(path)
    for key, array in loaded.items():
        assert array.shape == file.shape(key) and array.nbytes <= len(content)
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    try:
        theirs = safetensors_numpy.load_file(str(path))
    except Exception:  # the reference refuses more (it also asks for contiguous data): nothing to compare
        return
    assert set(theirs) == set(loaded)
    for key, array in theirs.items():
        np.testing.assert_array_equal(loaded[key], array)


@st.composite
def weights_files(draw: Any) -> list[Any]:
    from mithril_models.export.weights import INPUT, Tensor

    tensors = []
    for i in range(draw(st.integers(1, 3))):
        dtype = draw(st.sampled_from([np.float32, np.float64, np.int64]))
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        tensors.append(Tensor(f"t{i}", (np.arange(math.prod(shape)) + i).astype(dtype).reshape(shape)))
    return [*tensors, Tensor("input", shape=(1, draw(st.integers(1, 9))), role=INPUT)]


@FUZZ
@given(data=st.data(), tensors=weights_files())
def test_damaged_weights_files_load_correctly_or_raise_a_checkpoint_error(data, tensors, tmp_path_factory):
    """``read_weights`` raised a bare KeyError (an unknown dtype code), ValueError or UnicodeDecodeError on
    damaged files; the C reader's checks are now the Python reader's too."""
    from mithril_models.export.weights import HEADER, read_weights, write_weights

    path = tmp_path_factory.mktemp("w") / "weights.bin"
    write_weights(path, tensors)
    content = bytearray(path.read_bytes())
    (data_offset,) = struct.unpack("<Q", content[16:24])
    where = data.draw(st.sampled_from(["header and entries", "anywhere", "truncate"]))
    if where == "truncate":
        content = content[: data.draw(st.integers(0, len(content) - 1))]
    else:
        end = data_offset if where == "header and entries" else len(content)
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(8 if where == "header and entries" else 0, end - 1))
            content[at] = data.draw(st.sampled_from([0, 1, 2, 3, 4, 7, 64, 128, 255, data.draw(st.integers(0, 255))]))
    path.write_bytes(bytes(content))
    loaded = _check_loaded_or_refused(path, read_weights)
    if loaded is None:
        return
    assert len(content) >= HEADER
    for tensor in loaded:
        assert tensor.data is None or tensor.data.shape == tensor.shape


def _edit_entry(path: Path, index: int, edits: list[tuple[int, str, Any]]) -> None:
    """Write each ``(offset, struct format, value)`` into entry ``index`` of a weights file."""
    from mithril_models.export.weights import ENTRY, HEADER

    content = bytearray(path.read_bytes())
    for offset, fmt, value in edits:
        struct.pack_into(fmt, content, HEADER + index * ENTRY + offset, value)
    path.write_bytes(bytes(content))


@pytest.mark.parametrize(
    ("edits", "words"),
    [
        ([(52, "<I", 9)], "tensor 0 ('w'): dtype code 9; known: 1 (float32), 2 (float64), 3 (int64)"),
        ([(48, "<I", 5)], "tensor 0 ('w'): role 5"),
        ([(56, "<I", 7)], "tensor 0 ('w'): 7 dims"),
        ([(0, "<48s", b"\xff\xfe" * 24)], "tensor 0: its name is empty or not NUL-terminated UTF-8"),
        ([(120, "<Q", 2**63)], "tensor 0 ('w'): 9223372036854775808 bytes at offset"),
        (
            [(64, "<Q", 0), (72, "<Q", 2**62), (120, "<Q", 0)],
            "tensor 0 ('w'): shape [0, 4611686018427387904] is too large",
        ),
    ],
)
def test_weights_entries_the_c_reader_refuses_are_refused_in_python(edits, words, tmp_path):
    from mithril_models.export.weights import read_weights

    path = tmp_path / "weights.bin"
    _write_weights_file(path)
    _edit_entry(path, 0, edits)
    with pytest.raises(CheckpointError) as info:
        read_weights(path)
    assert str(info.value).startswith(f"{path}: ") and words in str(info.value), str(info.value)


def test_read_weights_of_a_missing_or_empty_file_is_a_checkpoint_error(tmp_path):
    from mithril_models.export.weights import read_weights

    with pytest.raises(CheckpointError, match=rf"cannot read the weights file {tmp_path / 'none.bin'}"):
        read_weights(tmp_path / "none.bin")
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(CheckpointError, match=rf"{tmp_path / 'empty.bin'}: 0 bytes, shorter than the 64-byte header"):
        read_weights(tmp_path / "empty.bin")


# -- 6. to_checkpoint and load_hf's report -------------------------------------------------------------------
def _resnet_pm() -> Any:
    from mithril_models.export import resolve_model

    return resolve_model(RESNET, image_size=16)[1]


def test_to_checkpoint_checks_shapes_and_names_a_missing_parameter():
    """Wrong-shaped parameters were written unchecked; a missing one gave a bare KeyError."""
    from mithril_models.checkpoints import to_checkpoint

    pm = _resnet_pm()
    params = pm.randomize_params(seed=0)
    name = pm.param_keys[0]
    path = pm.input_paths.get(name, name)
    expected = list(pm.shapes[name])
    with pytest.raises(ShapeError) as info:
        to_checkpoint(pm, {**params, name: np.ones((2, 2), np.float32)})
    message = str(info.value)
    assert f"to_checkpoint: {name!r} ({path}) has shape [2, 2], the model's is {expected}" in message, message
    missing = {k: v for k, v in params.items() if k != name}
    with pytest.raises(ModelKeyError) as info:
        to_checkpoint(pm, missing)
    assert f"to_checkpoint: params lacks [{name!r}]" in str(info.value) and path in str(info.value), str(info.value)


def test_load_hf_names_the_checkpoint_key_it_missed():
    """``missing: 1 weight_12`` named the compiled model's short name only, not the checkpoint key expected."""
    from mithril_models import create_gpt
    from mithril_models.checkpoints import load_hf, to_checkpoint

    gpt = create_gpt(bias=True, block_size=8, dims=16, num_heads=2, num_layers=2, vocab_size=32)
    pm = ml.compile(gpt, ml.NumpyBackend(), shapes={"input": [1, 8]}, data_keys={"input"})
    state = to_checkpoint(pm, pm.randomize_params(seed=0))
    del state["transformer.h.1.mlp.c_fc.weight"]
    name = next(k for k in pm.param_keys if pm.input_paths.get(k, k) == "transformer.h.1.mlp.c_fc.weight")
    assert name != "transformer.h.1.mlp.c_fc.weight"  # a short name
    with pytest.raises(CheckpointError) as info:
        load_hf(pm, state)
    assert f"    transformer.h.1.mlp.c_fc.weight -> {name}\n" in str(info.value) + "\n", str(info.value)


# -- 7. the exported programs check what they parse and every write -----------------------------------------
@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from mithril_models.checkpoints import to_checkpoint
    from mithril_models.export import export_program, resolve_model

    built = {}
    for name, config in (("generate", GPT), ("classify", RESNET)):
        options: dict[str, Any] = {"smaller_caches": ()} if name == "generate" else {"image_size": 16}
        _, pm = resolve_model(config, image_size=16)
        out = tmp_path_factory.mktemp(name) / "program"
        exported = export_program(config, to_checkpoint(pm, pm.randomize_params(seed=0)), out, **options)
        built[name] = exported.build(cflags="-O1 -Werror")
    return built


def _run(binary: Path, *args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)


@NEEDS_C
def test_generate_reads_long_token_ids_whole(programs):
    """``--tokens 0000...0019`` (over 31 characters) was cut to its first 31 characters and read as token 0."""
    expected = _run(programs["generate"], "--tokens", "19", "--max-new-tokens", "3")
    assert expected.returncode == 0, expected.stderr
    for text in ("0" * 40 + "19", "5 " + "0" * 40 + "19"):
        got = _run(programs["generate"], "--tokens", text, "--max-new-tokens", "3")
        reference = _run(programs["generate"], "--tokens", text.replace("0" * 40, ""), "--max-new-tokens", "3")
        assert got.returncode == 0 and got.stdout == reference.stdout, (got, reference)
    bad = _run(programs["generate"], "--tokens", "1" * 40, "--max-new-tokens", "3")
    assert bad.returncode == 2 and f"'{'1' * 40}' (token 0) is not an integer in" in bad.stderr, bad.stderr


@NEEDS_C
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_programs_fail_when_a_write_fails(programs, tmp_path):
    """``classify --logits /dev/full`` exited 0 although the write failed (fclose's result was not checked); so did
    both programs with stdout on a full device."""
    image = tmp_path / "image.f32"
    np.zeros((1, 3, 16, 16), np.float32).tofile(image)
    done = _run(programs["classify"], str(image), "--logits", "/dev/full")
    assert done.returncode == 1 and "classify: cannot write /dev/full" in done.stderr, done
    with open("/dev/full", "w") as full:
        for binary, args in (
            (programs["classify"], [str(image)]),
            (programs["generate"], ["--tokens", "1", "--max-new-tokens", "3"]),
        ):
            done = _run(binary, *args, stdout=full)
            assert done.returncode == 1 and "cannot write the output" in done.stderr, done


@NEEDS_C
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_c_export_example_program_fails_when_its_output_cannot_be_written(tmp_path):
    result = _export_c(tmp_path / "out")
    build = (result.directory / "BUILD").read_text().split()
    subprocess.run([shutil.which("cc") or "cc", *build[1:], "-o", "model"], cwd=result.directory, check=True)
    output = result.directory / result.outputs["output"]
    output.symlink_to("/dev/full")
    done = subprocess.run([str(result.directory / "model"), str(result.directory)], capture_output=True, text=True)
    assert done.returncode == 1 and f"cannot write {output}" in done.stderr, done
