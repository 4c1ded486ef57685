"""Run a logical model on any installed backend with NumPy in and NumPy out: what the model-library tests
(losses, sequence and classic models, metrics) use to compare every backend with a reference.

Example:
    >>> import numpy as np
    >>> from mithril.models import IOKey, Model, Relu
    >>> model = Model()
    >>> model |= Relu()(input="input", output=IOKey("output"))
    >>> out, grads = evaluate_model("numpy", model, {"input": np.array([-1.0, 2.0])}, cotangent=np.ones(2))
    >>> out["output"].tolist(), grads["input"].tolist()
    ([0.0, 2.0], [0.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from mithril import compile as ml_compile
from mithril.extend import available_backends, backend_class
from mithril.types import Dtype

__all__ = ["DTYPES", "backends", "evaluate_model", "tolerance"]

_TOLERANCE = {"float64": 1e-7, "float32": 2e-4}
DTYPES = tuple(_TOLERANCE)
"""The dtypes the comparisons run in (``"float64"``, ``"float32"``): those :func:`tolerance` knows."""


def backends() -> list[str]:
    """The installed backends' names (sorted; NumPy first)."""
    names = sorted(b for b in available_backends() if b != "*")
    return sorted(names, key=lambda n: n != "numpy")


def tolerance(dtype: Dtype | str) -> float:
    """The relative tolerance of a comparison in ``dtype`` (``float64``: 1e-7, ``float32``: 2e-4)."""
    return _TOLERANCE[dtype.value if isinstance(dtype, Dtype) else dtype]


def _to_backend(backend: Any, value: np.ndarray) -> Any:
    value = np.asarray(value)
    if value.dtype.kind in "iu":
        return backend.array(value, "int")
    if value.dtype.kind == "b":
        return backend.array(value, "bool")
    return backend.array(value)


def evaluate_model(
    backend_name: str,
    model: Any,
    params: Mapping[str, np.ndarray],
    data: Mapping[str, np.ndarray] | None = None,
    *,
    dtype: Dtype | str = "float32",
    cotangent: np.ndarray | None = None,
    output: str = "output",
    constants: Mapping[str, Any] | None = None,
    jit: bool = True,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Compile ``model`` for ``backend_name`` in ``dtype`` with every shape static (those of ``params`` and
    ``data``), evaluate it, and differentiate ``output`` against ``cotangent`` (``None``: a scalar
    ``output`` seeded with 1; no gradients when ``params`` is empty). Returns ``(outputs, gradients)`` as
    float64/int NumPy arrays. Raises ``pytest.skip`` when the backend has no such dtype."""
    dtype = dtype if isinstance(dtype, Dtype) else Dtype(dtype)
    try:
        backend = backend_class(backend_name)(dtype=dtype)
    except TypeError as exc:  # MLX and GGML have no float64
        pytest.skip(f"{backend_name} does not compute in {dtype.value}: {exc}")
    data = dict(data or {})
    shapes = {k: list(np.shape(v)) for k, v in {**params, **data}.items()}
    pm = ml_compile(
        model, backend, shapes=shapes, trainable_keys=set(params), data_keys=set(data),
        constant_keys=dict(constants or {}), jit=jit,
    )  # fmt: skip
    arrays = {k: _to_backend(backend, v) for k, v in params.items()}
    feed = {k: _to_backend(backend, v) for k, v in data.items()}
    if not params:
        outputs, grads = pm.evaluate({}, feed), {}
    else:
        seed = True if cotangent is None else {output: backend.array(np.asarray(cotangent, dtype=np.float64))}
        outputs, grads = pm.evaluate(arrays, feed, output_gradients=seed)
    as_numpy = backend.to_numpy
    return {k: np.asarray(as_numpy(v)) for k, v in outputs.items()}, {
        k: np.asarray(as_numpy(v)) for k, v in grads.items()
    }
