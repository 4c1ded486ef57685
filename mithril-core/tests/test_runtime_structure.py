"""The runtime's parts and core's test hooks: ``PhysicalModel`` built from typed records over a runner, input
checks and persistence; ``mithril.extend.pass_hook`` observing and substituting the optimisation passes; the
plugin system loaded on first use, never by ``import mithril``."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable

import mithril as ml
import numpy as np
import pytest
from mithril.extend import PASS_NAMES, pass_hook
from mithril.models import IOKey, Linear, Model, Primitive
from mithril.runtime import CompileReport, PhysicalModel, ProgramSignature, RunSettings
from mithril.runtime.input_checks import InputChecks
from mithril.runtime.persistence import ParameterStore
from mithril.runtime.runner import Runner


def _twins() -> Model:
    """``exp(x)`` twice (CSE merges them) and a constant ``1 + 2`` (folding computes it)."""
    model = Model()
    model |= Primitive("exp")(input="x", output=IOKey("a"))
    model |= Primitive("exp")(input="x", output=IOKey("b"))
    model |= Primitive("add")(left=1.0, right=2.0, output=IOKey("c"))
    return model


def _compile(model: Model) -> PhysicalModel:
    return ml.compile(model, ml.NumpyBackend(), shapes={"x": [2]}, data_keys=["x"], inference=True, jit=False)


def test_a_physical_model_is_its_records_over_three_parts() -> None:
    pm = ml.compile(Linear(2), ml.NumpyBackend(), shapes={"input": [1, 3]}, jit=False)
    assert isinstance(pm._signature, ProgramSignature) and isinstance(pm._checks, InputChecks)
    assert isinstance(pm._runner, Runner) and isinstance(pm._parameters, ParameterStore)
    assert pm._signature.state_keys == {"weight", "bias"} and pm._signature.data_keys == {"input"}
    params = pm.randomize_params(seed=0)
    assert pm.get_parameters().keys() == params.keys()
    _, grads = pm.evaluate(params, {"input": [[1.0, 2.0, 3.0]]}, output_gradients={"output": [[1.0, 1.0]]})
    np.testing.assert_allclose(grads["weight"], [[1.0, 2.0, 3.0]] * 2)


def test_the_constructor_takes_the_records() -> None:
    compiled = ml.compile(Linear(2), ml.NumpyBackend(), shapes={"input": [1, 3]}, jit=False)
    again = PhysicalModel(
        compiled.backend,
        compiled.program,
        compiled._signature,
        RunSettings(jit=False),
        CompileReport(compiled.model, compiled.primitive_count, 0.0),
    )
    params = compiled.randomize_params(seed=0)
    x = {"input": np.ones((1, 3), np.float32)}
    np.testing.assert_array_equal(again.evaluate(params, x)["output"], compiled.evaluate(params, x)["output"])
    assert again.file_path is None and again.plan is None and again.optimizer is None


def test_the_fast_path_refuses_what_the_full_checks_refuse() -> None:
    """A direct entry point (where the backend has one) and the full checks give the same errors."""
    pm = ml.compile(Linear(2), ml.NumpyBackend(), shapes={"input": [1, 3]}, jit=False)
    params = pm.randomize_params(seed=0)
    with pytest.raises(ml.ShapeError, match="expected \\(1, 3\\)"):
        pm.evaluate(params, {"input": np.ones((1, 2), np.float32)})
    with pytest.raises(ml.errors.ModelKeyError, match="missing \\['input'\\]"):
        pm.evaluate(params, {})


def test_pass_hook_observes_every_pass() -> None:
    seen: list[tuple[str, int]] = []

    def record(name: str, run: Callable[[], int]) -> int:
        changed = run()
        seen.append((name, changed))
        return changed

    with pass_hook(record):
        pm = _compile(_twins())
    assert {name for name, _ in seen} == set(PASS_NAMES)
    changed = {name: sum(n for seen_name, n in seen if seen_name == name) for name in PASS_NAMES}
    assert changed["cse"] == 1 and changed["constant_folding"] == 1
    assert pm.primitive_count == 1


def test_pass_hook_substitutes_passes_and_nests() -> None:
    baseline = _compile(_twins()).primitive_count
    order: list[str] = []

    def outer(name: str, run: Callable[[], int]) -> int:
        order.append("outer")
        return run()

    def skip_cse(name: str, run: Callable[[], int]) -> int:
        order.append("inner")
        return 0 if name == "cse" else run()

    with pass_hook(outer), pass_hook(skip_cse):
        pm = _compile(_twins())
    assert pm.primitive_count == baseline + 1  # the twin exp stays
    assert order[:2] == ["outer", "inner"]
    assert _compile(_twins()).primitive_count == baseline  # gone with the block
    with pytest.raises(TypeError, match="hook\\(name, run\\)"):
        with pass_hook("cse"):  # type: ignore[arg-type]
            pass


def test_pass_hooks_stay_in_their_thread() -> None:
    counts: list[int] = []

    def compile_elsewhere() -> None:
        counts.append(_compile(_twins()).primitive_count)

    with pass_hook(lambda name, run: 0):  # nothing runs here...
        worker = threading.Thread(target=compile_elsewhere)
        worker.start()
        worker.join()
        assert _compile(_twins()).primitive_count > counts[0]
    assert counts == [_compile(_twins()).primitive_count]  # ...and everything there


def test_import_mithril_loads_neither_the_plugins_nor_the_extension_surface_nor_numpy() -> None:
    code = (
        "import sys, mithril; print(sorted(m for m in ('mithril.plugins', 'mithril.extend', 'pluggy', "
        "'mithril_backend_numpy', 'numpy') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
