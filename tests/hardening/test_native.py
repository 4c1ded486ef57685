"""Hardening of the native backends (C and GGML): generated code is injection-proof, native code checks
indices and returns errors, zero-size shapes never abort, the compiled-library cache survives damaged
entries, exports never write random weights or overwrite files by surprise, special float values
behave as in NumPy, and bad input never kills the process (each test failed before this work).

Checks whose failure used to kill the interpreter (ggml's assertions abort, a truncated library
SIGBUSes in ``dlopen``, an integer division traps) run their snippet in a subprocess, so a regression
shows as a failed test, not a dead test run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, MithrilError
from mithril.models import IOKey, Linear, Model, Relu, Softplus
from mithril.plugins.lookup import available_backends, backend_class
from mithril_testing.caches import DAMAGES, damage_entry

NATIVE = sorted({"c", "ggml"} & set(available_backends()))
HAVE_CC = shutil.which("cc") is not None or shutil.which("gcc") is not None
pytestmark = pytest.mark.skipif(not NATIVE or not HAVE_CC, reason="needs the C or GGML backend and a C compiler")


def _backend(name: str, threads: int = 1):
    return backend_class(name)(dtype=ml.float32, threads=threads)


def _isolated(code: str, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (so an abort or a crash fails the test, not the test run)."""
    script = tmp_path / f"snippet_{time.monotonic_ns()}.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}
    )


# -- 1. generated code is injection-proof -------------------------------------------------------
def _canary_name(canary: Path) -> str:
    """A block name that, pasted raw into a C comment, closes it and runs ``touch canary`` at load time."""
    return f'x */ __attribute__((constructor)) static void pwn(void) {{ system("touch {canary}"); }} /* y'


@pytest.mark.parametrize("name", NATIVE)
def test_block_names_cannot_run_code_in_the_generated_c(name, tmp_path):
    """A block name closing a C comment ran arbitrary code at evaluate (C) or at ml.compile (GGML's
    custom-op library); now it stays inside the comment."""
    canary = tmp_path / "pwned"
    evil = _canary_name(canary)
    model = Model()
    model |= Linear(3, name=evil)(input="input")
    model += Softplus(name=evil + "2")  # a C custom op on GGML
    model += Relu(name=evil + "3")(output=IOKey("output"))
    pm = ml.compile(model, _backend(name), shapes={"input": [2, 4]}, inference=True)
    params = pm.randomize_params(seed=0)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    out = pm.evaluate(params, {"input": x})["output"]
    w, b = (np.asarray(params[k]) for k in pm.param_keys)
    np.testing.assert_allclose(out, np.maximum(np.log1p(np.exp(x @ w.T + b)), 0), rtol=1e-5, atol=1e-6)
    assert not canary.exists()
    assert evil not in pm.source


@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize(
    "key",
    ["a*/b", 'q"uote\\', "x/*y*/z\n#error injected", "k" * 300, "../../etc/passwd", "%s%n%d", "é\u2028\x00z"],
)
def test_hostile_key_names_compile_and_compute(name, key):
    """Keys with comment terminators broke the C build; they are data, not code."""
    model = Model()
    model |= Linear(2)(input="in" + key)
    model += Relu()(output=IOKey("out" + key))
    pm = ml.compile(model, _backend(name), shapes={"in" + key: [3, 4]})
    params = pm.randomize_params(seed=1)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    out, grads = pm.evaluate(params, {"in" + key: x}, output_gradients={"out" + key: np.ones((3, 2), np.float32)})
    w, b = (np.asarray(params[k]) for k in pm.param_keys)
    np.testing.assert_allclose(out["out" + key], np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-6)
    assert set(grads) == set(pm.param_keys)


@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
def test_exported_program_with_hostile_keys_builds_runs_and_stays_in_its_directory(tmp_path):
    """Quotes and ``%`` in keys broke main.c's string literals, a 300-byte key made a file name too long,
    ``/`` reached file paths: every name is now escaped or sanitised, and the manifest maps keys to files."""
    key_in, key_out = 'in"%s*/../../x\\' + "k" * 300, 'out"\n%n/'
    model = Model()
    model |= Linear(3)(input=key_in)
    model += Relu()(output=IOKey(key_out))
    pm = ml.compile(model, _backend("c"), shapes={key_in: [2, 4]}, inference=True)
    params = pm.randomize_params(seed=2)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    expected = pm.evaluate(params, {key_in: x})[key_out]
    out_dir = tmp_path / "sub" / "program"
    result = pm.export(out_dir, params)
    names = sorted(p.name for p in out_dir.iterdir())
    assert sorted(result.files) == names and os.fspath(result) == str(out_dir)
    assert all(len(n.encode()) <= 120 and "/" not in n and not n.startswith(".") for n in names)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and out_dir not in p.parents) == []
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["params"] == "given"
    assert manifest["inputs"][key_in]["file"] == result.inputs[key_in]
    build = (out_dir / "BUILD").read_text().split()
    subprocess.run(
        [shutil.which("cc") or "gcc", *build[1:], "-o", "model"], cwd=out_dir, check=True, capture_output=True
    )
    x.tofile(out_dir / result.inputs[key_in])
    run = subprocess.run([str(out_dir / "model"), str(out_dir)], capture_output=True)
    assert run.returncode == 0, run.stderr
    assert key_out.encode() in run.stdout
    got = np.fromfile(out_dir / result.outputs[key_out], dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# -- 2. native code checks indices ---------------------------------------------------------------
_INDEX_SNIPPET = """
import json, sys
import numpy as np
import mithril as ml
from mithril.errors import MithrilError
from mithril.models import Add, CrossEntropy, Embedding, Gather, IOKey, Model, Primitive
from mithril.plugins.lookup import backend_class

backend = backend_class("{name}")(dtype=ml.float32, threads=2)


def report(label, fn):
    try:
        fn()
        print(json.dumps([label, "no error"]))
    except Exception as exc:
        print(json.dumps([label, type(exc).__name__, str(exc), isinstance(exc, MithrilError)]))
    sys.stdout.flush()


# the index is tokens + shift: computed, so core's data checks cannot see it; the native code must
cases = [
    ("embedding", Embedding(4, 3), "input", {{}}, [2, 3]),
    ("gather", Gather(axis=1), "index", {{"input": [2, 4]}}, [2, 3]),
    ("cross_entropy", CrossEntropy(), "target", {{"input": [6, 4]}}, [6]),
    ("cross_entropy-spatial", CrossEntropy(), "target", {{"input": [2, 4, 3]}}, [2, 3]),
]
for label, block, key, others, index_shape in cases:
    model = Model()
    model |= Add()(left="tokens", right="shift", output="idx")
    model |= block(**{{key: "idx"}}, **{{k: k for k in others}}, output=IOKey("output"))
    model.set_types(tokens="int", shift="int")
    shapes = {{"tokens": index_shape, "shift": index_shape, **others}}
    pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes))
    params = pm.randomize_params(seed=0)
    tokens = np.arange(int(np.prod(index_shape))).reshape(index_shape) % 4
    tokens.reshape(-1)[-1] = 0
    data = {{
        "tokens": tokens,
        "shift": np.zeros(index_shape, np.int64),
        **{{k: np.ones(s, np.float32) for k, s in others.items()}},
    }}
    report(label + " ok", lambda: pm.evaluate(params, data))
    for bad in (7, -7, 1 << 40):
        shift = np.zeros(index_shape, np.int64)
        shift.reshape(-1)[-1] = bad
        report(f"{{label}} {{bad}}", lambda: pm.evaluate(params, {{**data, "shift": shift}}))

# gradient helpers write through their indices, and core has no data check for them
grads = [
    (
        "embedding_grad",
        {{
            "output_grad": np.ones((2, 3, 4), np.float32),
            "input": np.array([[0, 2, 2], [5, 0, 99]]),
            "like": np.ones((6, 4), np.float32),
        }},
        {{}},
    ),
    (
        "gather_grad",
        {{
            "output_grad": np.ones((3, 4), np.float32),
            "index": np.array([[0, 1, 2, 3]] * 2 + [[0, 1, 2, -9]]),
            "like": np.ones((3, 5), np.float32),
        }},
        {{"axis": 1}},
    ),
    (
        "cross_entropy_grad",
        {{
            "output_grad": np.ones(4, np.float32),
            "input": np.ones((4, 5), np.float32),
            "target": np.array([0, 1, 2, 5]),
        }},
        {{"input_type": "logits", "categorical": True, "eps": 1e-7}},
    ),
]
for prim, inputs, attrs in grads:
    model = Primitive(prim, **attrs)
    model.set_types({{k: ("int" if v.dtype.kind == "i" else "float") for k, v in inputs.items()}})
    pm = ml.compile(model, backend, shapes={{k: list(v.shape) for k, v in inputs.items()}}, data_keys=set(inputs))
    report(prim, lambda: pm.evaluate({{}}, {{k: backend.array(v) for k, v in inputs.items()}}))
"""


@pytest.mark.parametrize("name", NATIVE)
def test_native_code_checks_indices_and_returns_an_error(name, tmp_path):
    """Computed indices out of range (which core's data checks cannot see) and gradient helpers' indices:
    the generated C read/wrote out of bounds and ggml aborted the process; now each is an
    IndexRangeError naming the primitive, its path, the value and the valid range."""
    run = _isolated(_INDEX_SNIPPET.format(name=name), tmp_path)
    assert run.returncode == 0, f"the process died ({run.returncode}): {run.stderr[-2000:]}"
    results = {row[0]: row[1:] for row in map(json.loads, run.stdout.splitlines())}
    for label in ("embedding", "gather", "cross_entropy", "cross_entropy-spatial"):
        assert results[f"{label} ok"] == ["no error"], results[f"{label} ok"]
        for bad in (7, -7, 1 << 40):
            kind, message, is_mithril = results[f"{label} {bad}"]
            if bad == 1 << 40 and name == "ggml":  # ggml's integers are int32: refused when converted
                assert kind == "DtypeError" and is_mithril and "int32" in message, message
                continue
            assert kind == "IndexRangeError" and is_mithril, message
            primitive = label.split("-")[0]
            assert f"index {bad} at position" in message and primitive in message and "0 <= index < 4" in message, (
                message
            )
    for prim, bad in (("embedding_grad", 99), ("gather_grad", -9), ("cross_entropy_grad", 5)):
        kind, message, is_mithril = results[prim]
        assert kind == "IndexRangeError" and is_mithril and f"index {bad} at position" in message, message
        assert prim in message and "0 <= index <" in message, message


@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
def test_exported_program_reports_a_bad_index_instead_of_reading_out_of_bounds(tmp_path):
    from mithril.models import Embedding

    model = Model()
    model |= Embedding(5, 3)(input="tokens", output=IOKey("output"))
    pm = ml.compile(model, _backend("c"), shapes={"tokens": [4]}, data_keys={"tokens"})
    result = pm.export(tmp_path / "prog", pm.randomize_params(seed=0))
    out_dir = result.directory
    build = (out_dir / "BUILD").read_text().split()
    subprocess.run(
        [shutil.which("cc") or "gcc", *build[1:], "-o", "model"], cwd=out_dir, check=True, capture_output=True
    )
    np.array([0, 1, 1 << 40, 2], np.int64).tofile(out_dir / result.inputs["tokens"])
    run = subprocess.run([str(out_dir / "model"), str(out_dir)], capture_output=True, text=True)
    assert run.returncode == 2
    assert "index 1099511627776 at flat position 2" in run.stderr and "0 <= index < 5" in run.stderr


# -- 3. zero-size dimensions ---------------------------------------------------------------------
_ZERO_SNIPPET = """
import json
import numpy as np
import mithril as ml
from mithril.models import Conv2d, Embedding, IOKey, Linear, Model, Relu, Softmax
from mithril.plugins.lookup import backend_class

backend = backend_class("{name}")(dtype=ml.float32, threads=2)
chain = Model()
chain |= Relu()(input="input")
chain += Softmax(axis=-1)(output=IOKey("output"))
cases = {{
    "linear": (Linear(3), {{"input": [0, 4]}}),
    "conv": (Conv2d(3, 2, padding=1), {{"input": [0, 2, 5, 5]}}),
    "relu-softmax": (chain, {{"input": [2, 0]}}),
    "embedding": (Embedding(4, 3), {{"input": [0]}}),
}}
for label, (model, shapes) in cases.items():
    try:
        pm = ml.compile(model, backend, shapes=shapes)
        params = pm.randomize_params(seed=0)
        data = {{k: np.zeros(s, np.int64 if label == "embedding" else np.float32) for k, s in shapes.items()}}
        out = pm.evaluate(params, data)
        row = [label, "ok", {{k: list(np.asarray(v).shape) for k, v in out.items()}}]
        if pm.param_keys:
            cotangents = {{k: np.zeros(np.shape(v), np.float32) for k, v in out.items()}}
            out, grads = pm.evaluate(params, data, output_gradients=cotangents)
            row.append({{k: float(np.abs(np.asarray(g)).sum()) for k, g in grads.items()}})
    except ml.MithrilError as exc:
        row = [label, "refused", type(exc).__name__, str(exc)]
    print(json.dumps(row), flush=True)
"""


@pytest.mark.parametrize("name", NATIVE)
def test_zero_size_dimensions_compute_empty_results_and_never_abort(name, tmp_path):
    """``shapes={"input": [0, 3]}`` aborted the process in ggml (GGML_ASSERT); the function is now
    computed by the C backend's code (empty outputs, zero gradients), as on the C backend."""
    run = _isolated(_ZERO_SNIPPET.format(name=name), tmp_path)
    assert run.returncode == 0, f"the process died ({run.returncode}): {run.stderr[-2000:]}"
    rows = {row[0]: row[1:] for row in map(json.loads, run.stdout.splitlines())}
    assert rows["linear"][:2] == ["ok", {"output": [0, 3]}] and rows["linear"][2] == {"weight": 0.0, "bias": 0.0}
    assert rows["conv"][:2] == ["ok", {"output": [0, 3, 6, 6]}] and rows["conv"][2] == {"weight": 0.0, "bias": 0.0}
    assert rows["relu-softmax"][:2] == ["ok", {"output": [2, 0]}]
    assert rows["embedding"][:2] == ["ok", {"output": [0, 3]}]


# -- 4. the compiled-library cache -----------------------------------------------------------------
_CACHE_SNIPPET = """
import numpy as np, mithril as ml
from mithril.models import Linear
pm = ml.compile(Linear(3), ml.CBackend(threads=1), shapes={"input": [2, 4]})
print(pm.program.library_path)
out = pm.evaluate(pm.randomize_params(seed=0), {"input": np.ones((2, 4), np.float32)})["output"]
print(float(out.sum()))
"""


@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_cache_entries_are_rebuilt(damage, tmp_path):
    """A truncated cached library killed the process with SIGBUS and an empty one failed forever with
    'file too short': each entry's size and hash are recorded at write and checked before loading."""
    env = {"MITHRIL_C_CACHE": str(tmp_path / "cache")}
    first = _isolated(_CACHE_SNIPPET, tmp_path, env)
    assert first.returncode == 0, first.stderr
    library = Path(first.stdout.split()[0])
    data = damage_entry(library, damage)
    second = _isolated(_CACHE_SNIPPET, tmp_path, env)
    assert second.returncode == 0, f"died with {second.returncode}: {second.stderr[-2000:]}"
    assert second.stdout.split()[1] == first.stdout.split()[1]
    assert library.read_bytes() == data or library.stat().st_size > 0


@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
def test_stale_temporaries_are_removed_and_recent_ones_kept(tmp_path, monkeypatch):
    from mithril_backend_c import toolchain

    cache = tmp_path / "cache"
    monkeypatch.setenv("MITHRIL_C_CACHE", str(cache))
    cache.mkdir()
    old, recent = cache / "model-abc.so123.so.tmp", cache / "model-def.so456.so.tmp"
    for path in (old, recent):
        path.write_bytes(b"partial")
    stale = time.time() - toolchain.STALE_TEMPORARY_SECONDS - 60
    os.utime(old, (stale, stale))
    toolchain.build_library("int mithril_cache_probe(void) { return 7; }\n")
    assert not old.exists() and recent.exists()


@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
def test_cache_errors_say_how_to_clear_the_cache(tmp_path, monkeypatch):
    from mithril_backend_c import toolchain

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("MITHRIL_C_CACHE", str(blocker / "cache"))
    with pytest.raises(toolchain.CacheError, match="MITHRIL_C_CACHE"):
        toolchain.build_library("int f(void) { return 1; }\n")
    monkeypatch.setenv("MITHRIL_C_CACHE", str(tmp_path / "cache"))
    path = toolchain.build_library("int mithril_probe_two(void) { return 2; }\n")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(toolchain.CacheError, match=r"MITHRIL_C_CACHE.*deleting that directory clears it"):
        toolchain.load_library(path)
    assert toolchain.load_library(toolchain.build_library("int mithril_probe_two(void) { return 2; }\n"))
    with pytest.raises(toolchain.CCompileError, match="MITHRIL_C_CACHE"):
        toolchain.build_library("int broken( {\n")


# -- 5. export -------------------------------------------------------------------------------------
@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
def test_export_writes_the_given_parameters_or_refuses(tmp_path):
    """``pm.export(dir)`` wrote the last randomize_params() result, not the trained weights."""
    pm = ml.compile(Linear(2), _backend("c"), shapes={"input": [1, 3]}, inference=True)
    current = pm.randomize_params(seed=0)
    with pytest.raises(ArgumentError, match=r"params=.*randomize=True"):
        pm.export(tmp_path / "none")
    assert not (tmp_path / "none").exists()
    trained = {k: np.full(np.shape(v), 0.5, np.float32) for k, v in current.items()}
    result = pm.export(tmp_path / "trained", trained)
    assert result.params == "given"
    weights = np.fromfile(tmp_path / "trained" / "model.weights", dtype=np.float32)
    np.testing.assert_array_equal(weights, np.full(weights.size, 0.5, np.float32))
    random = pm.export(tmp_path / "random", randomize=True, seed=3)
    assert "random" in random.params and "seed=3" in random.params
    assert json.loads((tmp_path / "random" / "manifest.json").read_text())["params"] == random.params
    for key, value in pm.get_parameters().items():  # the model's own parameters are untouched
        np.testing.assert_array_equal(value, current[key])
    with pytest.raises(ArgumentError, match="not both"):
        pm.export(tmp_path / "both", trained, randomize=True)
    with pytest.raises(MithrilError, match=r"missing \['bias'\]"):
        pm.export(tmp_path / "partial", {"weight": trained["weight"]})


@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
def test_export_writes_buffers_with_the_weights(tmp_path):
    """BatchNorm's running statistics are trained state: they go into model.weights (they were read from
    example input files holding random numbers)."""
    from mithril.models import BatchNorm2d, Conv2d

    model = Model()
    model |= Conv2d(2, 3)(input="input")
    model += BatchNorm2d(2)(output=IOKey("output"))
    pm = ml.compile(model, _backend("c"), shapes={"input": [1, 3, 5, 5]}, inference=True)
    params = pm.randomize_params(seed=0)
    params["running_mean"] = np.array([0.5, -1.0], np.float32)
    params["running_var"] = np.array([4.0, 0.25], np.float32)
    x = np.random.default_rng(0).standard_normal((1, 3, 5, 5)).astype(np.float32)
    expected = pm.evaluate(params, {"input": x})["output"]
    result = pm.export(tmp_path / "bn", params)
    assert set(result.inputs) == {"input"}
    manifest = json.loads((tmp_path / "bn" / "manifest.json").read_text())
    assert {"running_mean", "running_var"} <= {w["key"] for w in manifest["weights"]}
    build = (result.directory / "BUILD").read_text().split()
    subprocess.run([shutil.which("cc") or "gcc", *build[1:], "-o", "model"], cwd=result.directory, check=True)
    x.tofile(result.directory / result.inputs["input"])
    subprocess.run([str(result.directory / "model"), str(result.directory)], check=True, capture_output=True)
    got = np.fromfile(result.directory / result.outputs["output"], dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
def test_export_refuses_a_non_empty_directory_unless_overwrite(tmp_path):
    pm = ml.compile(Linear(2), _backend("c"), shapes={"input": [1, 3]}, inference=True)
    params = pm.randomize_params(seed=0)
    target = tmp_path / "out"
    target.mkdir()
    (target / "model.c").write_text("/* mine */")
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(ArgumentError, match=r"not empty .*model\.c.*overwrite=True"):
        pm.export(target, params)
    assert (target / "model.c").read_text() == "/* mine */"
    pm.export(target, params, overwrite=True)
    assert "mithril_evaluate" in (target / "model.c").read_text()
    assert (target / "notes.txt").read_text() == "keep me"
    with pytest.raises(ArgumentError, match="is a file"):
        pm.export(target / "notes.txt", params, overwrite=True)


# -- 6. special values -----------------------------------------------------------------------------
@pytest.mark.skipif("ggml" not in NATIVE, reason="needs the GGML backend")
@pytest.mark.parametrize("block", ["relu", "sign", "leaky_relu"])
def test_ggml_keeps_nan_through_relu_sign_and_leaky_relu(block):
    """ggml_relu / ggml_sgn / ggml_leaky_relu map NaN to 0; every other backend keeps it."""
    from mithril.models import LeakyRelu, Sign

    make = {"relu": Relu, "sign": Sign, "leaky_relu": LeakyRelu}[block]
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0, 1e-30], np.float32)
    pm = ml.compile(make(), _backend("ggml", threads=2), shapes={"input": [8]})
    got = pm.evaluate({}, {"input": x})["output"]
    expected = {"relu": np.maximum(x, 0), "sign": np.sign(x), "leaky_relu": np.where(x > 0, x, 0.01 * x)}[block]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


# -- 7. other crashes on bad input -----------------------------------------------------------------
_FLOORDIV_SNIPPET = """
import json
import numpy as np, mithril as ml
from mithril.models import Primitive
from mithril.plugins.lookup import backend_class
backend = backend_class("{name}")(dtype=ml.float32, threads=1)
model = Primitive("floor_divide")
model.set_types(left="int", right="int")
pm = ml.compile(model, backend, shapes={{"left": [3], "right": [3]}}, data_keys={{"left", "right"}})
low = np.iinfo(backend.array(np.array([1])).dtype).min
out = pm.evaluate({{}}, {{"left": backend.array(np.array([low, 7, -7])), "right": backend.array(np.array([-1, 0, 2]))}})
print(json.dumps(np.asarray(out["output"]).tolist()))
"""


@pytest.mark.parametrize("name", NATIVE)
def test_integer_floor_divide_never_traps(name, tmp_path):
    """``INT64_MIN // -1`` trapped (SIGFPE) in the generated C; it wraps as in NumPy (x // 0 is 0)."""
    run = _isolated(_FLOORDIV_SNIPPET.format(name=name), tmp_path)
    assert run.returncode == 0, f"the process died ({run.returncode}): {run.stderr[-2000:]}"
    _first, by_zero, negative = json.loads(run.stdout.strip().splitlines()[-1])
    assert (by_zero, negative) == (0, -4)


_BROADCAST_SNIPPET = """
import numpy as np, mithril as ml
from mithril.models import Primitive
from mithril.plugins.lookup import backend_class
backend = backend_class("{name}")(dtype=ml.float32, threads=1)
try:
    pm = ml.compile(Primitive("broadcast_to", shape=(3, 4)), backend, shapes={{"input": [2, 1]}})
    print("computed", pm.evaluate({{}}, {{"input": np.zeros((2, 1), np.float32)}})["output"].shape)
except ml.errors.MithrilError as exc:
    print("refused", type(exc).__name__, exc)
"""


@pytest.mark.parametrize("name", NATIVE)
def test_a_broadcast_numpy_refuses_is_an_error_not_an_abort(name, tmp_path):
    """``broadcast_to`` of [2, 1] to [3, 4] passes core's shape rule; ggml_repeat aborted the process and
    the C emitter raised NumPy's bare ValueError. Both now raise a ShapeError naming the shapes."""
    run = _isolated(_BROADCAST_SNIPPET.format(name=name), tmp_path)
    assert run.returncode == 0, f"the process died ({run.returncode}): {run.stderr[-2000:]}"
    assert run.stdout.startswith("refused ShapeError") and "[2, 1]" in run.stdout, run.stdout


@pytest.mark.skipif("c" not in NATIVE, reason="needs the C backend")
def test_the_generated_entry_point_refuses_arrays_of_the_wrong_shape():
    """The compiled function read as many elements as the compiled shape says, whatever it was given
    (core checks shapes first, but the entry point is reachable as ``pm.program.load()``)."""
    pm = ml.compile(Linear(2), _backend("c"), shapes={"input": [4, 3]})
    evaluate = pm.program.load()["evaluate"]
    params = pm.randomize_params(seed=0)
    with pytest.raises(ml.errors.ShapeError, match=r"'input' has shape \(1, 3\), the generated C expects \(4, 3\)"):
        evaluate(params, {"input": np.ones((1, 3), np.float32)})
