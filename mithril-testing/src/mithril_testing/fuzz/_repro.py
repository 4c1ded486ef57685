r"""Standalone pytest reproductions of a :class:`~mithril_testing.fuzz.Disagreement`.

The file holds only what is specific to the disagreement: a docstring (the report), ``build_model()`` in
plain Mithril code (``Model``, ``Primitive``, ``IOKey``) and one :func:`~mithril_testing.fuzz.replay.reproduction_test`
call with the compile options, the input values, the expected numbers (reference outputs,
finite-difference gradients) and the tolerances the fuzzer used, as compact literals. When the same
minimal model disagrees on several backends, one file covers them all (one parametrized test).

Example:
    >>> import numpy as np
    >>> from mithril_testing.fuzz import Recipe
    >>> r = Recipe()
    >>> r.exposed += r.add_op("exp", {"input": r.add_input(np.array([1.0]), role="param")})
    >>> print(reproduction_source(r, "numpy", test_name="test_exp").split("\n\n\n", 2)[2])
    test_exp = reproduction_test(build_model,
        backend="numpy",
        params={"x0": [1.0]},
        cotangents={"v0": [0.1257302165031433]},
        expected={"v0": [2.718281828459045]},
        expected_gradients={"x0": [0.34177016278169603]},
        tolerance={"v0": (1.25e-10, 3.402497578885343e-12)},
        gradient_tolerance={"x0": (1.2499999999999999e-06, 1.2508326672684688e-07)},
    )
    <BLANKLINE>
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from mithril.types import Dtype

from ._check import Disagreement, backend_dtype, tolerance_for
from ._lifecycle import refilled
from ._oracle import Oracle
from ._passes import VARIANTS
from ._recipe import Recipe, _nested, array_literal, kind_of_array
from ._wrap import wrap_source

__all__ = ["ReproductionText", "compact_literal", "reproduction_source", "write_reproduction"]


def _full_gradient(oracle: Oracle, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-element finite differences of ``name`` and their error estimates (for the file)."""
    g = oracle.gradients[name]
    base = oracle.recipe.inputs[name].array
    if g.full is not None:
        errors = np.array([oracle.fd_error(name, i) for i in range(base.size)]).reshape(base.shape)
        return g.full, errors
    from ..conformance import FD_EPS

    full = np.zeros(base.shape)
    errors = np.zeros(base.shape)
    for flat in range(base.size):
        e = np.zeros(base.shape)
        e.flat[flat] = 1.0
        values = [oracle._difference(name, e, FD_EPS * k) for k in (1.0, 2.0, 4.0)]
        full.flat[flat] = values[0]
        errors.flat[flat] = max(abs(v - values[0]) for v in values[1:])
    return full, errors


def compact_literal(array: Any) -> str:
    """Short exact source for an array: nested Python lists (floats round-trip exactly; ``np.asarray`` of
    the text gives back float64, int64 or bool), or ``np.array(...)`` where a list cannot say the dtype
    (an empty int or bool array).

    >>> compact_literal(np.array([[1.5, 2.0]])), compact_literal(np.array(3)), compact_literal(np.array([True]))
    ('[[1.5, 2.0]]', '3', '[True]')
    >>> compact_literal(np.array([np.inf, np.nan]))
    "[float('inf'), float('nan')]"
    """
    a = np.asarray(array)
    kind = kind_of_array(a)
    if a.size == 0 and (kind != "float" or a.ndim != 1):
        return array_literal(a)
    leaf: Callable[[Any], str]
    if kind == "float":
        leaf = _float
        values = a.astype(np.float64).tolist()
    elif kind == "int":
        leaf, values = (lambda v: repr(int(v))), a.astype(np.int64).tolist()
    else:
        leaf, values = (lambda v: repr(bool(v))), a.tolist()
    return _nested(values, leaf)


def _float(x: float) -> str:
    return f"float('{x!r}')" if math.isinf(x) or math.isnan(x) else repr(float(x))


def _mapping(items: Mapping[str, Any], value: Callable[[Any], str] = compact_literal) -> str:
    return "{" + ", ".join(f'"{k}": {value(v)}' for k, v in items.items()) + "}"


def _pair(tolerance: tuple[float, float]) -> str:
    return f"({float(tolerance[0])!r}, {float(tolerance[1])!r})"


def _per_dtype(tolerances: Mapping[str, Mapping[str, tuple[float, float]]]) -> str:
    """``{key: (rtol, atol)}`` for one dtype, ``{dtype: {key: (rtol, atol)}}`` for several."""
    if len(tolerances) == 1:
        return _mapping(next(iter(tolerances.values())), _pair)
    return "{" + ", ".join(f'"{d}": {_mapping(t, _pair)}' for d, t in tolerances.items()) + "}"


@dataclass
class ReproductionText:
    """What a reproduction file says, ready to format (:meth:`source`): the model source, the compile
    options (values as source text), the numbers, and per dtype the tolerances. ``dtypes`` maps each
    backend to its dtype, written only when ``explicit_dtype`` (by default each backend computes in
    float64 where it has it, else float32)."""

    docstring: str
    model_source: str
    test_name: str
    dtypes: dict[str, str]
    compile_options: dict[str, str]
    params: dict[str, np.ndarray]
    data: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    tolerance: dict[str, dict[str, tuple[float, float]]]
    cotangents: dict[str, np.ndarray] = field(default_factory=dict)
    expected_gradients: dict[str, np.ndarray] = field(default_factory=dict)
    gradient_tolerance: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    variant: str = "default"
    xfail: str | dict[str, str] | None = None
    isolated: bool = False
    explicit_dtype: bool = False
    lifecycle: str = ""
    second: dict[str, str] = field(default_factory=dict)
    """The lifecycle step's other values: keyword -> source text (see :func:`_numbers`)."""

    def _implied(self) -> set[tuple[str, str]]:
        """Compile options equal to what :func:`~mithril_testing.fuzz.replay.reproduction_test` assumes
        without them (the shapes of the values given, the parameters trainable): left out of the file."""
        shapes = {k: list(np.shape(v)) for k, v in {**self.params, **self.data}.items()}
        return {
            ("shapes", _mapping(shapes, repr)),
            ("trainable_keys", "[" + ", ".join(f'"{n}"' for n in self.params) + "]"),
        }

    def source(self) -> str:
        """The file: docstring, imports, ``build_model()`` and one ``reproduction_test(...)`` call."""
        backends = list(self.dtypes)
        keywords = [
            ("backend", f'"{backends[0]}"' if len(backends) == 1 else "[" + ", ".join(f'"{b}"' for b in backends) + "]")
        ]
        if self.explicit_dtype:
            keywords.append(("dtype", _mapping(self.dtypes, json.dumps)))
        if self.variant != "default":
            keywords.append(("variant", json.dumps(self.variant)))
        if self.lifecycle:
            keywords.append(("lifecycle", json.dumps(self.lifecycle)))
        keywords.extend(self.compile_options.items())
        keywords.extend(
            _number_keywords(
                self.params,
                self.data,
                self.cotangents,
                self.expected,
                self.expected_gradients,
                self.tolerance,
                self.gradient_tolerance,
            )
        )
        if self.second:
            keywords.append(
                ("second", "dict(\n" + "".join(f"        {k}={v},\n" for k, v in self.second.items()) + "    )")
            )
        if self.xfail:
            keywords.append(
                ("xfail", json.dumps(self.xfail) if isinstance(self.xfail, str) else _mapping(self.xfail, json.dumps))
            )
        if self.isolated:
            keywords.append(("isolated", "True"))
        call = "".join(f"    {k}={v},\n" for k, v in keywords if (k, v) not in self._implied())
        docstring = self.docstring.strip().replace("\\", "\\\\").replace('"""', "'''")
        body = f"{self.model_source.rstrip()}\n\n\n{self.test_name} = reproduction_test(build_model,\n{call})\n"
        imports = "import numpy as np\n" if "np." in body else ""
        imports += "from mithril.models import IOKey, Model, Primitive\n"
        imports += "from mithril_testing.fuzz.replay import reproduction_test\n"
        return wrap_source(f'"""{docstring}\n"""\n\n{imports}\n\n{body}')


def _number_keywords(
    params: Mapping[str, np.ndarray],
    data: Mapping[str, np.ndarray],
    cotangents: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    expected_gradients: Mapping[str, np.ndarray],
    tolerance: Mapping[str, Mapping[str, tuple[float, float]]],
    gradient_tolerance: Mapping[str, Mapping[str, tuple[float, float]]],
) -> list[tuple[str, str]]:
    """The keywords holding one set of values and its expected numbers, as source text."""
    keywords = []
    for name, values in (
        ("params", params),
        ("data", data),
        ("cotangents", cotangents),
        ("expected", expected),
        ("expected_gradients", expected_gradients),
    ):
        if values or name == "expected":
            keywords.append((name, _mapping(values)))
    keywords.append(("tolerance", _per_dtype(tolerance)))
    if expected_gradients:
        keywords.append(("gradient_tolerance", _per_dtype(gradient_tolerance)))
    return keywords


def _numbers(recipe: Recipe, dtypes: Sequence[Dtype]) -> dict[str, Any]:
    """The values ``recipe`` passes and what the oracle expects, with the tolerances per dtype: the
    number keywords of :class:`ReproductionText`."""
    oracle = Oracle.of(recipe)
    params, data = recipe.feeds()
    numbers: dict[str, Any] = {
        "params": params,
        "data": data,
        "expected": dict(oracle.outputs),
        "tolerance": {d.value: _output_tolerance(oracle, d) for d in dtypes},
        "cotangents": {},
        "expected_gradients": {},
        "gradient_tolerance": {},
    }
    if oracle.params and oracle.cotangents:
        full = {name: _full_gradient(oracle, name) for name in oracle.gradients}
        numbers["cotangents"] = dict(oracle.cotangents)
        numbers["expected_gradients"] = {name: g for name, (g, _) in full.items()}
        errors = {name: e for name, (_, e) in full.items()}
        numbers["gradient_tolerance"] = {d.value: _gradient_tolerance(oracle, d, errors) for d in dtypes}
    return numbers


def _gradient_tolerance(
    oracle: Oracle, dtype: Dtype, errors: Mapping[str, np.ndarray]
) -> dict[str, tuple[float, float]]:
    depth = max(oracle.depth.values(), default=0)
    rtol, atol, _ = tolerance_for(dtype, depth, 0.0, gradient=True, amplification=oracle.amplification())
    found = {}
    for name, error in errors.items():
        full = oracle.gradients[name].full
        scale = max(1.0, float(np.max(np.abs(full)))) if full is not None and full.size else 1.0
        found[name] = (rtol, atol * scale + 4 * float(np.max(error, initial=0.0)))
    return found


def _output_tolerance(oracle: Oracle, dtype: Dtype) -> dict[str, tuple[float, float]]:
    found = {}
    for name, value in oracle.outputs.items():
        if kind_of_array(value) == "float":
            rtol, atol, extra = tolerance_for(dtype, oracle.depth[name], oracle.noise.get(name, 0.0))
            scale = max(1.0, float(np.max(np.abs(value)))) if value.size else 1.0
            found[name] = (rtol, atol * scale + extra)
    return found


def _compile_options(recipe: Recipe) -> dict[str, str]:
    """``ml.compile`` keywords as compact source (``constant_keys`` values as lists)."""
    used = recipe.used_inputs()
    inputs = {n: i for n, i in recipe.inputs.items() if n in used}
    options: dict[str, str] = {}
    shapes = {n: list(i.array.shape) for n, i in inputs.items() if i.shape_via == "compile" and not i.is_constant}
    names = {
        "trainable_keys": [n for n, i in inputs.items() if i.role == "param"],
        "data_keys": [n for n, i in inputs.items() if i.role == "data"],
    }
    if shapes:
        options["shapes"] = _mapping(shapes, repr)
    options.update((k, "[" + ", ".join(f'"{n}"' for n in v) + "]") for k, v in names.items() if v)
    constants = {n: i.array for n, i in inputs.items() if i.role == "constant_key"}
    if constants:
        options["constant_keys"] = _mapping(constants)
    if recipe.discard:
        options["discard_keys"] = "[" + ", ".join(f'"{n}"' for n in recipe.discard) + "]"
    if recipe.jit is not None:
        options["jit"] = repr(recipe.jit)
    return options


def reproduction_source(
    recipe: Recipe,
    backend: str | Sequence[str],
    variant: str = "default",
    *,
    summary: str = "",
    xfail_reason: str | None = None,
    test_name: str = "test_reproduction",
    isolated: bool = False,
    lifecycle: str = "",
) -> str:
    """The text of a standalone pytest file checking ``recipe`` on ``backend`` (one name or several: one
    parametrized test) against the oracle (see :mod:`mithril_testing.fuzz.replay`).

    Args:
        summary: the disagreement report, written into the module docstring.
        xfail_reason: when given, the test is marked ``xfail(strict=True, reason=...)`` (a known bug: the
            test fails until the bug is fixed, then XPASS tells to remove the mark).
        isolated: the test runs the model in a child process (for crashes and hangs).
        lifecycle: the lifecycle step that disagrees (:data:`~mithril_testing.fuzz.LIFECYCLE_STEPS`): the
            test runs it after the ordinary check, with the other values of
            :func:`~mithril_testing.fuzz.refilled` as ``second=dict(...)``.
    """
    backends = [backend] if isinstance(backend, str) else list(backend)
    dtypes = {b: backend_dtype(b) for b in backends}
    text = ReproductionText(
        docstring="",
        model_source=recipe.model_source(),
        test_name=test_name,
        dtypes={b: d.value for b, d in dtypes.items()},
        compile_options=_compile_options(recipe),
        variant=variant,
        xfail=xfail_reason,
        isolated=isolated,
        lifecycle=lifecycle,
        **_numbers(recipe, list(dtypes.values())),
    )
    if lifecycle and lifecycle != "recompile":  # the other steps pass new values too
        second = _numbers(refilled(recipe), list(dtypes.values()))
        text.second = dict(_number_keywords(**second))
    where = ", ".join(f"{b} ({d.value})" for b, d in dtypes.items())
    disabled = f", passes disabled: {', '.join(VARIANTS[variant])}" if VARIANTS[variant] else ""
    step = f", lifecycle step {lifecycle!r}" if lifecycle else ""
    text.docstring = (
        f"Fuzz reproduction: {where}{disabled}{step}.\n\n{summary.strip() or 'Compare with the NumPy references.'}"
    )
    return text.source()


def write_reproduction(
    disagreement: Disagreement, directory: str | Path, *, xfail_reason: str | None = None, also: Sequence[str] = ()
) -> Path:
    """Write ``test_<backends>_<category>_<fingerprint>.py`` into ``directory``; returns its path.

    ``also``: other backends on which the same minimal model disagrees: the one file covers them too.

    >>> import tempfile, numpy as np
    >>> from mithril_testing.fuzz import Disagreement, Recipe
    >>> r = Recipe()
    >>> (y,) = r.add_op("exp", {"input": r.add_input(np.array([1.0]), role="param")})
    >>> r.exposed.append(y)
    >>> found = Disagreement(r, "numpy", backend_dtype("numpy"), "default", "forward")
    >>> write_reproduction(found, tempfile.mkdtemp(), also=["torch"]).name
    'test_numpy_torch_forward_c2e98873a5.py'
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    backends = [disagreement.backend, *(b for b in also if b != disagreement.backend)]
    slug = re.sub(r"[^a-z0-9]+", "_", disagreement.category.lower()).strip("_")
    name = f"test_{'_'.join(backends)}_{slug}_{disagreement.recipe.fingerprint()[:10]}"
    path = directory / f"{name}.py"
    path.write_text(
        reproduction_source(
            disagreement.recipe,
            backends,
            disagreement.variant,
            summary=disagreement.report(),
            xfail_reason=xfail_reason,
            test_name=name,
            isolated=disagreement.category.split(":")[-1] in ("crash", "hang"),
            lifecycle=disagreement.step,
        )
    )
    return path
