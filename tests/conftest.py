"""Fixtures shared by the repository-level tests."""

from __future__ import annotations

import mithril as ml
import pytest


def _python_backend_params() -> list:
    """Each installed Python backend in float64 and float32; JAX (its jit of whole models takes 10-20 s) is slow."""
    params = []
    for name in ("NumpyBackend", "JaxBackend", "TorchBackend"):
        for dtype in (ml.float64, ml.float32):
            try:
                backend = getattr(ml, name)(dtype=dtype)
            except Exception:  # plugin not installed in this environment
                continue
            marks = [pytest.mark.slow] if name == "JaxBackend" else []
            params.append(pytest.param(backend, marks=marks, id=f"{name}-{dtype.name}"))
    return params


@pytest.fixture(params=_python_backend_params())
def python_backend(request: pytest.FixtureRequest) -> ml.Backend:
    """A NumPy, JAX or PyTorch backend in float64 or float32 (the model tests written in Mithril's style)."""
    return request.param
