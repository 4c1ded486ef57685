"""``BackendConformanceTests``: the op x dtype x forward/gradient suite every backend package runs.

A backend package subclasses it in a few lines (langchain-tests style); pytest does the rest:

    import mithril as ml
    from mithril_testing import BackendConformanceTests

    class TestNumpy(BackendConformanceTests):
        backend_factory = staticmethod(lambda dtype: ml.NumpyBackend(dtype=dtype))
        dtypes = (ml.float32, ml.float64)
        unsupported = frozenset()        # primitives the backend declares it lacks
        grad_dtypes = (ml.float64,)      # dtypes for finite-difference gradient checks

Tests generated for the subclass:

- ``test_forward[<case>-<dtype>]``: every case in :data:`~mithril_testing.cases.CASES` compiled as a
  one-primitive model and compared with the plain-NumPy reference (:data:`REFERENCES`) within
  :data:`TOLERANCES`; output kinds (bool/int/float) and float dtypes are checked too.
- ``test_gradient[<case>-<dtype>]``: central finite differences (float64, ``eps = 1e-6``) of
  ``sum(output * random_cotangent)`` through the *reference*, compared with the backend's gradients
  for every trainable input. Non-differentiable and random primitives are not checked.
- ``test_random_ops[<primitive>-<dtype>]``: ``randn``, ``randint`` and ``dropout_mask``: shapes,
  ranges, statistics, and determinism for a fixed backend seed.
- ``test_every_primitive_has_a_case_or_is_declared_unsupported`` and
  ``test_unsupported_primitives_are_refused`` (compiling a declared gap raises
  :class:`~mithril.errors.UnsupportedPrimitiveError`).
- ``test_required_primitives_are_implemented``: every primitive of :func:`required_primitives` that is not
  declared unsupported has an implementation. Autograd backends (JAX, PyTorch, MLX) are not asked for the
  gradient helpers (``conv2d_grad_input``, ...): core derives them from the backend's ``vjp``, and
  ``test_autograd_backends_derive_gradient_helpers`` checks that the package does not write its own.
  Manual-gradient backends (NumPy, C, GGML) must implement them (their backward passes call them).

Optional class attributes: ``known_failures`` (``{test id, case id or primitive: reason}`` -> xfail),
``extra_cases`` / ``extra_references`` (a package that adds primitives tests them here too) and ``jit``.
Override :meth:`BackendConformanceTests.compile_case` to change how a case is compiled.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import pytest
from mithril.errors import UnsupportedPrimitiveError
from mithril.extend import array_api, plugin_registry
from mithril.types import Dtype

from .cases import CASES, Case, spec_for
from .references import REFERENCES

__all__ = [
    "FD_EPS",
    "RANDOM_PRIMITIVES",
    "TOLERANCES",
    "BackendConformanceTests",
    "Tolerance",
    "required_primitives",
]  # fmt: skip


class Tolerance(NamedTuple):
    """Comparison tolerances for one dtype.

    An element passes when ``|got - expected| <= atol * scale + rtol * |expected|`` with
    ``scale = max(1, max |expected|)``: the absolute part grows with the magnitude of the whole output,
    so entries that are small only through cancellation (a matmul entry near zero) are judged against
    the size of the terms that produced them.
    """

    rtol: float
    atol: float
    grad_rtol: float
    grad_atol: float


TOLERANCES: dict[Dtype, Tolerance] = {
    # forward: a few ulps of float64 after short accumulations. gradient: central differences with
    # eps=1e-6 are good to ~1e-9 relative (truncation ~eps^2, round-off ~1e-16/eps).
    Dtype.float64: Tolerance(rtol=1e-10, atol=1e-12, grad_rtol=1e-6, grad_atol=1e-7),
    # float32 has ~7 significant digits; gradients of float32 backends compared with float64 differences
    Dtype.float32: Tolerance(rtol=1e-5, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4),
    # float16 has ~3 significant digits, bfloat16 ~2-3
    Dtype.float16: Tolerance(rtol=1e-2, atol=1e-2, grad_rtol=5e-2, grad_atol=5e-2),
    Dtype.bfloat16: Tolerance(rtol=2e-2, atol=2e-2, grad_rtol=1e-1, grad_atol=1e-1),
}
"""Per-dtype tolerances of ``test_forward`` (``rtol``, ``atol``) and ``test_gradient`` (``grad_*``)."""

FD_EPS = 1e-6
"""Step of the central finite differences (always taken in float64)."""

RANDOM_PRIMITIVES = ("randn", "randint", "dropout_mask")


def required_primitives(backend: Any) -> frozenset[str]:
    """The registered primitives a backend package must implement itself: all of them for a
    manual-gradient backend; for an autograd backend, all but the gradient helpers, which core derives
    from its ``vjp`` (:mod:`mithril.backends.array_api.derived`). Primitives with a decomposition
    (``lstm_recurrence``) are optional: a backend without them compiles the decomposition; so are variants
    (``reshape_to``), which run the base primitive's implementation.

        >>> import mithril as ml
        >>> "conv2d_grad_input" in required_primitives(ml.NumpyBackend())
        True
    """
    registered = frozenset(
        p for p, spec in plugin_registry().primitives.items() if spec.decomposition is None and spec.variant_of is None
    )
    return registered - array_api.GRADIENT_HELPERS if backend.supports_autograd else registered


# -- helpers -------------------------------------------------------------------------------------
def _host_inputs(case: Case) -> set[str]:
    """The case's inputs a model computes on the host (given to the compiled model as constants)."""
    return set(spec_for(case.primitive).host_inputs)


def _round_to(array: np.ndarray, dtype: Dtype) -> np.ndarray:
    """Float ``array`` rounded to ``dtype`` (bfloat16: float32 holding bfloat16-representable values)."""
    if array.dtype.kind != "f" or dtype is Dtype.float64:
        return array
    if dtype is Dtype.bfloat16:
        bits = np.asarray(array, dtype=np.float32).view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        return np.where(np.isnan(array), np.float32(np.nan), rounded.view(np.float32))
    return array.astype(np.dtype(dtype.value))


def _kind(array: np.ndarray) -> str:
    if array.dtype == np.bool_:
        return "bool"
    if array.dtype.kind in "iu":
        return "int"
    return "float"  # includes extension float types such as ml_dtypes.bfloat16


def _scale(expected: np.ndarray) -> float:
    finite = np.abs(expected[np.isfinite(expected)])
    return max(1.0, float(finite.max())) if finite.size else 1.0


def _assert_close(got: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str) -> None:
    got64, exp64 = got.astype(np.float64), expected.astype(np.float64)
    np.testing.assert_allclose(
        got64, exp64, rtol=rtol, atol=atol * _scale(exp64), equal_nan=True, err_msg=what, verbose=True
    )


def run_reference(
    case: Case,
    arrays: Mapping[str, np.ndarray],
    references: Mapping[str, Callable[..., Any]] = REFERENCES,
    dtype: Dtype | None = None,
) -> dict[str, np.ndarray]:
    """The reference outputs of ``case`` for ``arrays`` (float inputs upcast to float64), by output key.

    With ``dtype`` (the dtype a backend computes in) the expectations are in that dtype: a reference
    whose result depends on it (one with a ``float_dtype`` keyword, e.g. ``nan_to_num``, whose default
    replacements of infinities are the dtype's largest finite values) is told it, and float results are
    rounded to it (so ``power(1e-30, -2)`` overflows to ``inf`` in float32 as it does on the backend).
    An explicit ``dtype`` attribute of the case decides its result's dtype instead.

        >>> from mithril_testing.cases import Case
        >>> case = Case("nan_to_num", {"input": np.array([np.inf])})
        >>> float(run_reference(case, case.make_inputs(), dtype=Dtype.float32)["output"][0])
        3.4028234663852886e+38
    """
    spec = spec_for(case.primitive)
    attrs = spec.resolve_attributes(dict(case.attrs))
    args = [None if arrays.get(k) is None else _upcast(arrays[k]) for k in spec.input_keys(attrs)]
    function = references[case.primitive]
    extra = {"float_dtype": dtype} if dtype is not None and _takes_float_dtype(function) else {}
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are what special-value cases expect
        result = function(*args, **attrs, **extra)
    keys = spec.output_keys(attrs)
    results = (result,) if len(keys) == 1 else tuple(result)
    outputs = {key: np.asarray(value) for key, value in zip(keys, results, strict=True)}
    if dtype is not None:
        explicit = attrs.get("dtype")
        target = explicit if isinstance(explicit, Dtype) else Dtype.parse(dtype)
        with np.errstate(over="ignore"):
            outputs = {key: _round_to(value, target) for key, value in outputs.items()}
    return outputs


def _takes_float_dtype(function: Callable[..., Any]) -> bool:
    """Whether a reference computes a dtype-dependent result and accepts the tested dtype."""
    try:
        return "float_dtype" in inspect.signature(function).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


def _upcast(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64) if _kind(array) == "float" else array


class BackendConformanceTests:
    """Subclass and set ``backend_factory``, ``dtypes``, ``unsupported`` and ``grad_dtypes`` (see module doc)."""

    backend_factory: ClassVar[Callable[[Dtype], Any]]
    """``dtype -> backend instance``; wrap a lambda in ``staticmethod``."""
    dtypes: ClassVar[Sequence[Dtype]] = (Dtype.float32, Dtype.float64)
    unsupported: ClassVar[frozenset[str]] = frozenset()
    """Primitives the backend declares it lacks (its capability-table gaps)."""
    grad_dtypes: ClassVar[Sequence[Dtype]] = (Dtype.float64,)
    known_failures: ClassVar[Mapping[str, str]] = {}
    """``{test id ("gelu-float16"), case id ("gelu-tanh") or primitive ("gelu"): reason}``: expected failures."""
    extra_cases: ClassVar[Sequence[Case]] = ()
    extra_references: ClassVar[Mapping[str, Callable[..., Any]]] = {}
    jit: ClassVar[bool] = False

    # -- parametrisation ---------------------------------------------------------------------------
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        name = metafunc.function.__name__
        dtype_ids: Callable[[Dtype | str], str] = lambda d: Dtype.parse(d).value  # noqa: E731
        if name == "test_forward":
            params = [self._param(c, d, forward=True) for c in self._cases() for d in self.dtypes]
            metafunc.parametrize("case,dtype", params)
        elif name == "test_gradient":
            params = [
                self._param(c, d, forward=False) for c in self._cases() if c.checks_gradient() for d in self.grad_dtypes
            ]
            metafunc.parametrize("case,dtype", params)
        elif name == "test_random_ops":
            params = []
            for primitive in RANDOM_PRIMITIVES:
                for dtype in self.dtypes:
                    marks = self._marks(primitive, primitive, f"{primitive}-{dtype_ids(dtype)}")
                    params.append(pytest.param(primitive, dtype, id=f"{primitive}-{dtype_ids(dtype)}", marks=marks))
            metafunc.parametrize("primitive,dtype", params)
        elif name == "test_unsupported_primitives_are_refused":
            metafunc.parametrize("primitive", sorted(self.unsupported))

    def _cases(self) -> list[Case]:
        return [*CASES, *self.extra_cases]

    def _param(self, case: Case, dtype: Dtype, *, forward: bool) -> Any:
        test_id = f"{case.id}-{Dtype.parse(dtype).value}"
        marks = self._marks(case.primitive, case.id, test_id)
        if forward and spec_for(case.primitive).random:
            marks.append(pytest.mark.skip(reason=f"{case.primitive} is random: checked by test_random_ops"))
        return pytest.param(case, dtype, id=test_id, marks=marks)

    def _marks(self, primitive: str, case_id: str, test_id: str) -> list[Any]:
        if primitive in self.unsupported:
            return [pytest.mark.skip(reason=f"{type(self).__name__} declares primitive {primitive!r} unsupported")]
        for key in (test_id, case_id, primitive):
            if key in self.known_failures:
                return [pytest.mark.xfail(reason=f"known failure ({key}): {self.known_failures[key]}", strict=False)]
        return []

    # -- building blocks (overridable) ------------------------------------------------------------
    def make_backend(self, dtype: Dtype) -> Any:
        return type(self).backend_factory(dtype)

    def compile_case(self, backend: Any, case: Case, arrays: Mapping[str, np.ndarray], trainable: Sequence[str]) -> Any:
        """Compile ``case`` as a one-primitive model: ``trainable`` inputs are parameters, the rest data.

        Inputs are declared with the kinds of their arrays (free inputs would otherwise default to float).
        Host inputs (``reshape_to``'s shape) are constants: a model computes them from shapes, and folded they
        make the call its base primitive (``reshape``), which is what backends implement.
        """
        import mithril as ml
        from mithril.models import Primitive

        model = Primitive(case.primitive, **case.attrs)
        model.set_types({key: _kind(array) for key, array in arrays.items()})
        host = _host_inputs(case)
        return ml.compile(
            model,
            backend,
            shapes={key: list(array.shape) for key, array in arrays.items()},
            data_keys=set(arrays) - set(trainable) - host,
            trainable_keys=set(trainable),
            constant_keys={key: arrays[key] for key in host if key in arrays},
            jit=self.jit,
        )

    def _references(self) -> Mapping[str, Callable[..., Any]]:
        return {**REFERENCES, **self.extra_references}

    def _prepare(self, case: Case, dtype: Dtype) -> tuple[dict[str, np.ndarray], list[str]]:
        """Inputs rounded to ``dtype`` and the trainable keys: the float differentiable inputs of cases
        that check gradients (so forward tests also build the backward pass); all data otherwise."""
        arrays = {k: _round_to(v, Dtype.parse(dtype)) for k, v in case.make_inputs().items()}
        return arrays, case.differentiable_inputs(arrays) if case.checks_gradient() else []

    @staticmethod
    def _split_inputs(
        backend: Any, arrays: Mapping[str, np.ndarray], trainable: Sequence[str], case: Case | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        host = _host_inputs(case) if case is not None else set()
        params = {k: backend.array(v) for k, v in arrays.items() if k in trainable}
        data = {k: backend.array(v) for k, v in arrays.items() if k not in trainable and k not in host}
        return params, data

    # -- tests -------------------------------------------------------------------------------------
    def test_forward(self, case: Case, dtype: Dtype) -> None:
        dtype = Dtype.parse(dtype)
        tol = TOLERANCES[dtype]
        backend = self.make_backend(dtype)
        arrays, trainable = self._prepare(case, dtype)
        compiled = self.compile_case(backend, case, arrays, trainable)
        expected = run_reference(case, arrays, self._references(), dtype=dtype)  # first: in_place may write the inputs
        outputs = compiled.evaluate(*self._split_inputs(backend, arrays, trainable, case))
        explicit = case.attrs.get("dtype")
        for key, ref in expected.items():
            what = f"{case.id} [{dtype.value}], output {key!r}"
            assert key in outputs, f"{what}: missing from the outputs {sorted(outputs)}"
            got = np.asarray(backend.to_numpy(outputs[key]))
            assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
            assert _kind(got) == _kind(ref), f"{what}: {_kind(got)} result ({got.dtype}), expected {_kind(ref)}"
            if isinstance(explicit, Dtype) and explicit is not Dtype.bfloat16:
                assert got.dtype.name == explicit.value, (
                    f"{what}: dtype {got.dtype}, attribute asks for {explicit.value}"
                )
            elif _kind(ref) == "float" and explicit is None and dtype is not Dtype.bfloat16:
                assert got.dtype.name == dtype.value, f"{what}: dtype {got.dtype}, expected the backend's {dtype.value}"
            if _kind(ref) == "float":
                _assert_close(got, ref, tol.rtol, tol.atol, what)
            else:
                np.testing.assert_array_equal(got, ref, err_msg=what)

    def test_gradient(self, case: Case, dtype: Dtype) -> None:
        dtype = Dtype.parse(dtype)
        tol = TOLERANCES[dtype]
        references = self._references()
        arrays, trainable = self._prepare(case, dtype)
        assert trainable, f"{case.id}: no float differentiable input to check"
        base = {k: _upcast(v) for k, v in arrays.items()}
        expected = run_reference(case, base, references)
        rng = np.random.default_rng(case.seed + 1)
        without = spec_for(case.primitive).outputs_without_gradient
        # cotangents rounded to the dtype, so the backend and the differences see the same ones
        cotangents = {
            k: _upcast(_round_to(rng.standard_normal(v.shape), dtype))
            for k, v in expected.items()
            if _kind(v) == "float" and k not in without
        }

        def objective(key: str, value: np.ndarray) -> float:
            outs = run_reference(case, {**base, key: value}, references)
            return math.fsum(float(np.sum(outs[k] * c)) for k, c in cotangents.items())

        backend = self.make_backend(dtype)
        compiled = self.compile_case(backend, case, arrays, trainable)
        params, data = self._split_inputs(backend, arrays, trainable, case)
        output_gradients = {k: backend.array(_round_to(c, dtype)) for k, c in cotangents.items()}
        _, grads = compiled.evaluate(params, data, output_gradients=output_gradients)
        for key in trainable:
            numeric = np.zeros_like(base[key])
            for idx in np.ndindex(*base[key].shape):
                plus, minus = base[key].copy(), base[key].copy()
                plus[idx] += FD_EPS
                minus[idx] -= FD_EPS
                numeric[idx] = (objective(key, plus) - objective(key, minus)) / (2 * FD_EPS)
            what = f"{case.id} [{dtype.value}]: gradient of {key!r}"
            assert key in grads, f"{what}: missing from the gradients {sorted(grads)}"
            got = np.asarray(backend.to_numpy(grads[key]))
            assert got.shape == numeric.shape, f"{what}: shape {got.shape}, expected {numeric.shape}"
            _assert_close(got, numeric, tol.grad_rtol, tol.grad_atol, what)

    def test_random_ops(self, primitive: str, dtype: Dtype) -> None:
        dtype = Dtype.parse(dtype)
        check = {"randn": self._check_randn, "randint": self._check_randint, "dropout_mask": self._check_dropout}
        check[primitive](dtype)

    def _draw(
        self,
        dtype: Dtype,
        primitive: str,
        attrs: Mapping[str, Any],
        inputs: Mapping[str, np.ndarray],
        seed: int,
        draws: int = 1,
    ) -> list[np.ndarray]:
        """``draws`` evaluations of one compiled random primitive on a backend seeded with ``seed``."""
        backend = self.make_backend(dtype)
        backend.set_seed(seed)
        case = Case(primitive, dict(inputs), dict(attrs), id=f"{primitive}-random")
        compiled = self.compile_case(backend, case, dict(inputs), [])
        data = {k: backend.array(v) for k, v in inputs.items()}
        results = []
        for _ in range(draws):
            outputs = compiled.evaluate({}, data)
            results.append(np.asarray(backend.to_numpy(outputs["output"])))
        return results

    def _check_determinism(
        self, dtype: Dtype, primitive: str, attrs: Mapping[str, Any], inputs: Mapping[str, np.ndarray]
    ) -> None:
        first, second = self._draw(dtype, primitive, attrs, inputs, seed=1234, draws=2)
        (again,) = self._draw(dtype, primitive, attrs, inputs, seed=1234)
        (other,) = self._draw(dtype, primitive, attrs, inputs, seed=4321)
        np.testing.assert_array_equal(first, again, err_msg=f"{primitive}: same backend seed, different samples")
        assert not np.array_equal(first, second), f"{primitive}: two evaluations drew the same samples (folded?)"
        assert not np.array_equal(first, other), f"{primitive}: different seeds drew the same samples"

    def _check_randn(self, dtype: Dtype) -> None:
        attrs = {"shape": (50, 40)}
        (x,) = self._draw(dtype, "randn", attrs, {}, seed=0)
        assert x.shape == (50, 40), f"randn: shape {x.shape}, expected (50, 40)"
        assert _kind(x) == "float", f"randn: {x.dtype} samples, expected floats"
        if dtype is not Dtype.bfloat16:
            assert x.dtype.name == dtype.value, f"randn: dtype {x.dtype}, expected the backend's {dtype.value}"
        x = x.astype(np.float64)
        assert abs(x.mean()) < 0.1, f"randn: mean {x.mean():.3f} of 2000 samples, expected ~0"
        assert abs(x.std() - 1) < 0.1, f"randn: std {x.std():.3f} of 2000 samples, expected ~1"
        self._check_determinism(dtype, "randn", attrs, {})

    def _check_randint(self, dtype: Dtype) -> None:
        attrs = {"low": 2, "high": 7, "shape": (50, 40)}
        (x,) = self._draw(dtype, "randint", attrs, {}, seed=0)
        assert x.shape == (50, 40), f"randint: shape {x.shape}, expected (50, 40)"
        assert _kind(x) == "int", f"randint: {x.dtype} samples, expected integers"
        assert x.min() >= 2 and x.max() < 7, f"randint: values in [{x.min()}, {x.max()}], expected [2, 7)"
        assert set(np.unique(x).tolist()) == {2, 3, 4, 5, 6}, f"randint: values {np.unique(x)}, expected all of 2..6"
        self._check_determinism(dtype, "randint", attrs, {})

    def _check_dropout(self, dtype: Dtype) -> None:
        p = 0.3
        inputs = {"input": np.ones((100, 50))}
        (mask,) = self._draw(dtype, "dropout_mask", {"p": p}, inputs, seed=0)
        assert mask.shape == (100, 50), f"dropout_mask: shape {mask.shape}, expected (100, 50)"
        assert _kind(mask) == "float", f"dropout_mask: {mask.dtype} mask, expected floats"
        mask = mask.astype(np.float64)
        kept = mask != 0
        tol = TOLERANCES[dtype]
        np.testing.assert_allclose(
            mask[kept], 1 / (1 - p), rtol=tol.rtol, err_msg="dropout_mask: kept entries must be 1/(1-p)"
        )
        zeros = 1 - kept.mean()
        assert abs(zeros - p) < 0.03, f"dropout_mask: {zeros:.3f} of entries dropped, expected ~{p}"
        assert abs(mask.mean() - 1) < 0.05, f"dropout_mask: mean {mask.mean():.3f}, expected ~1"
        self._check_determinism(dtype, "dropout_mask", {"p": p}, inputs)
        (evaluation,) = self._draw(dtype, "dropout_mask", {"p": p, "training": False}, inputs, seed=0)
        np.testing.assert_array_equal(
            evaluation, np.ones((100, 50)), err_msg="dropout_mask: training=False must be all ones"
        )

    def test_every_primitive_has_a_case_or_is_declared_unsupported(self) -> None:
        registered = set(plugin_registry().primitives)
        covered = {c.primitive for c in self._cases()}
        unknown = sorted(set(self.unsupported) - registered)
        assert not unknown, f"{type(self).__name__}.unsupported names unregistered primitive(s): {unknown}"
        missing = sorted(registered - covered - set(self.unsupported))
        assert not missing, (
            f"primitive(s) without a conformance case: {missing}. Add a Case (extra_cases) for each, "
            f"or declare them in {type(self).__name__}.unsupported"
        )
        no_reference = sorted(covered - set(self._references()))
        assert not no_reference, f"case(s) for primitive(s) without a reference: {no_reference} (extra_references)"

    def test_unsupported_primitives_are_refused(self, primitive: str) -> None:
        case = next((c for c in self._cases() if c.primitive == primitive), None)
        if case is None:
            pytest.skip(f"no case to build primitive {primitive!r} from")
        dtype = Dtype.parse(self.dtypes[0])
        backend = self.make_backend(dtype)
        arrays, trainable = self._prepare(case, dtype)
        with pytest.raises(UnsupportedPrimitiveError):
            self.compile_case(backend, case, arrays, trainable)

    def test_required_primitives_are_implemented(self) -> None:
        backend = self.make_backend(Dtype.parse(self.dtypes[0]))
        missing = sorted(
            p for p in required_primitives(backend) - set(self.unsupported) if not backend.has_implementation(p)
        )
        assert not missing, (
            f"{type(backend).__name__} implements no {missing}; implement them or declare them in "
            f"{type(self).__name__}.unsupported (its capability table)"
        )

    def test_autograd_backends_derive_gradient_helpers(self) -> None:
        backend = self.make_backend(Dtype.parse(self.dtypes[0]))
        if not backend.supports_autograd:
            pytest.skip(f"{type(backend).__name__} computes gradients by hand: it implements the helpers itself")
        table = plugin_registry().impls(backend.backend_type)
        derived = array_api.derived.is_derived
        written = sorted(p for p in array_api.GRADIENT_HELPERS if p in table and not derived(table[p]))
        assert not written, (
            f"autograd backend {type(backend).__name__} hand-writes gradient helpers {written}; "
            "core derives them from its vjp"
        )
