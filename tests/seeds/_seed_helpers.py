"""Helpers for the seed-example tests (one test per Mithril code block of /work/shared/seeds/*.txt).

``backend_or_numpy("jax", **options)`` builds the block's own backend when its plugin is installed and
falls back to ``ml.NumpyBackend`` (never a mock) when it is not; the backend actually used is recorded
per test and printed in the terminal summary ("seed backends").
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.errors import BackendNotAvailableError

CLASS_NAMES = {
    "numpy": "NumpyBackend",
    "jax": "JaxBackend",
    "torch": "TorchBackend",
    "mlx": "MlxBackend",
    "c": "CBackend",
    "ggml": "GGMLBackend",
}
# Options NumpyBackend takes; the rest of a seed's options are dropped on the fallback (and recorded).
NUMPY_OPTIONS = ("dtype", "seed")


MODELS_PENDING = "mithril-models not built yet (models issue)"


def backend_class(name: str) -> type | None:
    """The installed backend class for ``name`` or ``None`` when its plugin is not installed."""
    try:
        return getattr(ml, CLASS_NAMES[name])
    except BackendNotAvailableError:
        return None


def has_backend(name: str) -> bool:
    return backend_class(name) is not None


def _record(node: pytest.Item, text: str) -> None:
    node.user_properties.append(("seed_backend", text))


@pytest.fixture
def backend_or_numpy(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``backend_or_numpy("jax", dtype=ml.float32)`` -> the JAX backend, or NumpyBackend when the JAX
    plugin is not installed (then only ``dtype``/``seed`` are passed on)."""

    def make(name: str, **options: Any) -> Any:
        cls = backend_class(name)
        if cls is not None:
            backend = cls(**options)
            _record(request.node, name)
            return backend
        kept = {k: v for k, v in options.items() if k in NUMPY_OPTIONS}
        if kept.get("dtype") not in (None, ml.float16, ml.float32, ml.float64):
            kept.pop("dtype")
        dropped = sorted(set(options) - set(kept))
        _record(request.node, f"numpy (fallback for {name}" + (f"; dropped {dropped})" if dropped else ")"))
        return ml.NumpyBackend(**kept)

    return make


@pytest.fixture
def backend_class_or_numpy(request: pytest.FixtureRequest) -> Callable[[str], type]:
    """The backend class (for blocks that pass the class around, or construct it with seed options)."""

    def get(name: str) -> type:
        cls = backend_class(name)
        _record(request.node, name if cls is not None else f"numpy (fallback for {name})")
        return cls if cls is not None else ml.NumpyBackend

    return get


def is_numpy(backend: Any) -> bool:
    return getattr(backend, "backend_type", "") == "numpy"


def to_np(backend: Any, value: Any) -> np.ndarray:
    return np.asarray(backend.to_numpy(value), dtype=np.float64)


def check_against_numpy(
    model: Any,
    backend: Any,
    params: Mapping[str, Any],
    data: Mapping[str, Any],
    output_gradients: Mapping[str, Any] | None = None,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    **compile_kwargs: Any,
) -> None:
    """When ``backend`` is not NumPy: compile ``model`` on NumPy (float64) too and check that outputs and
    gradients agree. On NumPy itself there is nothing to compare against."""
    if is_numpy(backend):
        return
    ref_backend = ml.NumpyBackend(dtype=ml.float64)
    ref = ml.compile(model, ref_backend, **compile_kwargs)
    ref_params = {k: ref_backend.array(to_np(backend, v)) for k, v in params.items()}
    ref_data = {k: ref_backend.array(to_np(backend, v)) for k, v in data.items()}
    pm = ml.compile(model, backend, **compile_kwargs)
    if output_gradients is None:
        got = pm.evaluate(params, data)
        want = ref.evaluate(ref_params, ref_data)
    else:
        got, got_g = pm.evaluate(params, data, output_gradients=output_gradients)
        ref_cot = {k: ref_backend.array(to_np(backend, v)) for k, v in output_gradients.items()}
        want, want_g = ref.evaluate(ref_params, ref_data, output_gradients=ref_cot)
        for k in want_g:
            np.testing.assert_allclose(
                to_np(backend, got_g[k]), to_np(ref_backend, want_g[k]), rtol=rtol, atol=atol, err_msg=k
            )
    for k in want:
        np.testing.assert_allclose(to_np(backend, got[k]), to_np(ref_backend, want[k]), rtol=rtol, atol=atol, err_msg=k)


def assert_option_rejected(exc_info: pytest.ExceptionInfo[BaseException], *options: str) -> None:
    """The error names at least one of the rejected options."""
    message = str(exc_info.value)
    assert any(opt in message for opt in options), f"error {message!r} does not name any of {options}"


def construct_or_clear_error(cls: type, **options: Any) -> Any:
    """Build ``cls(**options)``; an option the backend cannot honour must give a TypeError/ValueError that
    names the option (or its value). Returns the backend or the exception."""
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        names = [*options, *(str(v) for v in options.values()), *(str(v).rsplit(".", 1)[-1] for v in options.values())]
        assert any(n in message for n in names), (
            f"{cls.__name__}({options}) failed with {message!r}, naming none of {names}"
        )
        return exc


def requires_models(*names: str) -> Any:
    """``mithril.models`` builders (resnet18, ...) from the mithril-models plugin; skip until it exists."""
    if importlib.util.find_spec("mithril_models") is None:
        pytest.skip(MODELS_PENDING)
    import mithril.models as mm

    return [getattr(mm, n) for n in names] if len(names) != 1 else getattr(mm, names[0])


def forget_primitive(name: str) -> None:
    """Remove a primitive a block registered in-process (``backend.register_op``), so later tests that
    check every registered primitive has implementations do not see it."""
    from mithril.plugins import registry

    reg = registry()
    reg.primitives.pop(name, None)
    reg.primitive_owner.pop(name, None)
