"""Mithril's data-driven suites (``tests/json_files/`` of a Mithril checkout) run by ``tools/mithril_suites.py``.

``MITHRIL_CHECKOUT=/path/to/mithril pytest tests/test_mithril_suites.py`` runs every suite and expects no failure
outside the runner's exclusions (the target of issue 27; without the variable those tests are skipped, so CI
stays offline). The other tests exercise the runner itself on small case files written here in Mithril's format.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

RUNNER_PATH = Path(__file__).resolve().parents[1] / "tools" / "mithril_suites.py"


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mithril_suites", RUNNER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


runner = _load_runner()
CHECKOUT = os.environ.get("MITHRIL_CHECKOUT")


@pytest.mark.skipif(not CHECKOUT, reason="set MITHRIL_CHECKOUT to a Mithril checkout to run its suites")
@pytest.mark.parametrize("suite", list(runner.SUITES))
def test_mithril_suite(suite: str) -> None:
    result = runner.run_suites(Path(str(CHECKOUT)), [suite])[suite]
    problems = result.problems()
    listing = "\n".join(f"{c.case}: {c.status}: {c.reason}" for c in problems[:40])
    assert not problems, f"{result.summary()}\n{listing}"


# -- the runner on hand-written cases --------------------------------------------------------------------------


def _linear_train_case() -> dict[str, Any]:
    """Linear + SquaredError reduced by Mean, values computed here."""
    x = np.array([[1.0, 2.0], [0.5, -1.0], [2.0, 0.0]])
    y = np.array([[1.0], [0.0], [2.0]])
    w, b = np.array([[0.3, -0.2]]), np.array([0.1])
    out = x @ w.T + b
    residual = out - y
    cost = float(np.mean(residual**2))
    d_out = 2 * residual / residual.size
    return {
        "model": {"name": "Linear", "args": {"dimension": 1}},
        "static_keys": {"input": x.tolist(), "target": y.tolist()},
        "inputs": {"weight": w.tolist(), "bias": b.tolist()},
        "output_specs": {"output": {"loss": "SquaredError", "reduce_steps": ["Mean"], "target_key": "target"}},
        "results": {
            "eval": {"final_cost": cost, "output": out.tolist()},
            "grad": {"weight": (d_out.T @ x).tolist(), "bias": d_out.sum(axis=0).tolist()},
        },
    }


def _model_cases() -> dict[str, Any]:
    add = {
        "model": {"name": "Add", "assigned_differentiabilities": [["left", True], ["right", True]]},
        "inputs": {"left": [[1.0], [2.0]], "right": [[3.0], [-1.0]]},
        "output_grads": {"output": [[1.0], [2.0]]},
        "results": {"eval": {"output": [[4.0], [1.0]]}, "grad": {"left": [[1.0], [2.0]], "right": [[1.0], [2.0]]}},
    }
    composite = {  # relu(a * b) from two submodels connected by name
        "model": {
            "name": "Model",
            "submodels": {"m1": {"name": "Multiply"}, "m2": {"name": "Relu"}},
            "connections": {
                "m1": {"left": "a", "right": "b"},
                "m2": {"input": {"key": {"connect": [["m1", "output"]]}}, "output": "output"},
            },
            "exposed_keys": ["output"],
            "assigned_differentiabilities": [["a", True], ["b", True]],
        },
        "inputs": {"a": [1.0, -2.0], "b": [3.0, 4.0]},
        "output_grads": {"output": [1.0, 1.0]},
        "results": {"eval": {"output": [3.0, 0.0]}, "grad": {"a": [3.0, 0.0], "b": [1.0, 0.0]}},
    }
    wrong = dict(add, results={"eval": {"output": [[4.0], [1.5]]}, "grad": add["results"]["grad"]})
    missing = dict(add, model={"name": "NoSuchModelAnywhere"})
    return {"test_add": add, "test_composite": composite, "test_wrong": wrong, "test_missing_model": missing}


def _write(folder: Path, suite: str, cases: dict[str, Any]) -> Path:
    path = folder / "tests" / "json_files" / runner.SUITES[suite]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cases))
    return path


def test_runner_classifies_model_cases(tmp_path: Path) -> None:
    _write(tmp_path, "models", _model_cases())
    result = runner.run_suites(tmp_path, ["models"])["models"]
    status = {c.case: c for c in result.cases}
    assert status["test_add"].status == runner.PASSED, status["test_add"].reason
    assert status["test_composite"].status == runner.PASSED, status["test_composite"].reason
    assert status["test_wrong"].status == runner.FAILED
    assert "output 'output' differs at [1, 0]" in status["test_wrong"].reason
    assert status["test_missing_model"].status == runner.ERRORED
    assert "NoSuchModelAnywhere" in status["test_missing_model"].reason
    assert (result.passed, result.failed, result.errored, result.excluded) == (2, 1, 1, 0)


def test_runner_train_model_case(tmp_path: Path) -> None:
    _write(tmp_path, "integration", {"test_linear_mse": _linear_train_case()})
    result = runner.run_suites(tmp_path, ["integration"])["integration"]
    assert result.passed == 1, result.cases[0].reason


def test_runner_error_case_and_exclusion(tmp_path: Path) -> None:
    wrong = _model_cases()["test_wrong"]
    cases = {
        "test_results_differ": dict(wrong, error_info={"error_type": "AssertionError", "error_message": ""}),
        "test_no_error": dict(_model_cases()["test_add"], error_info={"error_type": "KeyError", "error_message": "x"}),
    }
    _write(tmp_path, "errors", cases)
    runner.EXCLUSIONS[("errors", "test_no_error")] = "excluded by this test"
    try:
        result = runner.run_suites(tmp_path, ["errors"])["errors"]
        status = {c.case: c.status for c in result.cases}
        assert status == {"test_results_differ": runner.PASSED, "test_no_error": runner.EXCLUDED}
        result = runner.run_suites(tmp_path, ["errors"], run_excluded=True)["errors"]
        assert {c.case: c.status for c in result.cases}["test_no_error"] == runner.FAILED
    finally:
        del runner.EXCLUSIONS[("errors", "test_no_error")]


def test_runner_legacy_shape_case(tmp_path: Path) -> None:
    case = {  # the shape suite's old spelling: Multiply's input/rhs, [[model, key]] connections
        "model": {
            "name": "Model",
            "submodels": {"m1": {"name": "Multiply"}, "m2": {"name": "Add"}},
            "connections": {
                "m1": {"input": "x", "rhs": "y"},
                "m2": {"input": [["m1", "output"]], "rhs": "x", "output": "output"},
            },
        },
        "static_shapes": {"x": [3, 1], "y": [1, 4]},
        "results": {"x": [3, 1], "y": [1, 4], "Multiply_0_output": [3, 4], "output": [3, 4]},
    }
    _write(tmp_path, "shapes", {"test_broadcast": case})
    result = runner.run_suites(tmp_path, ["shapes"])["shapes"]
    assert result.passed == 1, result.cases[0].reason


def test_runner_randomized_case(tmp_path: Path) -> None:
    case = {
        "model": {"name": "Relu"},
        "input_info": {"input": {"shapes": [[1, 3], [2, 4]]}},
        "iterations": 2,
    }
    path = _write(tmp_path, "randomized", {"test_relu": case})
    result = runner.run_suite(path, "randomized", others=[])
    assert result.passed == 1, result.cases[0].reason


def test_runner_time_limit() -> None:
    started = time.perf_counter()
    outcome = runner.run_one("s", "slow", lambda: time.sleep(5), timeout=0.2)
    assert outcome.status == runner.ERRORED and "no result after" in outcome.reason
    assert time.perf_counter() - started < 3


def test_runner_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "models", _model_cases())
    code = runner.main([str(tmp_path), "--suite", "models_directed_test", "--failures", "--reasons"])
    out = capsys.readouterr().out
    assert code == 1
    assert "2 passed" in out and "test_wrong" in out and "test_missing_model" in out
