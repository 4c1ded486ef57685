"""Compile a :class:`~mithril_testing.fuzz.Recipe` on a backend and compare it with the :class:`Oracle`.

:func:`check_recipe` compiles the recipe once per compilation variant (all passes, or some disabled:
:data:`~mithril_testing.fuzz.VARIANTS`), evaluates outputs, then outputs and gradients with random
cotangents, and returns the :class:`Disagreement` found (``None`` when all agree).

Tolerances start from :data:`mithril_testing.TOLERANCES` for the backend's dtype and are loosened with

- graph depth: ``1 + depth / 4`` times the per-dtype tolerance (rounding accumulates along a path);
- the model's own conditioning: ``NOISE_FACTOR`` times the gap between float32 and float64 references
  (scaled to the backend's epsilon), so a graph that amplifies rounding is judged by what rounding does;
- for gradients, the estimated finite-difference error of each entry.

Example:
    >>> import numpy as np
    >>> from mithril_testing.fuzz import Recipe
    >>> r = Recipe()
    >>> r.exposed += r.add_op("exp", {"input": r.add_input(np.array([1.0, 2.0]), role="param")})
    >>> check_recipe(r, "numpy") is None
    True
"""

from __future__ import annotations

import math
import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mithril import compile as ml_compile
from mithril.extend import backend_class
from mithril.types import Dtype

from ..conformance import TOLERANCES
from ._lifecycle import Call, Feed, Lifecycle, backend_array, numpy_results, refilled
from ._oracle import Oracle
from ._passes import PASSES, VARIANTS, passes_disabled, passes_recorded
from ._recipe import Recipe, combine, kind_of_array

__all__ = [
    "NOISE_FACTOR",
    "BatchCheck",
    "Disagreement",
    "Mismatch",
    "backend_dtype",
    "check_batch",
    "check_recipe",
    "make_backend",
    "tolerance_for",
]

NOISE_FACTOR = 16.0
"""How many times the float32-vs-float64 reference gap (per output) a backend may be off, on top of the
per-dtype tolerance (scaled by ``eps(dtype) / eps(float32)``)."""

_BACKENDS: dict[tuple[str, Dtype | None], Any] = {}


def make_backend(name: str, dtype: Dtype | None = None) -> Any:
    """A (cached) backend instance: float64 when the backend computes in it, float32 otherwise.

    >>> make_backend("numpy").dtype.value
    'float64'
    """
    key = (name, dtype)
    if key not in _BACKENDS:
        cls = backend_class(name)
        if dtype is not None:
            _BACKENDS[key] = cls(dtype=dtype)
        else:
            try:
                _BACKENDS[key] = cls(dtype=Dtype.float64)
            except TypeError:  # MLX, GGML: no float64
                _BACKENDS[key] = cls(dtype=Dtype.float32)
    return _BACKENDS[key]


def backend_dtype(name: str) -> Dtype:
    """The dtype :func:`make_backend` computes in for ``name``."""
    return Dtype.parse(make_backend(name).dtype)


@dataclass
class Mismatch:
    """One compared array that is off: what, the values and the tolerance used."""

    what: str
    got: np.ndarray | None
    expected: np.ndarray | None
    atol: float = 0.0
    rtol: float = 0.0
    note: str = ""

    def describe(self) -> str:
        text = f"{self.what}: {self.note}"
        if self.got is not None and self.expected is not None and self.got.shape == self.expected.shape:
            with np.errstate(all="ignore"):
                diff = np.abs(self.got.astype(np.float64) - self.expected.astype(np.float64))
            if diff.size:
                worst = int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff)))
                text += (
                    f"\n    worst at flat index {worst}: got {self.got.flat[worst]!r}, "
                    f"expected {self.expected.flat[worst]!r} (|diff| {diff.flat[worst]:.3g}; "
                    f"allowed atol {self.atol:.3g} + rtol {self.rtol:.3g} * |expected|)"
                )
            if self.got.size <= 12:
                got, expected = (np.array2string(a, precision=10) for a in (self.got, self.expected))
                text += f"\n    got      {got}\n    expected {expected}"
        return text


@dataclass
class Disagreement:
    """A backend's answer that differs from the oracle.

    Attributes:
        backend: backend name; ``dtype``: the dtype it computed in.
        variant: the compilation variant (``"default"``, ``"no-cse"``...; see :data:`VARIANTS`).
        category: ``"compile-error"``, ``"evaluate-error"``, ``"forward"``, ``"gradient"``; prefixed with
            ``"pass:"`` when only a variant with a pass disabled differs from the default (or the reverse),
            with the lifecycle step (``"refill:forward"``) when the ordinary check agrees and a
            lifecycle step does not.
        mismatches: the arrays that are off; ``error``: the exception text for errors.
        step: the lifecycle step that disagrees (:data:`~mithril_testing.fuzz.LIFECYCLE_STEPS`; ``""``:
            none); checking the model again means running that step (:meth:`check_again`).
    """

    recipe: Recipe
    backend: str
    dtype: Dtype
    variant: str
    category: str
    mismatches: list[Mismatch] = field(default_factory=list)
    error: str = ""
    exception_type: str = ""
    variants: tuple[str, ...] = ("default",)
    step: str = ""

    def check_again(
        self, check: Callable[..., Disagreement | None], recipe: Recipe, backend: str | None = None
    ) -> Disagreement | None:
        """``check`` (:func:`check_recipe` or an isolated checker's) of ``recipe`` the way this disagreement
        was found: the same variants, or the same lifecycle step (after the default compilation's check)."""
        if self.step:
            return check(recipe, backend or self.backend, ("default",), lifecycle=(self.step,))
        return check(recipe, backend or self.backend, self.variants)

    @property
    def dedupe_key(self) -> str:
        """The signature plus, for errors, the exception message with names and numbers blanked."""
        if not self.error:
            return self.signature
        message = self.error.splitlines()[0]
        message = re.sub(r"\(at [^)]*\)$", "", message)
        message = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", message)
        return f"{self.signature}|{message[:120]}"

    @property
    def signature(self) -> str:
        """A short key grouping disagreements that are probably the same bug."""
        extra = f":{self.exception_type}" if self.exception_type else ""
        where = f"@{self.variant}" if self.variant != "default" else ""
        return f"{self.backend}:{self.category}{extra}{where}"

    def report(self) -> str:
        lines = [
            f"{self.backend} ({self.dtype.value}), variant {self.variant!r} "
            f"({', '.join(VARIANTS[self.variant]) or 'all passes on'}"
            f"{' disabled' if VARIANTS[self.variant] else ''}): {self.category}",
        ]
        if self.error:
            lines.append(self.error.rstrip())
        lines.extend(m.describe() for m in self.mismatches[:6])
        if len(self.mismatches) > 6:
            lines.append(f"... and {len(self.mismatches) - 6} more")
        return "\n".join(lines)


def tolerance_for(
    dtype: Dtype, depth: int, noise: float, *, gradient: bool = False, amplification: float = 1.0
) -> tuple[float, float, float]:
    """``(rtol, atol, noise_atol)`` for an output of ``depth`` primitive calls whose float32 references
    differ from float64 by ``noise`` (see the module doc). ``atol`` multiplies ``max(1, max |expected|)``;
    ``noise_atol`` is absolute."""
    tol = TOLERANCES[dtype]
    factor = 1.0 + depth / 4.0
    eps_ratio = float(np.finfo(np.dtype(dtype.value) if dtype is not Dtype.bfloat16 else np.float32).eps) / float(
        np.finfo(np.float32).eps
    )
    if gradient:
        boost = factor * max(1.0, amplification * eps_ratio / 8.0)
        return tol.grad_rtol * boost, tol.grad_atol * boost, 0.0
    return tol.rtol * factor, tol.atol * factor, NOISE_FACTOR * noise * eps_ratio


def _scale(a: np.ndarray) -> float:
    finite = np.abs(a[np.isfinite(a)]) if a.size else np.zeros(0)
    return max(1.0, float(finite.max())) if finite.size else 1.0


def _compare(
    what: str,
    got: Any,
    expected: np.ndarray,
    *,
    rtol: float,
    atol: float,
    extra: float,
    float_dtype: Dtype,
    unstable: np.ndarray | None = None,
) -> Mismatch | None:
    got = np.asarray(got)
    if got.shape != expected.shape:
        return Mismatch(what, got, expected, note=f"shape {got.shape}, expected {expected.shape}")
    kind, want = kind_of_array(got), kind_of_array(expected)
    if kind != want:
        return Mismatch(what, got, expected, note=f"{kind} result ({got.dtype}), expected {want}")
    if want != "float":
        differs = got != expected
        if unstable is not None and unstable.shape == differs.shape:
            differs &= ~unstable
        if np.any(differs):
            return Mismatch(what, got, expected, note=f"{int(np.sum(differs))} of {expected.size} entries differ")
        return None
    if float_dtype is not Dtype.bfloat16 and got.dtype != np.dtype(float_dtype.value):
        return Mismatch(what, got, expected, note=f"dtype {got.dtype}, expected the backend's {float_dtype.value}")
    allowed_abs = atol * _scale(expected) + extra
    with np.errstate(all="ignore"):
        diff = np.abs(got.astype(np.float64) - expected)
        bad = ~(diff <= allowed_abs + rtol * np.abs(expected))
    bad &= ~(np.isnan(got) & np.isnan(expected))
    if np.any(bad):
        return Mismatch(
            what, got, expected, atol=allowed_abs, rtol=rtol, note=f"{int(np.sum(bad))} of {expected.size} entries off"
        )
    return None


def _error_text(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _run_variant(
    recipe: Recipe, oracle: Oracle, name: str, variant: str, changed: dict[str, int] | None = None
) -> Disagreement | None:
    """Compile and check one variant; ``changed`` (when given) receives what each pass changed."""
    backend = make_backend(name)
    dtype = Dtype.parse(backend.dtype)

    def fail(category: str, **kw: Any) -> Disagreement:
        return Disagreement(recipe, name, dtype, variant, category, **kw)

    try:
        model = recipe.build_model()
        with passes_disabled(*VARIANTS[variant]), passes_recorded() as counts:
            try:
                pm = ml_compile(model, backend, **recipe.compile_kwargs())
            finally:
                if changed is not None:
                    changed.update(counts)
    except Exception as exc:
        return fail("compile-error", error=_error_text(exc), exception_type=type(exc).__name__)
    params, data = recipe.feeds()
    params_b = {k: backend_array(backend, v) for k, v in params.items()}
    data_b = {k: backend_array(backend, v) for k, v in data.items()}
    try:
        outputs = pm.evaluate(params_b, data_b)
    except Exception as exc:
        return fail("evaluate-error", error=_error_text(exc), exception_type=type(exc).__name__)
    mismatches = _check_outputs(oracle, dtype, numpy_results(backend, outputs), "output")
    if mismatches:
        return fail("forward", mismatches=mismatches)
    if not (oracle.params and oracle.cotangents):
        return None
    cotangents = {k: backend.array(c) for k, c in oracle.cotangents.items()}
    try:
        outputs, grads = pm.evaluate(params_b, data_b, output_gradients=cotangents)
    except Exception as exc:
        return fail(
            "evaluate-error", error="with output_gradients: " + _error_text(exc), exception_type=type(exc).__name__
        )
    mismatches = _check_outputs(oracle, dtype, numpy_results(backend, outputs), "output (gradient call)")
    if mismatches:
        return fail("forward", mismatches=mismatches)
    mismatches = _check_gradients(oracle, dtype, numpy_results(backend, grads))
    if mismatches:
        return fail("gradient", mismatches=mismatches)
    return None


def _check_outputs(oracle: Oracle, dtype: Dtype, outputs: dict[str, np.ndarray], label: str) -> list[Mismatch]:
    if set(outputs) != set(oracle.outputs):
        return [Mismatch(f"{label} keys", None, None, note=f"got {sorted(outputs)}, expected {sorted(oracle.outputs)}")]
    found = []
    for name, expected in oracle.outputs.items():
        rtol, atol, extra = tolerance_for(dtype, oracle.depth[name], oracle.noise.get(name, 0.0))
        got = outputs[name]
        m = _compare(
            f"{label} {name!r}",
            got,
            expected,
            rtol=rtol,
            atol=atol,
            extra=extra,
            float_dtype=dtype,
            unstable=oracle.unstable.get(name),
        )
        if m is not None:
            found.append(m)
    return found


def _check_gradients(
    oracle: Oracle, dtype: Dtype, grads: dict[str, np.ndarray], label: str = "gradient"
) -> list[Mismatch]:
    if set(grads) != set(oracle.gradients):
        return [Mismatch(f"{label} keys", None, None, note=f"got {sorted(grads)}, expected {sorted(oracle.gradients)}")]
    depth = max(oracle.depth.values(), default=0)
    rtol, atol, _ = tolerance_for(dtype, depth, 0.0, gradient=True, amplification=oracle.amplification())
    found = []
    for name, g in oracle.gradients.items():
        got = grads[name]
        shape = oracle.recipe.inputs[name].array.shape
        what = f"{label} of {name!r}"
        if got.shape != shape:
            found.append(Mismatch(what, got, None, note=f"shape {got.shape}, expected {shape}"))
            continue
        if kind_of_array(got) != "float":
            found.append(Mismatch(what, got, None, note=f"{got.dtype} gradient"))
            continue
        got64 = got.astype(np.float64)
        if g.full is not None:
            scale = _scale(g.full)
            with np.errstate(all="ignore"):
                diff = np.abs(got64 - g.full)
                bad = ~(diff <= atol * scale + rtol * np.abs(g.full))
            for flat in np.flatnonzero(bad):  # an entry is only wrong if the differences are reliable there
                if diff.flat[flat] <= atol * scale + rtol * abs(g.full.flat[flat]) + 4 * oracle.fd_error(
                    name, int(flat)
                ):
                    bad.flat[flat] = False
            if np.any(bad):
                found.append(
                    Mismatch(
                        what,
                        got,
                        g.full,
                        atol=atol * scale,
                        rtol=rtol,
                        note=f"{int(np.sum(bad))} of {got.size} entries off (finite differences)",
                    )
                )
        else:
            scale = _scale(got64) if np.all(np.isfinite(got64)) else math.inf
            for i, (u, value) in enumerate(zip(g.directions, g.directional, strict=True)):
                projected = float(np.sum(got64 * u))
                norm = float(np.sqrt(np.sum(u * u)))
                allowed = (
                    norm * (atol * scale + rtol * float(np.max(np.abs(got64)))) + 4 * oracle.fd_error(name, i)
                    if math.isfinite(scale)
                    else -1.0
                )
                if not abs(projected - value) <= allowed:
                    found.append(
                        Mismatch(
                            f"{what} along random direction {i}",
                            np.array(projected),
                            np.array(value),
                            atol=allowed,
                            note=f"directional derivative {projected!r}, finite differences {value!r}",
                        )
                    )
                    break
    return found


def check_recipe(
    recipe: Recipe,
    backend: str,
    variants: Sequence[str] = ("default",),
    *,
    lifecycle: Sequence[str] = (),
    on_variant: Callable[[str], Any] | None = None,
    on_step: Callable[[str], Any] | None = None,
) -> Disagreement | None:
    """Compile and evaluate ``recipe`` on ``backend`` for each variant; the first disagreement, or ``None``.

    When the default compilation agrees with the oracle and a variant with passes disabled does not (or
    the reverse), the category is prefixed with ``"pass:"``: a pass changed the result. ``on_variant`` is
    called with each variant's name before it is compiled.

    ``lifecycle``: lifecycle steps (:data:`~mithril_testing.fuzz.LIFECYCLE_STEPS`) run after the variants
    agree, in the default compilation, in the order given; the first call that disagrees is reported with
    the step as category prefix (``"threads:forward"``). ``on_step`` is called with each step's name first.

    >>> import numpy as np
    >>> r = Recipe()
    >>> r.exposed += r.add_op("tanh", {"input": r.add_input(np.array([0.5, -1.0]), role="param")})
    >>> check_recipe(r, "numpy", lifecycle=("recompile", "refill", "interleave", "threads")) is None
    True
    """
    found = _check_variants(recipe, backend, variants, on_variant)
    if found is None and lifecycle:
        found = _check_lifecycle(recipe, backend, lifecycle, on_step)
    if found is not None:
        found.variants = tuple(variants)
    return found


def _feed(recipe: Recipe, oracle: Oracle) -> Feed:
    params, data = recipe.feeds()
    return Feed(params, data, oracle.cotangents if oracle.params else {})


def _check_lifecycle(
    recipe: Recipe, name: str, steps: Sequence[str], on_step: Callable[[str], Any] | None
) -> Disagreement | None:
    """Run the lifecycle ``steps`` (:class:`~mithril_testing.fuzz.Lifecycle`) and judge every call with the
    oracle of the values it was given: the recipe's own, or :func:`~mithril_testing.fuzz.refilled` ones."""
    backend = make_backend(name)
    dtype = Dtype.parse(backend.dtype)
    oracles = [Oracle.of(recipe), Oracle.of(refilled(recipe))]
    feeds = [_feed(oracle.recipe, oracle) for oracle in oracles]
    options = recipe.compile_kwargs()
    session = Lifecycle(recipe.build_model, lambda model: ml_compile(model, backend, **options), backend, feeds)
    for step in steps:
        if on_step is not None:
            on_step(step)
        for call in session.run(step):
            found = _judge(call, oracles[call.feed], dtype)
            if found is not None:
                return Disagreement(
                    recipe, name, dtype, "default", f"{call.step}:{found[0]}", step=call.step, **found[1]
                )
    return None


def _judge(call: Call, oracle: Oracle, dtype: Dtype) -> tuple[str, dict[str, Any]] | None:
    """``(category, Disagreement fields)`` when ``call`` disagrees with ``oracle``."""
    if call.error is not None:
        category = "compile-error" if call.compiling else "evaluate-error"
        return category, {
            "error": f"{call.label}: {_error_text(call.error)}",
            "exception_type": type(call.error).__name__,
        }
    assert call.outputs is not None
    mismatches = _check_outputs(oracle, dtype, call.outputs, f"{call.label}: output")
    if mismatches:
        return "forward", {"mismatches": mismatches}
    if call.gradients is not None:
        mismatches = _check_gradients(oracle, dtype, call.gradients, f"{call.label}: gradient")
        if mismatches:
            return "gradient", {"mismatches": mismatches}
    return None


def check_batch(
    parts: Sequence[Recipe],
    backend: str,
    variants: Sequence[str] = ("default",),
    *,
    check: Callable[..., Disagreement | None] = check_recipe,
) -> Disagreement | None:
    """Check several random models compiled as one (:func:`~mithril_testing.fuzz.combine`): one program
    build for all of them. When the combination disagrees, each part is checked alone and the first one
    that disagrees is returned (the combination's own disagreement when none does: the parts interfere).

    >>> import numpy as np
    >>> from mithril_testing.fuzz import Recipe
    >>> r = Recipe()
    >>> (y,) = r.add_op("exp", {"input": r.add_input(np.array([1.0, 2.0]), role="param")})
    >>> r.exposed.append(y)
    >>> check_batch([r, r, r], "numpy") is None
    True
    """
    if len(parts) == 1:
        return check(parts[0], backend, variants)
    found = check(combine(parts), backend, variants)
    if found is None:
        return None
    for part in parts:
        alone = check(part, backend, variants)
        if alone is not None:
            return alone
    return found


class BatchCheck:
    """:func:`check_batch` for a Hypothesis test, which then shrinks a failing batch: after :meth:`focus`
    only the part that disagreed is checked (one compilation per shrink step, not the whole batch).

    >>> import numpy as np
    >>> from mithril_testing.fuzz import Recipe
    >>> r = Recipe()
    >>> r.exposed += r.add_op("sin", {"input": r.add_input(np.array([0.5]), role="param")})
    >>> checker = BatchCheck("numpy")
    >>> checker([r, r]) is None
    True
    """

    def __init__(self, backend: str, check: Callable[..., Disagreement | None] = check_recipe) -> None:
        self.backend = backend
        self.check = check
        self.part: int | None = None

    def __call__(self, parts: Sequence[Recipe], variants: Sequence[str] = ("default",)) -> Disagreement | None:
        if self.part is not None:
            return self.check(parts[self.part], self.backend, variants) if self.part < len(parts) else None
        return check_batch(parts, self.backend, variants, check=self.check)

    def focus(self, found: Disagreement, parts: Sequence[Recipe]) -> None:
        """From now on check only the part of ``parts`` that ``found`` blames (all, if it is the batch)."""
        self.part = next((i for i, part in enumerate(parts) if part is found.recipe), None)


def _check_variants(
    recipe: Recipe, backend: str, variants: Sequence[str], on_variant: Callable[[str], Any] | None
) -> Disagreement | None:
    oracle = Oracle.of(recipe)
    results: dict[str, Disagreement | None] = {}
    ordered = ["default", *[v for v in variants if v != "default"]] if "default" in variants else list(variants)
    changed: dict[str, int] = dict.fromkeys(PASSES, 1)  # unknown until the default is compiled
    for variant in ordered:
        if variant != "default" and "default" in results and not any(changed[p] for p in VARIANTS[variant]):
            results[variant] = results["default"]  # the disabled passes changed nothing: the same program
            continue
        if on_variant is not None:
            on_variant(variant)
        results[variant] = _run_variant(recipe, oracle, backend, variant, changed if variant == "default" else None)
        found = results[variant]
        if variant == "default" and found is not None and found.category == "compile-error":
            changed = dict.fromkeys(PASSES, 1)  # passes after the failure never ran
    default = results.get("default")
    if default is not None:
        agreeing = [v for v in ordered if v != "default" and results[v] is None]
        if agreeing:  # a pass that is on by default changes the result
            default.category = f"pass:{default.category}"
            default.error = (
                default.error + "\n" if default.error else ""
            ) + f"(variants {agreeing} agree with the oracle)"
        return default
    for variant in ordered:
        found = results[variant]
        if found is not None:
            if "default" in results:  # it differs only with some pass disabled
                found.category = f"pass:{found.category}"
            return found
    return None
