"""Compile time: each distinct kernel is emitted once and called from every place it is used, the code
is split into translation units compiled in parallel and cached one by one, and a cached model runs no
compiler. Every test uses its own cache directory, so compiler runs can be counted."""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.models import Model
from mithril_testing.caches import DAMAGES, damage_entry
from mithril_testing.models import gpt2_stack

from mithril_backend_c import toolchain

DIMS, HEADS, SEQ = 16, 2, 4


def _stack(layers: int) -> Model:
    """``layers`` GPT-2 blocks of this file's sizes."""
    return gpt2_stack(layers, DIMS, HEADS)


def _compile(layers: int) -> Any:
    return ml.compile(_stack(layers), ml.CBackend(dtype=ml.float64, threads=1), shapes={"input": [1, SEQ, DIMS]})


def _run(pm: Any) -> tuple[dict, dict]:
    params = pm.randomize_params(seed=0)
    x = np.random.default_rng(1).standard_normal((1, SEQ, DIMS))
    out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": np.ones((1, SEQ, DIMS))})
    return out, grads


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("MITHRIL_C_CACHE", str(path))
    return path


def test_repeated_layers_define_each_kernel_once(cache) -> None:
    """A 4-layer and an 8-layer stack define the same kernels; the deeper one only calls them more."""
    pm4, pm8 = _compile(4), _compile(8)
    code4, code8 = pm4.program.code, pm8.program.code
    assert len(code4.kernels) == len(code8.kernels)
    assert set(code4.kernels) == set(code8.kernels)
    calls4 = sum(k.calls for k in code4.kernels.values())
    calls8 = sum(k.calls for k in code8.kernels.values())
    assert calls8 > 1.8 * calls4 and calls4 > 3 * len(code4.kernels)
    # the one-file text defines each kernel once and calls it from every place it is used
    definitions = re.findall(r"^MT_KERNEL int (mithril_k[0-9a-f]{16})\(", pm8.source, flags=re.M)
    assert sorted(definitions) == sorted(code8.kernels)
    name, kernel = max(code8.kernels.items(), key=lambda item: item[1].calls)
    assert pm8.source.count(f"{name}(") == kernel.calls + 1


def test_shared_kernels_compute_what_each_layer_computes(cache) -> None:
    """The same kernel called with each layer's own parameters: the 8-layer stack's output and gradients
    equal the NumPy backend's."""
    numpy_backend = pytest.importorskip("mithril_backend_numpy")  # noqa: F841 - registers NumpyBackend
    model = _stack(8)
    pm_c = ml.compile(model, ml.CBackend(dtype=ml.float64, threads=1), shapes={"input": [1, SEQ, DIMS]})
    pm_np = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes={"input": [1, SEQ, DIMS]})
    params = pm_np.randomize_params(seed=0)
    x = np.random.default_rng(1).standard_normal((1, SEQ, DIMS))
    g = np.random.default_rng(2).standard_normal((1, SEQ, DIMS))
    out_c, grads_c = pm_c.evaluate(params, {"input": x}, output_gradients={"output": g})
    out_np, grads_np = pm_np.evaluate(params, {"input": x}, output_gradients={"output": g})
    np.testing.assert_allclose(out_c["output"], out_np["output"], rtol=1e-10, atol=1e-10)
    assert set(grads_c) == set(grads_np) and len(grads_c) == 8 * 16  # 2 LayerNorms, 4 + 2 Linears per block
    for key in grads_np:
        np.testing.assert_allclose(grads_c[key], grads_np[key], rtol=1e-8, atol=1e-10, err_msg=key)


def test_units_compile_in_parallel_and_a_cached_model_runs_no_compiler(cache) -> None:
    before = toolchain.compiler_runs()
    pm = _compile(4)  # builds and loads: the runtime object, every unit, the link
    units = pm.program.code.units()
    assert toolchain.compiler_runs() - before == 1 + len(units) + 1
    labels = [u.label for u in units]
    assert [u.optimize for u in units if u.label.startswith("entry ")] == [False, False]
    assert "entry mithril_evaluate" in labels and "entry mithril_evaluate_gradients" in labels
    assert sum(label.startswith("kernels ") for label in labels) >= 2
    out, grads = _run(pm)
    before = toolchain.compiler_runs()
    out2, grads2 = _run(_compile(4))
    assert toolchain.compiler_runs() == before  # from the cache: no compiler at all
    np.testing.assert_array_equal(out["output"], out2["output"])
    assert all(np.array_equal(grads[k], grads2[k]) for k in grads)


def test_a_deeper_model_reuses_the_kernel_objects(cache) -> None:
    """Kernel units depend only on their kernels (and the constants unit only on the distinct constants):
    after the 4-layer stack was built, the 8-layer one compiles only its two entry points, then links."""
    shallow = {u.text for u in _compile(4).program.code.units()}
    before = toolchain.compiler_runs()
    units = _compile(8).program.code.units()
    new = [u.label for u in units if u.text not in shallow]
    assert new == ["entry mithril_evaluate", "entry mithril_evaluate_gradients"]
    assert toolchain.compiler_runs() - before == len(new) + 1


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_part_is_rebuilt(cache, damage) -> None:
    pm = _compile(2)
    out, grads = _run(pm)
    parts = sorted(cache.glob("part-*.o"), key=lambda p: p.stat().st_size)
    assert len(parts) == len(pm.program.code.units())
    part = parts[-1]
    damage_entry(part, damage)
    library = pm.program.library_path
    library.unlink()  # the model must be linked again, from its parts
    assert not toolchain.verify_entry(part)
    before = toolchain.compiler_runs()
    out2, grads2 = _run(_compile(2))
    assert toolchain.compiler_runs() - before == 2  # the damaged part, then the link
    assert toolchain.verify_entry(part) and part.stat().st_size > 0
    np.testing.assert_array_equal(out["output"], out2["output"])
    assert all(np.array_equal(grads[k], grads2[k]) for k in grads)


def test_a_compiler_error_names_the_part(cache) -> None:
    from mithril_backend_c.csource import TranslationUnit

    good = TranslationUnit("kernels 1/2", "int mithril_good(void) { return 1; }\n")
    bad = TranslationUnit("kernels 2/2", "int mithril_bad( { return 1; }\n")
    with pytest.raises(toolchain.CCompileError, match=r"failed on kernels 2/2 the generated source .*part-.*\.c"):
        toolchain.build_units([good, bad])


def test_progress_names_what_is_compiling(cache, capsys) -> None:
    """The parallel compile is a progress task: what is compiling, the parts, the elapsed time."""
    pm = _compile(1)
    assert len(pm.program.code.units()) == 7  # 4 groups of kernels, the constants, 2 entry points
    shutil.rmtree(cache)  # compile everything again, inside the task
    pm.program.build("CBackend: compiling stack", verbose=True)
    err = capsys.readouterr().err
    assert "CBackend: compiling stack (7 parts + runtime)" in err
    assert re.search(r"\b[1-9]/9\b", err) and re.search(r"\[(\d+ s|\d\d:\d\d)", err)  # steps done, elapsed time
    pm.program.build("CBackend: compiling stack", verbose=False)  # cached and silenced: nothing shown
    assert capsys.readouterr().err == ""


def test_probes_are_remembered_and_a_damaged_record_is_probed_again(cache) -> None:
    """The flag and BLAS probes (test programs compiled and run) are remembered in the cache; a record
    that holds anything but a possible answer is probed again and rewritten."""
    expected_flags, expected_blas = toolchain.flags(), toolchain.blas_info()
    try:
        toolchain.flags.cache_clear()
        toolchain.blas_info.cache_clear()
        assert toolchain.flags() == expected_flags and toolchain.blas_info() == expected_blas  # probed
        records = {p.name.split("-")[1]: p for p in cache.glob("probe-*.json")}
        assert set(records) == {"flags", "blas"}
        records["flags"].write_text('["-O0", "-fsanitize=address"]')  # not a possible answer
        records["blas"].write_text("{not json")
        toolchain.flags.cache_clear()
        toolchain.blas_info.cache_clear()
        assert toolchain.flags() == expected_flags and toolchain.blas_info() == expected_blas
        assert json.loads(records["flags"].read_text()) == list(expected_flags)
        assert json.loads(records["blas"].read_text()) == expected_blas
    finally:
        toolchain.flags.cache_clear()
        toolchain.blas_info.cache_clear()
