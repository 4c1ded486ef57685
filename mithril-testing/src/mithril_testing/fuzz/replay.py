"""What every fuzz reproduction file runs (one definition; the files hold only their model and numbers).

A reproduction file (written by :func:`~mithril_testing.fuzz.write_reproduction`) is a docstring, a
``build_model()`` function in plain Mithril code and one call::

    test_split_single_section = reproduction_test(build_model,
        backend=["numpy", "torch"],
        params={"x0": [[0.5, -1.0], [2.0, 0.25]]},
        expected={"v0": [[0.5, -1.0], [2.0, 0.25]]},
        tolerance={"v0": (1.5e-10, 3e-12)},
    )

:func:`reproduction_test` returns a pytest test parametrized over the backends: it compiles the model on
each (``ml.compile`` with the compile options given), evaluates it on ``params``/``data`` and asserts
outputs (and, with ``cotangents``, gradients) equal the expected float64 numbers within
``(rtol, absolute atol)`` per key (:func:`check_reproduction`). Values are plain nested lists (Python
floats, ints and bools give float64, int64 and bool arrays). A crash reproduction (``isolated=True``) runs
the model in a child process: ``python -m mithril_testing.fuzz.replay FILE BACKEND``.

A lifecycle reproduction (``lifecycle="refill"``, one of :data:`~mithril_testing.fuzz.LIFECYCLE_STEPS`)
then runs that step (:class:`~mithril_testing.fuzz.Lifecycle`: compiled again, arrays refilled in place,
two compiled models interleaved, or threads) and checks every call; ``second=dict(params=..., data=...,
cotangents=..., expected=..., expected_gradients=..., tolerance=..., gradient_tolerance=...)`` holds the
new values the step passes and what the model must answer for them.

Example:
    >>> import mithril as ml, numpy as np
    >>> from mithril.models import Relu
    >>> backend = ml.NumpyBackend(dtype=ml.float64)
    >>> pm = ml.compile(Relu(), backend, shapes={"input": [2]})
    >>> expected = {"output": np.array([0.0, 2.0])}
    >>> check_reproduction(backend, pm, {}, {"input": np.array([-1.0, 2.0])}, expected, {"output": (1e-12, 0.0)})
    >>> test = reproduction_test(Relu, backend="numpy", data={"input": [-1.0, 2.0]},
    ...                          expected={"output": [0.0, 2.0]}, tolerance={"output": (1e-12, 0.0)})
    >>> test("numpy")
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import mithril as ml
import numpy as np
import pytest
from mithril.types import Dtype

__all__ = ["Reproduction", "Values", "check_reproduction", "reproduction_test"]

Tolerances = Mapping[str, tuple[float, float]]


def _check(
    results: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], tolerance: Tolerances, what: str
) -> None:
    """Assert NumPy ``results`` equal ``expected`` within ``tolerance`` (exactly where not float)."""
    assert sorted(results) == sorted(expected), f"{what} keys {sorted(results)}, expected {sorted(expected)}"
    for key, want in expected.items():
        got = results[key]
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
    from ._lifecycle import backend_array, numpy_results

    params_b = {k: backend_array(backend, v) for k, v in params.items()}
    data_b = {k: backend_array(backend, v) for k, v in data.items()}
    _check(numpy_results(backend, pm.evaluate(params_b, data_b)), expected, tolerance, "output")
    if not cotangents:
        return
    seeds = {k: backend.array(v) for k, v in cotangents.items()}
    outputs, gradients = pm.evaluate(params_b, data_b, output_gradients=seeds)
    _check(numpy_results(backend, outputs), expected, tolerance, "output")
    _check(numpy_results(backend, gradients), expected_gradients or {}, gradient_tolerance or {}, "gradient")


def _arrays(values: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in (values or {}).items()}


def _per_backend(value: Any, backend: str, what: str) -> Any:
    """``value`` itself, or ``value[backend]`` when it is given per backend."""
    if isinstance(value, Mapping):
        if backend not in value:
            raise KeyError(f"reproduction: {what} names backends {sorted(value)}, not {backend!r}")
        return value[backend]
    return value


def _per_dtype(tolerance: Mapping[str, Any] | None, dtype: str) -> Mapping[str, Any]:
    """A ``{key: (rtol, atol)}`` mapping, or ``{dtype: {key: (rtol, atol)}}`` for files covering several dtypes."""
    tolerance = tolerance or {}
    if tolerance and all(isinstance(v, Mapping) for v in tolerance.values()):
        if dtype not in tolerance:
            raise KeyError(f"reproduction: tolerances are given for {sorted(tolerance)}, not {dtype!r}")
        return cast(Mapping[str, Any], tolerance[dtype])
    return tolerance


@dataclass
class Values:
    """One set of values passed to a model and what it must answer: the ``second=dict(...)`` of a
    lifecycle reproduction (the first set is the reproduction's own keywords)."""

    params: dict[str, np.ndarray]
    data: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    tolerance: Mapping[str, Any]
    cotangents: dict[str, np.ndarray] = field(default_factory=dict)
    expected_gradients: dict[str, np.ndarray] = field(default_factory=dict)
    gradient_tolerance: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> Values:
        """From the file's literal (nested lists)."""
        known = {"params", "data", "expected", "tolerance", "cotangents", "expected_gradients", "gradient_tolerance"}
        unknown = sorted(set(given) - known)
        if unknown:
            raise KeyError(
                f"reproduction: second=dict(...) has unknown keys {unknown}; expected some of {sorted(known)}"
            )
        arrays = {k: _arrays(given.get(k)) for k in ("params", "data", "expected", "cotangents", "expected_gradients")}
        return cls(
            tolerance=given.get("tolerance") or {}, gradient_tolerance=given.get("gradient_tolerance") or {}, **arrays
        )


@dataclass
class Reproduction:
    """One fuzz reproduction: the model, its compile options, values and expected numbers.

    ``first`` holds the values passed and the numbers expected (its ``tolerance``/``gradient_tolerance``
    also per dtype); ``dtype`` is a dtype name or ``{backend: dtype}``; ``tolerance``/``gradient_tolerance`` are
    ``{key: (rtol, atol)}`` or ``{dtype: {key: (rtol, atol)}}``; ``xfail`` is a reason (every backend) or
    ``{backend: reason}``; ``variant`` names the passes disabled
    (:data:`~mithril_testing.fuzz.VARIANTS`); ``lifecycle`` the lifecycle step run after the ordinary
    check, with ``second`` the other values it passes.
    """

    build_model: Callable[[], Any]
    backends: tuple[str, ...]
    dtype: str | Mapping[str, str] | None
    compile_options: dict[str, Any]
    first: Values
    variant: str = "default"
    xfail: str | Mapping[str, str] | None = None
    isolated: bool = False
    lifecycle: str = ""
    second: Values | None = None

    def backend_instance(self, name: str) -> Any:
        """The backend ``name`` in this reproduction's dtype for it (default: float64 where it has it)."""
        from ._check import make_backend

        dtype = _per_backend(self.dtype, name, "dtype")
        return make_backend(name, None if dtype is None else Dtype.parse(dtype))

    def xfail_reason(self, backend: str) -> str | None:
        if isinstance(self.xfail, Mapping):
            return self.xfail.get(backend)
        return self.xfail

    def run(self, backend: str) -> None:
        """Compile on ``backend`` and assert the expected numbers (in this process)."""
        from ._passes import VARIANTS, passes_disabled

        instance = self.backend_instance(backend)
        dtype = Dtype.parse(instance.dtype).value
        options = self._compile_options()
        with passes_disabled(*VARIANTS[self.variant]):
            pm = ml.compile(self.build_model(), instance, **options)
        first = self.first
        check_reproduction(
            instance,
            pm,
            first.params,
            first.data,
            first.expected,
            _per_dtype(first.tolerance, dtype),
            first.cotangents,
            first.expected_gradients,
            _per_dtype(first.gradient_tolerance, dtype),
        )
        if self.lifecycle:
            self._run_lifecycle(instance, dtype, lambda model: ml.compile(model, instance, **options))

    def _compile_options(self) -> dict[str, Any]:
        options = dict(self.compile_options)
        options.setdefault("shapes", {k: list(v.shape) for k, v in {**self.first.params, **self.first.data}.items()})
        options.setdefault("trainable_keys", list(self.first.params))
        if "constant_keys" in options:
            options["constant_keys"] = _arrays(options["constant_keys"])
        return options

    def _run_lifecycle(self, instance: Any, dtype: str, compile_model: Callable[[Any], Any]) -> None:
        """Run the lifecycle step and assert every call's results (the values it was given decide which)."""
        from ._lifecycle import Feed, Lifecycle

        sets = [self.first] if self.second is None else [self.first, self.second]
        feeds = [Feed(v.params, v.data, v.cotangents) for v in sets]
        for call in Lifecycle(self.build_model, compile_model, instance, feeds).run(self.lifecycle):
            if call.error is not None:
                raise AssertionError(f"{call.label}: {type(call.error).__name__}: {call.error}") from call.error
            values = sets[call.feed]
            assert call.outputs is not None
            _check(call.outputs, values.expected, _per_dtype(values.tolerance, dtype), f"{call.label}: output")
            if call.gradients is not None:
                _check(
                    call.gradients,
                    values.expected_gradients,
                    _per_dtype(values.gradient_tolerance, dtype),
                    f"{call.label}: gradient",
                )

    def run_isolated(self, backend: str) -> None:
        """Run :meth:`run` in a child process (a crash there fails the assertion, not the caller)."""
        import subprocess

        path = self.build_model.__code__.co_filename
        result = subprocess.run(
            [sys.executable, "-m", __name__, path, backend], capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, (
            f"{path} on {backend}: exit status {result.returncode}\n{result.stdout}{result.stderr}"
        )


def reproduction_test(
    build_model: Callable[[], Any],
    *,
    backend: str | Sequence[str],
    dtype: str | Mapping[str, str] | None = None,
    expected: Mapping[str, Any],
    tolerance: Mapping[str, Any],
    params: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    cotangents: Mapping[str, Any] | None = None,
    expected_gradients: Mapping[str, Any] | None = None,
    gradient_tolerance: Mapping[str, Any] | None = None,
    variant: str = "default",
    xfail: str | Mapping[str, str] | None = None,
    isolated: bool = False,
    lifecycle: str = "",
    second: Mapping[str, Any] | None = None,
    **compile_options: Any,
) -> Callable[[str], None]:
    """A pytest test (parametrized over ``backend``) checking ``build_model()`` against expected numbers.

    Args:
        backend: backend name(s); a backend that is not installed is skipped.
        dtype: the dtype (``"float64"``) or ``{backend: dtype}``; default: float64 where the backend has it.
        expected: output key -> expected value (nested lists); ``tolerance``: key -> ``(rtol, atol)``, or
            ``{dtype: {key: (rtol, atol)}}`` when the backends compute in different dtypes.
        params, data: the values passed to ``evaluate``.
        cotangents, expected_gradients, gradient_tolerance: the gradient check (skipped without cotangents).
        variant: the compilation variant (passes disabled), a key of
            :data:`~mithril_testing.fuzz.VARIANTS`.
        xfail: a known bug: a reason (every backend) or ``{backend: reason}``; the test is marked
            ``xfail(strict=True)`` there.
        isolated: run the model in a child process (the bug crashes or hangs the interpreter).
        lifecycle: a lifecycle step (:data:`~mithril_testing.fuzz.LIFECYCLE_STEPS`) to run after the
            ordinary check; ``second``: the other values it passes and their expected numbers, as
            ``dict(params=..., data=..., cotangents=..., expected=..., expected_gradients=..., tolerance=...,
            gradient_tolerance=...)``.
        compile_options: the ``ml.compile`` keywords (``shapes``, ``trainable_keys``, ``data_keys``,
            ``constant_keys``, ``discard_keys``, ``jit``...); ``shapes`` defaults to the shapes of
            ``params`` and ``data``, ``trainable_keys`` to the keys of ``params``.

    >>> from mithril.models import Relu
    >>> test = reproduction_test(Relu, backend=["numpy"], data={"input": [-3.0]},
    ...                          expected={"output": [0.0]}, tolerance={"output": (0.0, 0.0)})
    >>> test.reproduction.backends
    ('numpy',)
    """
    backends = (backend,) if isinstance(backend, str) else tuple(backend)
    _check_choices(variant, lifecycle)
    values = Values(
        _arrays(params),
        _arrays(data),
        _arrays(expected),
        tolerance,
        _arrays(cotangents),
        _arrays(expected_gradients),
        gradient_tolerance or {},
    )
    second_values = None if second is None else Values.of(second)
    reproduction = Reproduction(
        build_model, backends, dtype, dict(compile_options), values, variant, xfail, isolated, lifecycle, second_values
    )
    return _parametrized_test(reproduction, getattr(build_model, "__module__", None))


def _check_choices(variant: str, lifecycle: str) -> None:
    """Refuse a compilation variant or a lifecycle step that does not exist."""
    from ._lifecycle import LIFECYCLE_STEPS
    from ._passes import VARIANTS

    if variant not in VARIANTS:
        raise ValueError(f"reproduction: variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    if lifecycle and lifecycle not in LIFECYCLE_STEPS:
        raise ValueError(f"reproduction: lifecycle must be one of {LIFECYCLE_STEPS}, got {lifecycle!r}")


def _parametrized_test(reproduction: Reproduction, module: str | None) -> Callable[[str], None]:
    """The pytest test of ``reproduction`` (in ``module``): one case per backend, skipped where that backend is
    not installed, ``xfail(strict=True)`` where the reproduction names a known bug of it."""

    def test(backend: str) -> None:
        pytest.importorskip(f"mithril_backend_{backend}", reason=f"the {backend} backend is not installed")
        if reproduction.isolated:
            reproduction.run_isolated(backend)
        else:
            reproduction.run(backend)

    cases = []
    for name in reproduction.backends:
        reason = reproduction.xfail_reason(name)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        cases.append(pytest.param(name, marks=marks, id=name))
    marked = pytest.mark.fuzz(pytest.mark.parametrize("backend", cases)(test))
    marked.reproduction = reproduction  # type: ignore[attr-defined]  # an attribute of the test function
    marked.__module__ = module or marked.__module__
    return marked


def _main(argv: Sequence[str]) -> int:
    """``python -m mithril_testing.fuzz.replay FILE [BACKEND]``: run a reproduction file's checks here."""
    import runpy

    from mithril_testing.fuzz.replay import Reproduction  # the class the file's import sees (not __main__'s)

    if not argv or len(argv) > 2:
        print("usage: python -m mithril_testing.fuzz.replay FILE [BACKEND]", file=sys.stderr)
        return 2
    namespace = runpy.run_path(str(Path(argv[0])))
    found = [v.reproduction for v in namespace.values() if isinstance(getattr(v, "reproduction", None), Reproduction)]
    if not found:
        print(f"{argv[0]}: no reproduction_test(...) in the file", file=sys.stderr)
        return 2
    for reproduction in found:
        for backend in reproduction.backends if len(argv) == 1 else [argv[1]]:
            reproduction.run(backend)
            print(f"{backend}: the reproduction passes")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
