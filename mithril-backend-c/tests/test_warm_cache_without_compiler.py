"""A warm cache is all a cached C model needs: a process with no C compiler on ``PATH`` (``$CC`` unset, or
naming a program that is not there) compiles and runs a model whose library the cache holds, with the same
numbers and no compiler run; a model the cache does not hold raises a ``CCompileError`` naming the missing
compiler."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import mithril as ml
import numpy as np
import pytest
from mithril.models import IOKey, Linear, Model, Relu

SHAPES = {"input": [3, 5]}

# the child: compiles the cached model and a model not in the cache, with whatever compiler it finds
_CHILD = """
import json, shutil, sys
import mithril as ml
import numpy as np
from mithril.models import IOKey, Linear, Model, Relu
from mithril_backend_c import toolchain

def model():
    m = Model()
    m |= Linear(4)(input="input", output="hidden")
    m |= Relu()(input="hidden", output=IOKey("output"))
    return m

report = {"compilers_on_path": [c for c in ("cc", "gcc", "clang") if shutil.which(c)]}
arrays = np.load(sys.argv[1])
backend = ml.CBackend(dtype=ml.float64, threads=1)
pm = ml.compile(model(), backend, shapes={"input": [3, 5]})
params = {k: arrays[k] for k in pm.param_keys}
report["output"] = pm.evaluate(params, {"input": arrays["input"]})["output"].tolist()
report["compiler_runs"] = toolchain.compiler_runs()
try:
    ml.compile(model(), backend, shapes={"input": [7, 5]})  # not in the cache
    report["uncached"] = "compiled"
except toolchain.CCompileError as exc:
    report["uncached"] = str(exc)
print(json.dumps(report))
"""


def _model() -> Model:
    model = Model()
    model |= Linear(4)(input="input", output="hidden")
    model |= Relu()(input="hidden", output=IOKey("output"))
    return model


@pytest.fixture
def warm_cache(tmp_path, monkeypatch):
    """A cache warmed by compiling the model here (with the compiler on PATH), the arrays the child reads,
    and the outputs computed here."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MITHRIL_C_CACHE", str(cache))
    pm = ml.compile(_model(), ml.CBackend(dtype=ml.float64, threads=1), shapes=SHAPES)
    params = pm.randomize_params(seed=0)
    x = np.random.default_rng(0).standard_normal(SHAPES["input"])
    arrays = tmp_path / "arrays.npz"
    np.savez(arrays, input=x, **params)
    return cache, arrays, pm.evaluate(params, {"input": x})["output"]


def _run_without_compiler(tmp_path, cache, arrays, cc: str | None) -> dict:
    empty = tmp_path / "bin"  # PATH holds only an empty directory: no cc, gcc or clang
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env.update(PATH=str(empty), MITHRIL_C_CACHE=str(cache), MITHRIL_PROGRESS="0")
    if cc is not None:
        env["CC"] = cc
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(arrays)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("cc", [None, "/nonexistent/bin/cc"], ids=["CC-unset", "CC-missing"])
def test_a_warm_cache_runs_without_a_compiler(tmp_path, warm_cache, cc) -> None:
    assert shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")  # the warm-up needed one
    cache, arrays, expected = warm_cache
    report = _run_without_compiler(tmp_path, cache, arrays, cc)
    assert report["compilers_on_path"] == []
    np.testing.assert_array_equal(np.array(report["output"]), expected)  # the same library, the same numbers
    assert report["compiler_runs"] == 0
    message = report["uncached"]
    assert message.startswith("CBackend needs a C compiler (gcc or clang) on PATH, or set $CC"), message
    if cc is not None:
        assert repr(cc) in message  # names the compiler $CC asked for, which is not there
    assert "the cache" in message and str(cache) in message  # and where it looked for a built library
