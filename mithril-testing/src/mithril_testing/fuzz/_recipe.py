"""A generated model as data (:class:`Recipe`), its Mithril source, and its plain-NumPy evaluation.

A recipe is a list of primitive calls (:class:`Op`) over named values: inputs ``x0, x1, ...`` (each with
a concrete array and a role: trainable parameter, runtime data, compile-time constant) and intermediates
``v0, v1, ...``. The same recipe gives

- the Mithril code that builds the logical model (:meth:`Recipe.model_source`; :meth:`Recipe.build_model`
  executes exactly that text, so a reproduction file is the code that was tested),
- the keyword arguments of ``ml.compile`` (:meth:`Recipe.compile_kwargs`),
- the oracle: every primitive's plain-NumPy reference (:data:`mithril_testing.REFERENCES`) run in order
  (:func:`evaluate_reference`), in float64 or float32.

Example:
    >>> import numpy as np
    >>> r = Recipe()
    >>> x = r.add_input(np.array([1.0, 2.0]), role="param")
    >>> (y,) = r.add_op("exp", {"input": x})
    >>> r.exposed.append(y)
    >>> out = evaluate_reference(r, r.input_arrays())
    >>> bool(np.allclose(out["v0"], np.exp([1.0, 2.0])))
    True
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mithril.models import IOKey, Model, Primitive

from ..cases import spec_for
from ..references import REFERENCES

__all__ = [
    "ROLES",
    "Const",
    "Input",
    "Op",
    "Recipe",
    "array_literal",
    "combine",
    "evaluate_reference",
    "kind_of_array",
]

ROLES = ("param", "data", "data_default", "constant_key", "iokey_value", "set_values")
"""How an input reaches the compiled model:

- ``param``: listed in ``trainable_keys`` (gradients are checked for it);
- ``data``: listed in ``data_keys``;
- ``data_default``: in neither list (an input nobody marked differentiable is runtime data);
- ``constant_key``: given to ``ml.compile(constant_keys=...)``;
- ``iokey_value``: a constant given at connection time, ``IOKey("x3", value=...)``;
- ``set_values``: a constant given after building, ``model.set_values(x3=...)``.
"""


def kind_of_array(array: np.ndarray) -> str:
    """``"bool"``, ``"int"`` or ``"float"``."""
    if array.dtype == np.bool_:
        return "bool"
    return "int" if array.dtype.kind in "iu" else "float"


@dataclass(frozen=True)
class Const:
    """An inline constant connected directly to a primitive's input (``right=2.0``, ``right=np.array(...)``)."""

    value: Any

    def kind(self) -> str:
        if isinstance(self.value, bool):
            return "bool"
        if isinstance(self.value, int):
            return "int"
        if isinstance(self.value, float):
            return "float"
        return kind_of_array(np.asarray(self.value))


@dataclass
class Input:
    """A model input: its concrete value, its role (one of :data:`ROLES`) and how its shape is declared
    (``"compile"``: ``ml.compile(shapes=...)``; ``"iokey"``: ``IOKey(shape=...)`` where it is first used)."""

    name: str
    array: np.ndarray
    role: str
    shape_via: str = "compile"

    @property
    def kind(self) -> str:
        return kind_of_array(self.array)

    @property
    def is_constant(self) -> bool:
        return self.role in ("constant_key", "iokey_value", "set_values")


@dataclass
class Op:
    """One primitive call: ``inputs`` maps the primitive's input keys to a value name, a :class:`Const`
    or ``None`` (an absent optional input); ``outputs`` maps its output keys to new value names."""

    primitive: str
    attrs: dict[str, Any]
    inputs: dict[str, str | Const | None]
    outputs: dict[str, str]


@dataclass
class Recipe:
    """A generated model: inputs, primitive calls, exposed outputs and compile options.

    Attributes:
        inputs: name -> :class:`Input`, in creation order.
        ops: primitive calls in topological order.
        exposed: value names exposed as model outputs (``IOKey(name)``); the rest are hidden
            (``IOKey(name, expose=False)``).
        discard: exposed outputs passed to ``ml.compile(discard_keys=...)``.
        cotangent_seed: seed of the random cotangents used for gradient checks.
        jit: the ``jit`` option of ``ml.compile`` (``None``: the backend's default).
    """

    inputs: dict[str, Input] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    exposed: list[str] = field(default_factory=list)
    discard: list[str] = field(default_factory=list)
    cotangent_seed: int = 0
    jit: bool | None = None
    _counter: int = 0

    # -- construction ------------------------------------------------------------------------------
    def add_input(self, array: np.ndarray, role: str = "data", shape_via: str = "compile") -> str:
        """Add an input holding ``array``; returns its name (``x<n>``)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        name = f"x{len(self.inputs)}"
        self.inputs[name] = Input(name, np.asarray(array), role, shape_via)
        return name

    def add_op(
        self, primitive: str, inputs: Mapping[str, str | Const | None], attrs: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Append a primitive call; returns the names of its outputs (``v<n>``), in the spec's order."""
        spec = spec_for(primitive)
        resolved = spec.resolve_attributes(dict(attrs or {}))
        keys = spec.output_keys(resolved)
        outputs = {}
        for key in keys:
            outputs[key] = f"v{self._counter}"
            self._counter += 1
        given = {k: v for k, v in (attrs or {}).items()}
        self.ops.append(Op(primitive, given, dict(inputs), outputs))
        return list(outputs.values())

    # -- queries -----------------------------------------------------------------------------------
    @property
    def outputs(self) -> list[str]:
        """Outputs the compiled model returns: exposed and not discarded."""
        return [name for name in self.exposed if name not in self.discard]

    def params(self) -> list[str]:
        return [n for n, i in self.inputs.items() if i.role == "param"]

    def runtime_data(self) -> list[str]:
        return [n for n, i in self.inputs.items() if i.role in ("data", "data_default")]

    def input_arrays(self) -> dict[str, np.ndarray]:
        return {n: i.array for n, i in self.inputs.items()}

    def used_inputs(self) -> set[str]:
        used: set[str] = set()
        for op in self.ops:
            used.update(v for v in op.inputs.values() if isinstance(v, str) and v in self.inputs)
        return used

    def primitives(self) -> list[str]:
        return sorted({op.primitive for op in self.ops})

    def depths(self) -> dict[str, int]:
        """Value name -> number of primitive calls on the longest path from an input."""
        depth = {name: 0 for name in self.inputs}
        for op in self.ops:
            d = 1 + max((depth.get(v, 0) for v in op.inputs.values() if isinstance(v, str)), default=0)
            for out in op.outputs.values():
                depth[out] = d
        return depth

    def only_discarded(self, name: str) -> bool:
        """Whether everything ``name`` feeds ends in discarded outputs (``ml.compile`` then drops the input,
        as Mithril does): every value it reaches without consumers is a discarded output, and no other
        value it reaches is exposed (an exposed output, discarded or not, stops Mithril's walk back from
        the discarded ones)."""
        if not self.discard:
            return False
        reached = self.dependents({name}) - {name}
        consumed = {v for op in self.ops for v in op.inputs.values() if isinstance(v, str)}
        sinks = {v for v in reached if v not in consumed}
        return bool(sinks) and sinks <= set(self.discard) and not (reached - sinks) & set(self.exposed)

    def dependents(self, sources: set[str]) -> set[str]:
        """Names of the values that depend on any of ``sources`` (the sources included).

        >>> r = Recipe()
        >>> x, y = r.add_input(np.ones(2), role="param"), r.add_input(np.ones(2))
        >>> (a,) = r.add_op("exp", {"input": y})
        >>> (b,) = r.add_op("add", {"left": x, "right": a})
        >>> sorted(r.dependents({x}))
        ['v1', 'x0']
        """
        found = set(sources)
        for op in self.ops:
            if any(isinstance(v, str) and v in found for v in op.inputs.values()):
                found.update(op.outputs.values())
        return found

    def fingerprint(self) -> str:
        """A content hash (model source, compile options and input values)."""
        digest = hashlib.sha256(self.model_source().encode())
        digest.update(repr(sorted(self.compile_kwargs_source().items())).encode())
        digest.update(str(self.cotangent_seed).encode())
        for name, inp in self.inputs.items():
            digest.update(
                name.encode() + inp.role.encode() + str(inp.array.dtype).encode() + repr(inp.array.shape).encode()
            )
            digest.update(np.ascontiguousarray(inp.array).tobytes())
        return digest.hexdigest()[:16]

    def __repr__(self) -> str:  # what Hypothesis prints for a falsifying example
        return f"<Recipe {len(self.ops)} ops {self.primitives()} outputs={self.outputs}>\n{self.model_source()}"

    # -- Mithril code -------------------------------------------------------------------------------
    def model_source(self, function: str = "build_model") -> str:
        """Python source of a function building the logical model with ``Model``, ``Primitive`` and ``IOKey``."""
        lines = [f"def {function}():", "    model = Model()"]
        first_use: set[str] = set()
        for op in self.ops:
            args = []
            for key, ref in op.inputs.items():
                args.append(f"{key}={self._ref_source(ref, first_use)}")
            for key, out in op.outputs.items():
                hidden = "" if out in self.exposed else ", expose=False"
                args.append(f'{key}=IOKey("{out}"{hidden})')
            attrs = ", ".join([repr(op.primitive), *(f"{k}={_literal(v)}" for k, v in op.attrs.items())])
            lines.append(f"    model |= Primitive({attrs})({', '.join(args)})")
        setters = {n: i for n, i in self.inputs.items() if i.role == "set_values" and n in first_use}
        if setters:
            values = ", ".join(f"{n}={array_literal(i.array)}" for n, i in setters.items())
            lines.append(f"    model.set_values({values})")
        lines.append("    return model")
        return "\n".join(lines) + "\n"

    def _ref_source(self, ref: str | Const | None, first_use: set[str]) -> str:
        if ref is None:
            return "None"
        if isinstance(ref, Const):
            return _literal(ref.value)
        inp = self.inputs.get(ref)
        if inp is None or ref in first_use:
            return repr(ref)
        first_use.add(ref)
        extras = []
        if inp.shape_via == "iokey":
            extras.append(f"shape={list(inp.array.shape)!r}")
        if inp.kind != "float":
            extras.append(f'type="{inp.kind}"')
        if inp.role == "iokey_value":
            extras.append(f"value={array_literal(inp.array)}")
        if not extras:
            return repr(ref)
        return f'IOKey("{ref}", {", ".join(extras)})'

    def build_model(self) -> Any:
        """Execute :meth:`model_source` and return the new logical model."""
        namespace: dict[str, Any] = {"Model": Model, "Primitive": Primitive, "IOKey": IOKey, "np": np}
        exec(compile(self.model_source(), "<fuzz recipe>", "exec"), namespace)
        return namespace["build_model"]()

    def compile_kwargs_source(self) -> dict[str, str]:
        """``ml.compile`` keyword arguments as source text (for reproduction files)."""
        used = self.used_inputs()
        shapes = {
            n: list(i.array.shape)
            for n, i in self.inputs.items()
            if n in used and i.shape_via == "compile" and not i.is_constant
        }
        kwargs: dict[str, str] = {}
        if shapes:
            kwargs["shapes"] = repr(shapes)
        trainable = [n for n in self.params() if n in used]
        data = [n for n, i in self.inputs.items() if i.role == "data" and n in used]
        constants = {n: i for n, i in self.inputs.items() if i.role == "constant_key" and n in used}
        if trainable:
            kwargs["trainable_keys"] = repr(trainable)
        if data:
            kwargs["data_keys"] = repr(data)
        if constants:
            kwargs["constant_keys"] = (
                "{" + ", ".join(f'"{n}": {array_literal(i.array)}' for n, i in constants.items()) + "}"
            )
        if self.discard:
            kwargs["discard_keys"] = repr(list(self.discard))
        if self.jit is not None:
            kwargs["jit"] = repr(self.jit)
        return kwargs

    def compile_kwargs(self) -> dict[str, Any]:
        """``ml.compile`` keyword arguments (the values of :meth:`compile_kwargs_source`)."""
        namespace = {"np": np}
        return {k: eval(v, namespace) for k, v in self.compile_kwargs_source().items()}

    def feeds(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(params, data)`` arrays to pass to ``evaluate`` (inputs the model uses)."""
        used = self.used_inputs()
        params = {n: self.inputs[n].array for n in self.params() if n in used}
        data = {n: self.inputs[n].array for n in self.runtime_data() if n in used}
        return params, data


def combine(parts: Sequence[Recipe]) -> Recipe:
    """One recipe holding ``parts`` side by side (inputs and values renamed, nothing shared): several random
    models compiled as one logical model, so a backend that builds a program per model (an XLA
    computation, a C or GGML shared library) pays that cost once for all of them. Compile options and the
    cotangent seed come from the first part.

    >>> a = Recipe()
    >>> (y,) = a.add_op("exp", {"input": a.add_input(np.array([1.0]), role="param")})
    >>> a.exposed.append(y)
    >>> both = combine([a, a])
    >>> list(both.inputs), [op.outputs for op in both.ops], both.outputs
    (['x0', 'x1'], [{'output': 'v0'}, {'output': 'v1'}], ['v0', 'v1'])
    """
    if not parts:
        raise ValueError("combine: expected at least one recipe, got none")
    out = Recipe(cotangent_seed=parts[0].cotangent_seed, jit=parts[0].jit)
    for part in parts:
        rename = {name: out.add_input(inp.array, inp.role, inp.shape_via) for name, inp in part.inputs.items()}
        for op in part.ops:
            for value in op.outputs.values():
                rename[value] = f"v{out._counter}"
                out._counter += 1
            inputs = {key: rename[ref] if isinstance(ref, str) else ref for key, ref in op.inputs.items()}
            out.ops.append(Op(op.primitive, dict(op.attrs), inputs, {key: rename[v] for key, v in op.outputs.items()}))
        out.exposed.extend(rename[name] for name in part.exposed)
        out.discard.extend(rename[name] for name in part.discard)
    return out


# -- literals ----------------------------------------------------------------------------------------
def _float_literal(x: float) -> str:
    if math.isnan(x):
        return "np.nan"
    if math.isinf(x):
        return "np.inf" if x > 0 else "-np.inf"
    return repr(float(x))


def array_literal(array: Any) -> str:
    """Exact Python source for an array (``np.array([...], dtype=np.float64)``); floats round-trip exactly.

    >>> array_literal(np.array([[1.5, 2.0]]))
    'np.array([[1.5, 2.0]], dtype=np.float64)'
    """
    a = np.asarray(array)
    kind = kind_of_array(a)
    if kind == "float":
        a64 = a.astype(np.float64)
        body = _nested(a64.tolist(), _float_literal)
        dtype = "np.float64"
    elif kind == "int":
        body = _nested(a.astype(np.int64).tolist(), lambda v: repr(int(v)))
        dtype = "np.int64"
    else:
        body = _nested(a.tolist(), lambda v: repr(bool(v)))
        dtype = "np.bool_"
    return f"np.array({body}, dtype={dtype})"


def _nested(value: Any, leaf: Callable[[Any], str]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_nested(v, leaf) for v in value) + "]"
    return leaf(value)


def _literal(value: Any) -> str:
    """Source of an attribute or constant value."""
    if isinstance(value, np.ndarray):
        return array_literal(value)
    if isinstance(value, float):
        return _float_literal(value)
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


# -- the oracle: references run in order ---------------------------------------------------------------
def _to_dtype(value: Any, dtype: np.dtype) -> Any:
    """Float arrays and Python floats in ``dtype``; ints and bools unchanged."""
    if isinstance(value, bool) or isinstance(value, (int, np.integer)):
        return value
    if isinstance(value, float):
        return dtype.type(value)
    a = np.asarray(value)
    return a.astype(dtype) if a.dtype.kind == "f" else a


def _normalise(result: Any, dtype: np.dtype) -> np.ndarray:
    a = np.asarray(result)
    if a.dtype.kind == "f":
        return a.astype(dtype)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    return a


@dataclass(frozen=True)
class _Step:
    """One call, ready to run: its reference, resolved attributes and input keys in order."""

    op: Op
    attrs: dict[str, Any]
    keys: tuple[str, ...]
    differentiable: frozenset[str]


def plan(recipe: Recipe) -> list[_Step]:
    """The calls of ``recipe`` with attributes resolved, for :func:`evaluate_reference` (computed once by
    callers that evaluate the same recipe many times)."""
    steps = []
    for op in recipe.ops:
        spec = spec_for(op.primitive)
        attrs = spec.resolve_attributes(dict(op.attrs))
        steps.append(_Step(op, attrs, tuple(spec.input_keys(attrs)), frozenset(spec.differentiable_keys(attrs))))
    return steps


def evaluate_reference(
    recipe: Recipe,
    inputs: Mapping[str, np.ndarray],
    *,
    dtype: Any = np.float64,
    frozen: Mapping[str, np.ndarray] | None = None,
    changed: set[str] | None = None,
    steps: list[_Step] | None = None,
) -> dict[str, np.ndarray]:
    """Every value of ``recipe`` (inputs and intermediates) computed by the plain-NumPy references.

    Args:
        inputs: input name -> array (constants included).
        dtype: the float dtype to compute in (float inputs and constants are cast to it).
        frozen: values to use at the primitives' *non-differentiable* input keys (``argmax``'s input, a
            ``gather`` index, a loss target...): with the values of an unperturbed run this gives the
            spec's stop-gradient semantics to finite differences.
        changed: with ``frozen``: the inputs that differ from that run; calls that depend on none of them
            take their values from ``frozen`` instead of running again.
        steps: ``plan(recipe)``, when the caller has it.
    """
    dt = np.dtype(dtype)
    values: dict[str, np.ndarray] = {n: _to_dtype(a, dt) for n, a in inputs.items()}
    dirty = recipe.dependents(changed) if frozen is not None and changed is not None else None
    for step in plan(recipe) if steps is None else steps:
        op = step.op
        outs = list(op.outputs.values())
        if (
            dirty is not None
            and frozen is not None
            and not any(isinstance(r, str) and r in dirty for r in op.inputs.values())
        ):
            values.update((name, frozen[name]) for name in outs)
            continue
        args: list[Any] = []
        for key in step.keys:
            ref = op.inputs.get(key)
            if ref is None:
                args.append(None)
            elif isinstance(ref, Const):
                args.append(_to_dtype(ref.value, dt))
            elif frozen is not None and key not in step.differentiable:
                args.append(_to_dtype(frozen[ref], dt))
            else:
                args.append(values[ref])
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = REFERENCES[op.primitive](*args, **step.attrs)
        results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        for name, value in zip(outs, results, strict=True):
            values[name] = _normalise(value, dt)
    return values
