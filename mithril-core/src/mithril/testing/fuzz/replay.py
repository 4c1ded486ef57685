"""The check every fuzz reproduction file runs (one definition; the files hold only their model and
numbers).

Example:
    >>> import mithril as ml, numpy as np
    >>> from mithril.models import Relu
    >>> backend = ml.NumpyBackend(dtype=ml.float64)
    >>> pm = ml.compile(Relu(), backend, shapes={"input": [2]})
    >>> expected = {"output": np.array([0.0, 2.0])}
    >>> check_reproduction(backend, pm, {}, {"input": np.array([-1.0, 2.0])}, expected, {"output": (1e-12, 0.0)})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["check_reproduction"]

Tolerances = Mapping[str, tuple[float, float]]


def _to_backend(backend: Any, value: np.ndarray) -> Any:
    kind = "float" if value.dtype.kind == "f" else "int" if value.dtype.kind in "iu" else "bool"
    return backend.array(value) if kind == "float" else backend.array(value, kind)


def _check(backend: Any, results: Mapping[str, Any], expected: Mapping[str, np.ndarray], tolerance: Tolerances, what: str) -> None:
    assert sorted(results) == sorted(expected), f"{what} keys {sorted(results)}, expected {sorted(expected)}"
    for key, want in expected.items():
        got = np.asarray(backend.to_numpy(results[key]))
        assert got.shape == want.shape, f"{what} {key}: shape {got.shape}, expected {want.shape}"
        if want.dtype.kind != "f":
            np.testing.assert_array_equal(got, want, err_msg=f"{what} {key}")
            continue
        rtol, atol = tolerance[key]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol, err_msg=f"{what} {key}")


def check_reproduction(
    backend: Any,
    pm: Any,
    params: Mapping[str, np.ndarray],
    data: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    tolerance: Tolerances,
    cotangents: Mapping[str, np.ndarray] | None = None,
    expected_gradients: Mapping[str, np.ndarray] | None = None,
    gradient_tolerance: Tolerances | None = None,
) -> None:
    """Evaluate the compiled ``pm`` on ``params``/``data`` and assert its outputs (and, given
    ``cotangents``, its gradients) equal the expected float64 values within (rtol, atol) per key."""
    params_b = {k: _to_backend(backend, v) for k, v in params.items()}
    data_b = {k: _to_backend(backend, v) for k, v in data.items()}
    _check(backend, pm.evaluate(params_b, data_b), expected, tolerance, "output")
    if not cotangents:
        return
    seeds = {k: backend.array(v) for k, v in cotangents.items()}
    outputs, gradients = pm.evaluate(params_b, data_b, output_gradients=seeds)
    _check(backend, outputs, expected, tolerance, "output")
    _check(backend, gradients, expected_gradients or {}, gradient_tolerance or {}, "gradient")
