"""Hypothesis strategy of random models (:func:`recipes`), valid by construction.

The generator builds a :class:`~mithril_testing.fuzz.Recipe` one primitive call at a time while running
each primitive's plain-NumPy reference on concrete float64 arrays, so every value's shape, kind and
contents are known when the next call is chosen:

- operands are existing values (inputs shared by several calls, intermediates reused) or new inputs whose
  shapes are derived from the operand they meet (broadcast patterns, matmul/conv/pool geometry);
- a call whose reference raises, or gives non-finite or huge values, is dropped (nothing is recorded);
- values stay in each primitive's domain: adapters (``exp(tanh(x))``, ``square(x) + 0.5``, ``sigmoid``,
  ``softmax``) are inserted before ``log``/``sqrt``/``rsqrt``/``divide``/``power`` and probability inputs;
- values stay away from kinks and discontinuities (``relu``/``abs`` at 0, ties of ``max``/``argmax``/
  ``maximum``/pooling windows, ``floor`` at integers, comparisons of near-equal values): a call whose
  operand is closer than a margin is dropped, so outputs are stable in float32 and finite differences are
  meaningful.

Every decision is a Hypothesis draw (values come from drawn seeds), so a failing model shrinks to a
minimal one.

Example:
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=3, database=None, derandomize=True)
    ... @given(recipes(FuzzProfile(max_ops=5)))
    ... def show(recipe):
    ...     assert 1 <= len(recipe.ops) <= 5 + 2
    >>> show()
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..cases import spec_for
from ..references import REFERENCES
from ._recipe import Const, Recipe, kind_of_array

__all__ = [
    "FAMILIES",
    "GENERATED_PRIMITIVES",
    "NOT_GENERATED",
    "FuzzProfile",
    "checked_call",
    "recipes",
    "valid_recipe",
]

LIMIT = 1e4
"""Calls producing values larger than this (in magnitude) are dropped."""

MARGIN = 2e-3
"""Relative distance operands keep from kinks and ties (times ``max(1, max |operand|)``)."""

NICE = (0.5, 2.0, -1.5, 3.0, 0.25, -0.75, 1.0)
"""Python-float constants (exact in every float dtype)."""

NOT_GENERATED: dict[str, str] = {
    "randn": "random: values differ between backends by design (checked by the conformance suite)",
    "randint": "random: values differ between backends by design (checked by the conformance suite)",
    "lambda": "a user Python callable: not available in generated C and not part of a portable model",
    **dict.fromkeys(
        ("item", "to_list", "to_tuple"),
        "gives a Python number, list or tuple, not an array: no output to compare, and nothing may consume it",
    ),
    "adam_update": "an optimizer step (no gradient, three outputs) emitted by ml.compile(optimizer=...); checked by "
    "the conformance cases and the training tests against torch.optim",
    "polynomial_features": "a fused form of existing primitives (its decomposition is what most backends run); "
    "checked by the conformance cases",
    **dict.fromkeys(
        ("matmul_grad_left", "matmul_grad_right"),
        "emitted only by matmul's VJP for operands of unknown rank, which generated (static-shape) models never have; "
        "checked by the conformance cases",
    ),
    "batch_norm2d": "its statistics outputs carry no gradient (outputs_without_gradient), which the oracle's finite "
    "differences do not model yet; checked by the conformance cases and BatchNorm2d's cross-backend and training tests",
    "unique": "its output shape depends on the values: not a static-shape model (C, GGML) nor a gradient check",
    **dict.fromkeys(
        ("reshape_to", "randn_of", "arange_between", "split_at"),
        "a variant taking a shape or bound computed from other tensors' shapes: in a static-shape model it folds to "
        "its base primitive, which is generated; run-time shapes are checked by tests/test_run_time_shapes.py",
    ),
    "dtype_constant": "a constant of the dtype computed in (the robust functions' thresholds), whatever the input's "
    "values: nothing to differentiate, and its tiny values meet the limits on generated values; checked by the "
    "conformance cases and mithril-core/tests/test_robust_numerics.py on every backend",
    "cast_like": "casts to another tensor's dtype: in a generated model every float shares the backend's dtype, so it "
    "is cast, which is generated; checked by the conformance cases",
    **dict.fromkeys(
        ("cholesky", "cholesky_grad", "eigvalsh", "eigvalsh_grad"),
        "needs a symmetric (positive-definite) input, and its gradient is the symmetric one, which finite "
        "differences of a random input (only the lower triangle is read) do not give; checked by the conformance cases",
    ),
}
"""Registered primitives the generator never produces, with the reason. ``dropout_mask`` is generated
only in its deterministic forms (``training=False`` or ``p=0``)."""


@dataclass(frozen=True)
class FuzzProfile:
    """Limits and choices of the generator.

    Attributes:
        max_ops: most primitive calls in one model (adapters included).
        max_dim: largest size of a new input's axis.
        max_rank: largest rank of a new input.
        max_elements: largest number of elements of any value.
        exclude: primitives never emitted (e.g. ones a backend declares unsupported, or known bugs).
        families: op families to draw from (default: all of :data:`FAMILIES`).
        jit_choices: values of ``ml.compile(jit=...)`` to draw from (``None``: the backend's default).
    """

    max_ops: int = 40
    max_dim: int = 4
    max_rank: int = 4
    max_elements: int = 96
    exclude: frozenset[str] = frozenset()
    families: tuple[str, ...] | None = None
    jit_choices: tuple[bool | None, ...] = (None,)


_DTYPES = {"float": np.float64, "int": np.int64, "bool": np.bool_}


class _Skip(Exception):
    """The family cannot produce a valid call from the current state; nothing was recorded."""


@dataclass
class _Gen:
    draw: st.DrawFn
    profile: FuzzProfile
    recipe: Recipe = field(default_factory=Recipe)
    values: dict[str, np.ndarray] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # every value, oldest first

    # -- draws ---------------------------------------------------------------------------------------
    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi)) if hi > lo else lo

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def choice(self, options: Sequence[Any]) -> Any:
        if not options:
            raise _Skip("nothing to choose from")
        return options[self.integer(0, len(options) - 1)]

    def chance(self, one_in: int) -> bool:
        """True with probability about ``1/one_in`` (shrinks to False)."""
        return self.integer(0, one_in - 1) == one_in - 1

    # -- values ----------------------------------------------------------------------------------------
    def kind(self, name: str) -> str:
        return kind_of_array(self.values[name])

    def new_input(
        self,
        shape: Sequence[int],
        kind: str = "float",
        *,
        dist: str | None = None,
        low: int = 0,
        high: int = 4,
        roles: Sequence[str] | None = None,
    ) -> str:
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) > self.profile.max_elements:
            raise _Skip("input too large")
        rng = np.random.default_rng(self.integer(0, 2**16))
        array: np.ndarray
        if kind == "float":
            dist = dist or self.choice(("normal", "uniform", "positive", "wide", "grid"))
            if dist == "normal":
                array = rng.standard_normal(shape)
            elif dist == "uniform":
                array = rng.uniform(-2.0, 2.0, shape)
            elif dist == "positive":
                array = rng.uniform(0.5, 2.0, shape)
            elif dist == "wide":
                array = rng.standard_normal(shape) * 4.0
            elif dist == "probability":
                array = rng.uniform(0.05, 0.95, shape)
            else:  # a shuffled grid: distinct values, no ties
                count = math.prod(shape)
                array = (rng.permutation(count) - count // 2) * 0.37 + rng.uniform(-0.05, 0.05, count)
                array = array.reshape(shape)
            array = np.asarray(array, dtype=np.float64).astype(np.float32).astype(np.float64)  # exact in float32
            roles = roles or (
                "param",
                "param",
                "param",
                "data",
                "data_default",
                "constant_key",
                "iokey_value",
                "set_values",
            )
        elif kind == "int":
            array = rng.integers(low, high, shape).astype(np.int64)
            roles = roles or ("data", "data_default", "constant_key", "iokey_value")
        else:
            array = rng.random(shape) < 0.5
            roles = roles or ("data", "data_default", "constant_key")
        role = self.choice(roles)
        shape_via = (
            "iokey" if role not in ("constant_key", "iokey_value", "set_values") and self.chance(3) else "compile"
        )
        name = self.recipe.add_input(array, role=role, shape_via=shape_via)
        self.values[name] = array
        self.order.append(name)
        return name

    def shape(self, min_rank: int = 0, max_rank: int | None = None, min_dim: int = 1) -> tuple[int, ...]:
        max_rank = self.profile.max_rank if max_rank is None else max_rank
        rank = self.integer(min_rank, max_rank)
        dims = tuple(self.integer(min_dim, max(min_dim, self.profile.max_dim)) for _ in range(rank))
        if math.prod(dims) > self.profile.max_elements:
            raise _Skip("shape too large")
        return dims

    def candidates(self, kind: str = "float", predicate: Callable[[np.ndarray], bool] | None = None) -> list[str]:
        """Existing values of ``kind`` satisfying ``predicate``, newest first."""
        return [
            n for n in reversed(self.order) if self.kind(n) == kind and (predicate is None or predicate(self.values[n]))
        ]

    def operand(
        self,
        kind: str = "float",
        predicate: Callable[[np.ndarray], bool] | None = None,
        new: Callable[[], str] | None = None,
    ) -> str:
        """An existing value (reused; shrinks toward the newest) or a new input."""
        cands = self.candidates(kind, predicate)
        if cands and (new is None or not self.chance(3)):
            return cands[self.integer(0, min(len(cands), 12) - 1)]
        if new is None:
            shape = self.shape()
            if predicate is not None and not predicate(np.zeros(shape, dtype=_DTYPES[kind])):
                raise _Skip("a new input of the drawn shape does not fit")
            return self.new_input(shape, kind, high=4)
        return new()

    def operand_of_shape(self, shape: Sequence[int], kind: str = "float", **new_kw: Any) -> str:
        shape = tuple(shape)
        return self.operand(kind, lambda a: a.shape == shape, lambda: self.new_input(shape, kind, **new_kw))

    # -- emitting ------------------------------------------------------------------------------------
    def emit(
        self, primitive: str, inputs: dict[str, str | Const | None], attrs: dict[str, Any] | None = None
    ) -> list[str]:
        """Record a call if its reference runs, stays finite and bounded and keeps its margins."""
        if primitive in self.profile.exclude:
            raise _Skip(f"{primitive} excluded")
        if len(self.recipe.ops) >= self.profile.max_ops:
            raise _Skip("model full")
        attrs = dict(attrs or {})
        spec = spec_for(primitive)
        args = {}
        for key, ref in inputs.items():
            args[key] = None if ref is None else ref.value if isinstance(ref, Const) else self.values[ref]
        results = checked_call(primitive, args, attrs, self.profile.max_elements)
        for key in spec.optional_inputs:  # an optional slot's input nobody declares is dropped by design
            ref = inputs.get(key)
            if isinstance(ref, str) and ref in self.recipe.inputs and self.recipe.inputs[ref].role == "data_default":
                self.recipe.inputs[ref].role = "data"
        outs = self.recipe.add_op(primitive, inputs, attrs)
        for name, r in zip(outs, results, strict=True):
            if r.dtype.kind == "f":
                r = r.astype(np.float64)
            elif r.dtype.kind in "iu":
                r = r.astype(np.int64)
            self.values[name] = r
            self.order.append(name)
        return outs

    def reference(self, primitive: str, *args: Any, **attrs: Any) -> np.ndarray:
        """Run a reference to learn a shape; a failure means the geometry is invalid (skip)."""
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = np.asarray(REFERENCES[primitive](*args, **attrs))
        except Exception as exc:
            raise _Skip(f"reference raised {exc!r}") from None
        if out.size == 0:
            raise _Skip("empty result")
        return out

    def attempt(self, family: Callable[[_Gen], Any]) -> None:
        """Run one family; a family that cannot finish leaves the calls it already made (all valid)."""
        try:
            family(self)
        except _Skip:
            pass


def checked_call(
    primitive: str, args: dict[str, Any], attrs: dict[str, Any], max_elements: int = 10**6
) -> list[np.ndarray]:
    """Run ``primitive``'s reference on ``args`` (input key -> array, Python constant or ``None``) and return
    its outputs, or raise ``_Skip`` when the call is not a good test: invalid, empty, too large,
    non-finite or huge, or too close to a kink or tie (:data:`MARGIN_CHECKS`)."""
    spec = spec_for(primitive)
    try:
        resolved = spec.resolve_attributes(attrs)
    except Exception as exc:
        raise _Skip(f"invalid attributes: {exc}") from None
    keys = spec.input_keys(resolved)
    ordered = [args.get(key) for key in keys]
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = REFERENCES[primitive](*ordered, **resolved)
    except Exception as exc:
        raise _Skip(f"reference raised {exc!r}") from None
    results = [np.asarray(r) for r in (result if isinstance(result, (tuple, list)) else (result,))]
    if len(results) != len(spec.output_keys(resolved)):
        raise _Skip("reference gave a different number of outputs")
    for r in results:
        if r.size == 0 or r.size > max_elements:
            raise _Skip("empty or too large result")
        if r.dtype.kind == "f" and not (np.all(np.isfinite(r)) and np.max(np.abs(r)) <= LIMIT):
            raise _Skip("non-finite or huge result")
        if r.dtype.kind in "iu" and np.max(np.abs(r)) > LIMIT:
            raise _Skip("huge int result")
    check = MARGIN_CHECKS.get(primitive)
    if check is not None and not check(dict(zip(keys, ordered, strict=True)), resolved, results):
        raise _Skip("too close to a kink or tie")
    return results


def valid_recipe(recipe: Recipe) -> bool:
    """Whether every call of ``recipe`` passes the generator's checks (:func:`checked_call`) on its values:
    used to accept a transformed recipe (e.g. while reducing a failure).

    >>> r = Recipe()
    >>> x = r.add_input(np.array([0.0, 1.0]), role="param")
    >>> _ = r.add_op("relu", {"input": x})
    >>> valid_recipe(r)
    False
    """
    values: dict[str, Any] = recipe.input_arrays()
    for op in recipe.ops:
        args = {
            k: None if ref is None else ref.value if isinstance(ref, Const) else values[ref]
            for k, ref in op.inputs.items()
        }
        try:
            results = checked_call(op.primitive, args, op.attrs)
        except _Skip:
            return False
        for name, r in zip(op.outputs.values(), results, strict=True):
            values[name] = r
    return True


# -- margins -------------------------------------------------------------------------------------------
def _scale(*arrays: Any) -> float:
    return max(
        [
            1.0,
            *(
                float(np.max(np.abs(a)))
                for a in arrays
                if a is not None and np.size(a) and np.asarray(a).dtype.kind == "f"
            ),
        ]
    )


def _away_from_zero(x: Any, scale: float | None = None) -> bool:
    x = np.asarray(x, dtype=np.float64)
    return bool(np.min(np.abs(x)) >= MARGIN * (_scale(x) if scale is None else scale))


def _away_from_integers(x: Any) -> bool:
    x = np.asarray(x, dtype=np.float64)
    return bool(np.min(np.abs(x - np.round(x))) >= MARGIN * _scale(x))


def _top_gap(x: np.ndarray, axis: Any) -> bool:
    """The largest and second largest (and smallest pair) along ``axis`` differ by the margin."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        return True
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    flat = moved.reshape(*moved.shape[: x.ndim - len(axes)], -1)
    if flat.shape[-1] < 2:
        return True
    srt = np.sort(flat, axis=-1)
    gap = min(float(np.min(srt[..., -1] - srt[..., -2])), float(np.min(srt[..., 1] - srt[..., 0])))
    return gap >= MARGIN * _scale(x)


def _pool_windows_ok(x: np.ndarray, attrs: dict[str, Any]) -> bool:
    """No near-ties for the maximum of any max-pool window (padding counts as -inf)."""
    from ..references import _pool_setup, _windows  # the reference's own window enumeration

    x = np.asarray(x, dtype=np.float64)
    kernel, stride, dilation, pads, out_sizes = _pool_setup(
        x.shape, attrs["kernel_size"], attrs["stride"], attrs["padding"], attrs["dilation"]
    )
    windows = _windows(x, kernel, stride, dilation, pads, out_sizes, -np.inf)
    if windows.shape[-1] < 2:
        return True
    srt = np.sort(windows, axis=-1)
    top, second = srt[..., -1], srt[..., -2]
    gap = np.where(np.isfinite(second), top - second, np.inf)
    return bool(np.all(np.isfinite(top))) and float(np.min(gap)) >= MARGIN * _scale(x)


def _pair_gap(a: Any, b: Any) -> bool:
    if np.asarray(a).dtype.kind not in "f" and np.asarray(b).dtype.kind not in "f":
        return True
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return bool(
        np.min(np.abs(diff)) >= MARGIN * _scale(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    )


def _floor_divide_ok(named: dict[str, Any], attrs: dict[str, Any], outs: list[np.ndarray]) -> bool:
    left, right = np.asarray(named["left"]), np.asarray(named["right"])
    if np.any(right == 0):
        return False
    if left.dtype.kind != "f" and right.dtype.kind != "f":
        return True
    return _away_from_integers(left / right) and _away_from_zero(right)


def _cast_ok(named: dict[str, Any], attrs: dict[str, Any], outs: list[np.ndarray]) -> bool:
    x = np.asarray(named["input"])
    if x.dtype.kind != "f":
        return True
    if attrs["dtype"] == "int":
        return _away_from_integers(x)
    if attrs["dtype"] == "bool":
        return _away_from_zero(x)
    return True


def _float_in(named: dict[str, Any], key: str) -> np.ndarray | None:
    v = named.get(key)
    return None if v is None or np.asarray(v).dtype.kind != "f" else np.asarray(v)


MARGIN_CHECKS: dict[str, Callable[[dict[str, Any], dict[str, Any], list[np.ndarray]], bool]] = {
    "relu": lambda n, a, o: _away_from_zero(n["input"]),
    "abs": lambda n, a, o: _away_from_zero(n["input"]),
    "leaky_relu": lambda n, a, o: _away_from_zero(n["input"]),
    "sign": lambda n, a, o: _away_from_zero(n["input"]),
    "floor": lambda n, a, o: _away_from_integers(n["input"]),
    "cast": _cast_ok,
    "log": lambda n, a, o: float(np.min(n["input"])) >= 0.05,
    "log1p": lambda n, a, o: float(np.min(n["input"])) >= -0.95,
    "sqrt": lambda n, a, o: float(np.min(n["input"])) >= 0.05,
    "rsqrt": lambda n, a, o: float(np.min(n["input"])) >= 0.05,
    "divide": lambda n, a, o: _away_from_zero(n["right"], 1.0) and float(np.min(np.abs(n["right"]))) >= 0.05,
    "power": lambda n, a, o: float(np.min(np.asarray(n["left"], dtype=np.float64))) >= 0.05,
    "minimum": lambda n, a, o: _pair_gap(n["left"], n["right"]),
    "maximum": lambda n, a, o: _pair_gap(n["left"], n["right"]),
    "floor_divide": _floor_divide_ok,
    **{
        name: (lambda n, a, o: _pair_gap(n["left"], n["right"]))
        for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
    },
    **{
        name: (lambda n, a, o: np.asarray(n["input"]).dtype.kind != "f" or _top_gap(n["input"], a["axis"]))
        for name in ("max", "min", "argmax", "argmin")
    },
    "max_pool2d": lambda n, a, o: _pool_windows_ok(n["input"], a),
    "max_pool2d_grad": lambda n, a, o: _pool_windows_ok(n["input"], a),
    "absolute_error": lambda n, a, o: _pair_gap(n["input"], n["target"]),
    "binary_cross_entropy": lambda n, a, o: (
        a["input_type"] == "logits" or bool(np.all((n["input"] > 0.02) & (n["input"] < 0.98)))
    ),
    "cross_entropy": lambda n, a, o: a["input_type"] != "probs" or float(np.min(n["input"])) > 0.01,
    "cross_entropy_grad": lambda n, a, o: a["input_type"] != "probs" or float(np.min(n["input"])) > 0.01,
    # the VJP rule (g * out / x, mithril.gradients.vjp_rules.reductions) assumes no zero in the input
    "prod": lambda n, a, o: _away_from_zero(n["input"], 1.0),
}


# -- shapes ---------------------------------------------------------------------------------------------
def _broadcast_partner(g: _Gen, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape``: the same, trailing dims with some set to 1, or extra
    leading dims."""
    mode = g.integer(0, 3)
    if mode == 0:
        return shape
    if mode in (1, 2):
        keep = g.integer(0, len(shape)) if mode == 1 else len(shape)
        dims = list(shape[len(shape) - keep :])
        mask = g.integer(0, 2 ** len(dims) - 1) if dims else 0
        return tuple(1 if mask >> i & 1 else d for i, d in enumerate(dims))
    extra = tuple(g.integer(1, 3) for _ in range(g.integer(1, 2)))
    dims = list(shape)
    mask = g.integer(0, 2 ** len(dims) - 1) if dims else 0
    return extra + tuple(1 if mask >> i & 1 else d for i, d in enumerate(dims))


def _broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _axis(g: _Gen, rank: int) -> int:
    a = g.integer(0, rank - 1)
    return a - rank if g.chance(2) else a


def _axes(g: _Gen, rank: int, *, multiple: bool = True, allow_none: bool = True) -> Any:
    mode = g.integer(0, 2 if multiple else 1)
    if rank == 0 or (mode == 0 and allow_none):
        return None
    if mode <= 1:
        return _axis(g, rank)
    chosen = sorted({g.integer(0, rank - 1) for _ in range(g.integer(1, rank))})
    return tuple(a - rank if g.chance(3) else a for a in chosen)


# -- adapters -------------------------------------------------------------------------------------------
def _positive(g: _Gen, name: str, low: float = 0.1) -> str:
    """``name`` if its values are at least ``low``, else a positive transform of it."""
    if g.kind(name) != "float":
        (name,) = g.emit("cast", {"input": name}, {"dtype": "float"})
    if float(np.min(g.values[name])) >= low:
        return name
    how = g.integer(0, 2)
    if how == 0:
        (t,) = g.emit("tanh", {"input": name})
        (out,) = g.emit("exp", {"input": t})
    elif how == 1:
        (t,) = g.emit("square", {"input": name})
        (out,) = g.emit("add", {"left": t, "right": Const(0.5)})
    else:
        (t,) = g.emit("softplus", {"input": name})
        (out,) = g.emit("add", {"left": t, "right": Const(0.25)})
    return out


def _bounded(g: _Gen, name: str, bound: float = 4.0) -> str:
    if float(np.max(np.abs(g.values[name]))) <= bound:
        return name
    (out,) = g.emit("tanh", {"input": name})
    return out


def _probability(g: _Gen, name: str) -> str:
    (t,) = g.emit("tanh", {"input": _bounded(g, name)})
    (out,) = g.emit("sigmoid", {"input": t})
    return out


# -- families ---------------------------------------------------------------------------------------------
UNARY_FLOAT = (
    "neg", "exp", "tanh", "sigmoid", "sin", "cos", "square", "relu", "abs", "log", "log1p", "sqrt", "rsqrt",
    "leaky_relu", "gelu", "softplus", "erf", "sign", "floor", "isnan", "nan_to_num", "cast", "dropout_mask",
    "zeros_like", "ones_like", "stop_gradient",
)  # fmt: skip
BINARY_ARITH = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "floor_divide")
COMPARISONS = ("less", "greater", "less_equal", "greater_equal", "equal", "not_equal")
LOGICAL = ("logical_and", "logical_or", "logical_xor", "logical_not")
REDUCTIONS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "var")


def fam_unary(g: _Gen) -> None:
    prim = g.choice(UNARY_FLOAT)
    x = g.operand("float")
    attrs: dict[str, Any] = {}
    if prim in ("log", "log1p", "sqrt", "rsqrt"):
        x = _positive(g, x)
    elif prim == "exp":
        x = _bounded(g, x)
    elif prim == "leaky_relu":
        attrs["slope"] = g.choice((0.01, 0.2, -0.5))
    elif prim == "gelu":
        attrs["approximate"] = g.flag()
    elif prim == "cast":
        attrs["dtype"] = g.choice(("float", "int", "bool"))
    elif prim == "dropout_mask":
        attrs = g.choice(({"training": False}, {"p": 0.0}, {"p": 0.7, "training": False}))
    g.emit(prim, {"input": x}, attrs)


def fam_int_ops(g: _Gen) -> None:
    """Integer and bool values: casts, int arithmetic, logical ops, where."""
    what = g.integer(0, 3)
    if what == 0:  # int arithmetic
        prim = g.choice(
            (
                "add",
                "multiply",
                "subtract",
                "maximum",
                "minimum",
                "floor_divide",
                "neg",
                "abs",
                "square",
                "sum",
                "max",
                "cast",
            )
        )
        x = g.operand("int")
        if prim in ("neg", "abs", "square"):
            g.emit(prim, {"input": x})
        elif prim in ("sum", "max"):
            g.emit(prim, {"input": x}, {"axis": _axes(g, g.values[x].ndim, multiple=False), "keepdim": g.flag()})
        elif prim == "cast":
            g.emit(prim, {"input": x}, {"dtype": g.choice(("float", "bool"))})
        else:
            shape = _broadcast_partner(g, g.values[x].shape)
            if prim == "floor_divide":
                y = g.new_input(shape, "int", low=1, high=4)
            else:
                y = g.operand(
                    "int",
                    lambda a: _broadcastable(a.shape, g.values[x].shape),
                    lambda: g.new_input(shape, "int", high=5),
                )
            g.emit(prim, {"left": x, "right": y})
    elif what == 1:  # bool logic
        prim = g.choice((*LOGICAL, "cast", "sum", "where"))
        b = g.operand("bool")
        if prim == "logical_not":
            g.emit(prim, {"input": b})
        elif prim == "cast":
            g.emit(prim, {"input": b}, {"dtype": g.choice(("float", "int"))})
        elif prim == "sum":
            g.emit(prim, {"input": b}, {"axis": _axes(g, g.values[b].ndim), "keepdim": g.flag()})
        elif prim == "where":
            fam_where(g, b)
        else:
            shape = _broadcast_partner(g, g.values[b].shape)
            c = g.operand(
                "bool", lambda a: _broadcastable(a.shape, g.values[b].shape), lambda: g.new_input(shape, "bool")
            )
            g.emit(prim, {"left": b, "right": c})
    elif what == 2:  # mixed int/float arithmetic (promotion)
        x = g.operand("float")
        shape = _broadcast_partner(g, g.values[x].shape)
        n = g.operand(
            "int",
            lambda a: _broadcastable(a.shape, g.values[x].shape),
            lambda: g.new_input(shape, "int", low=-3, high=4),
        )
        prim = g.choice(("multiply", "add", "subtract"))
        left, right = (x, n) if g.flag() else (n, x)
        g.emit(prim, {"left": left, "right": right})
    else:  # int-valued results of shape queries
        x = g.operand("float")
        prim = g.choice(("positions", "shape", "size"))
        attrs = {"axis": _axis(g, g.values[x].ndim)} if prim == "positions" and g.values[x].ndim else {}
        if prim == "positions" and not attrs:
            raise _Skip("positions of a scalar")
        g.emit(prim, {"input": x}, attrs)


def fam_where(g: _Gen, cond: str | None = None) -> None:
    if cond is None:
        cond = g.operand("bool")
    shape = g.values[cond].shape
    left = g.operand(
        "float", lambda a: _broadcastable(a.shape, shape), lambda: g.new_input(_broadcast_partner(g, shape))
    )
    out_shape = np.broadcast_shapes(shape, g.values[left].shape)
    if g.chance(3):
        right: str | Const = Const(g.choice(NICE))
    else:
        right = g.operand(
            "float", lambda a: _broadcastable(a.shape, out_shape), lambda: g.new_input(_broadcast_partner(g, out_shape))
        )
    g.emit("where", {"condition": cond, "left": left, "right": right})


def _second_operand(g: _Gen, x: str, prim: str) -> str | Const:
    shape = g.values[x].shape
    how = g.integer(0, 4)
    if how == 0:
        return g.operand(
            "float",
            lambda a: _broadcastable(a.shape, shape) and a is not g.values[x],
            lambda: g.new_input(_broadcast_partner(g, shape)),
        )
    if how == 1:
        return g.new_input(_broadcast_partner(g, shape))
    if how == 2:
        return Const(g.choice(NICE))
    if how == 3:
        rng = np.random.default_rng(g.integer(0, 999))
        return Const(rng.standard_normal(_broadcast_partner(g, shape)).astype(np.float32).astype(np.float64))
    return x


def fam_binary(g: _Gen) -> None:
    prim = g.choice(BINARY_ARITH + COMPARISONS)
    x = g.operand("float")
    if prim == "power":
        base = _positive(g, x)
        how = g.integer(0, 2)
        if how == 0:
            exponent: str | Const = Const(g.choice((2, 3, 0.5, -1.0, 1.5, 2.0)))
        else:
            e = g.new_input(_broadcast_partner(g, g.values[base].shape), dist="uniform")
            exponent = _bounded(g, e, 2.0)
        g.emit(prim, {"left": base, "right": exponent})
        return
    y = _second_operand(g, x, prim)
    if prim == "divide" and not isinstance(y, Const):
        y = _positive(g, y) if g.flag() else y
    if prim == "divide" and isinstance(y, Const) and np.min(np.abs(y.value)) < 0.1:
        raise _Skip("divide by ~0")
    left, right = (x, y) if g.flag() or (isinstance(y, Const) and g.chance(2)) else (y, x)
    g.emit(prim, {"left": left, "right": right})


def fam_reduce(g: _Gen) -> None:
    prim = g.choice((*REDUCTIONS, "softmax", "log_softmax"))
    x = g.operand("float", lambda a: a.ndim >= (1 if prim in ("softmax", "log_softmax") else 0))
    rank = g.values[x].ndim
    if prim in ("softmax", "log_softmax"):
        if rank == 0:
            raise _Skip("softmax of a scalar")
        g.emit(prim, {"input": x}, {"axis": _axis(g, rank)})
        return
    attrs: dict[str, Any] = {"axis": _axes(g, rank, multiple=prim not in ("argmax", "argmin")), "keepdim": g.flag()}
    if prim == "var":
        attrs["correction"] = g.integer(0, 1)
    if prim == "prod":
        x = _bounded(g, x, 2.0)
    g.emit(prim, {"input": x}, attrs)


def _factorise(g: _Gen, size: int) -> list[int]:
    dims = []
    rest = size
    for _ in range(g.integer(0, 3)):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = g.choice(divisors)
        dims.append(d)
        rest //= d
    dims.append(rest)
    return [d for d in dims] if g.flag() else dims[::-1]


def fam_shape(g: _Gen) -> None:
    prim = g.choice(
        (
            "reshape",
            "transpose",
            "swapaxes",
            "squeeze",
            "unsqueeze",
            "flatten",
            "broadcast_to",
            "index",
            "pad",
            "at_least_1d",
        )
    )
    kind = "float" if not g.chance(5) else g.choice(("int", "bool"))
    x = g.operand(kind, lambda a: a.ndim >= (2 if prim == "swapaxes" else 1 if prim in ("transpose", "flatten") else 0))
    a = g.values[x]
    rank = a.ndim
    attrs: dict[str, Any]
    if prim == "reshape":
        target: list[Any] = _factorise(g, a.size)
        if g.chance(3):
            target[g.integer(0, len(target) - 1)] = -1
        if g.chance(4):
            same = [i for i in range(min(rank, len(target))) if target[i] == a.shape[i]]
            if same:
                target[g.choice(same)] = None
        attrs = {"shape": tuple(target) if g.flag() else target}
    elif prim == "transpose":
        if g.chance(3):
            attrs = {"axes": None}
        else:
            perm = list(range(rank))
            for i in range(rank - 1, 0, -1):
                j = g.integer(0, i)
                perm[i], perm[j] = perm[j], perm[i]
            attrs = {"axes": tuple(p - rank if g.chance(4) else p for p in perm)}
    elif prim == "swapaxes":
        attrs = {"axis1": _axis(g, rank), "axis2": _axis(g, rank)}
    elif prim == "squeeze":
        ones = [i for i, d in enumerate(a.shape) if d == 1]
        if not ones or g.chance(3):
            attrs = {"axis": None}
        else:
            chosen = sorted({g.choice(ones) for _ in range(g.integer(1, len(ones)))})
            attrs = {"axis": chosen[0] if len(chosen) == 1 and g.flag() else tuple(chosen)}
    elif prim == "unsqueeze":
        new_rank = rank + g.integer(1, 2)
        axes = sorted({g.integer(0, new_rank - 1) for _ in range(new_rank - rank)})
        if len(axes) != new_rank - rank:
            raise _Skip("repeated unsqueeze axis")
        attrs = {"axis": axes[0] if len(axes) == 1 and g.flag() else tuple(axes)}
    elif prim == "flatten":
        start, end = sorted((g.integer(0, rank - 1), g.integer(0, rank - 1)))
        attrs = {"start_dim": start - rank if g.chance(3) else start, "end_dim": end - rank if g.flag() else end}
    elif prim == "broadcast_to":
        extra = tuple(g.integer(1, 3) for _ in range(g.integer(0, 2)))
        dims = tuple(g.integer(1, 3) if d == 1 and g.flag() else d for d in a.shape)
        attrs = {"shape": extra + dims}
    elif prim == "index":
        attrs = {"key": _index_key(g, a.shape)}
    elif prim == "at_least_1d":
        attrs = {}
    else:  # pad
        attrs = {
            "pad_width": tuple((g.integer(0, 2), g.integer(0, 2)) for _ in range(rank)),
            "value": g.choice((0.0, 1.5, -1.0)),
        }
        if kind != "float":
            attrs["value"] = 0 if kind == "int" else False
            if kind == "bool":
                raise _Skip("pad of bools")
    g.emit(prim, {"input": x}, attrs)


def _index_key(g: _Gen, shape: tuple[int, ...]) -> Any:
    items: list[Any] = []
    for size in shape:
        how = g.integer(0, 4)
        if how == 0:
            items.append(slice(None))
        elif how == 1:
            i = g.integer(0, size - 1)
            items.append(i - size if g.flag() else i)
        elif how == 2:
            start = g.integer(0, size - 1)
            stop = g.integer(start + 1, size)
            items.append(slice(start, stop, g.choice((None, 1, 2))))
        elif how == 3:
            items.append(slice(None, None, -1) if g.flag() else slice(size - 1, None, -g.integer(1, 2)))
        else:
            items.append(None)
            items.append(slice(None))
    if items and g.chance(4):
        cut = g.integer(0, len(items) - 1)
        items = [*items[:cut], Ellipsis]
    if len(items) == 1 and g.flag():
        return items[0]
    return tuple(items)


def fam_concat_split(g: _Gen) -> None:
    if g.flag():
        x = g.operand("float", lambda a: a.ndim >= 1)
        a = g.values[x]
        axis = _axis(g, a.ndim)
        n = g.integer(2, 4)
        names: list[str] = [x]
        for _ in range(n - 1):

            def fits(b: np.ndarray) -> bool:
                return b.ndim == a.ndim and all(i == axis % a.ndim or b.shape[i] == a.shape[i] for i in range(a.ndim))

            def new() -> str:
                shape = list(a.shape)
                shape[axis] = g.integer(1, 3)
                return g.new_input(shape)

            names.append(g.operand("float", fits, new))
        order = list(range(n))
        if g.flag():
            order = order[::-1]
        g.emit("concat", {f"input_{i}": names[j] for i, j in enumerate(order)}, {"n": n, "axis": axis})
    else:
        x = g.operand("float", lambda a: any(d >= 2 for d in a.shape))
        a = g.values[x]
        axis = g.choice([i for i, d in enumerate(a.shape) if d >= 2])
        size = a.shape[axis]
        if g.flag():
            sections: Any = g.choice([d for d in range(1, size + 1) if size % d == 0])
        else:
            sections = sorted({g.integer(1, size - 1) for _ in range(g.integer(1, 2))})
        outs = g.emit("split", {"input": x}, {"sections": sections, "axis": axis - a.ndim if g.chance(3) else axis})
        if len(outs) >= 2 and g.flag():  # use two pieces together
            pieces = [g.values[o] for o in outs]
            if pieces[0].shape == pieces[-1].shape:
                g.emit("multiply", {"left": outs[0], "right": outs[-1]})


def fam_matmul(g: _Gen) -> None:
    if g.chance(3):
        x = g.operand("float", lambda a: 1 <= a.ndim <= 3)
        a = g.values[x]
        k = a.shape[-1]
        d = g.integer(1, 4)
        w = g.operand_of_shape((d, k))
        bias: str | None = None
        if g.flag():
            bias = g.operand_of_shape((d,))
        g.emit("linear", {"input": x, "weight": w, "bias": bias})
        return
    x = g.operand("float", lambda a: a.ndim >= 1)
    a = g.values[x]
    if a.ndim == 1:
        k = a.shape[0]
        shape: tuple[int, ...] = g.choice(((k,), (k, g.integer(1, 4)), (g.integer(1, 3), k, g.integer(1, 4))))
    else:
        k = a.shape[-1]
        n = g.integer(1, 4)
        batch = _broadcast_partner(g, a.shape[:-2]) if a.ndim > 2 else ()
        shape = g.choice(((k,), (k, n), (*batch, k, n)))
    y = g.operand_of_shape(shape)
    left, right = x, y
    if g.chance(3) and len(shape) >= 2 and a.ndim >= 1:  # y @ x when it fits
        yb = g.values[y]
        if yb.shape[-1] == (a.shape[0] if a.ndim == 1 else a.shape[-2]):
            left, right = y, x
    g.emit("matmul", {"left": left, "right": right})


def _conv_padding(g: _Gen, kernel: tuple[int, ...], stride: tuple[int, ...]) -> Any:
    how = g.integer(0, 4)
    if how == 0:
        return g.integer(0, 2)
    if how == 1:
        return "valid"
    if how == 2 and all(s == 1 for s in stride):
        return "same"
    if how == 3:
        return tuple(g.integer(0, 2) for _ in kernel)
    return tuple((g.integer(0, 2), g.integer(0, 2)) for _ in kernel)


def _conv_geometry(g: _Gen, n: int, channels: int) -> tuple[dict[str, Any], tuple[int, ...], int]:
    groups = g.choice([d for d in range(1, channels + 1) if channels % d == 0])
    out_channels = groups * g.integer(1, 2)
    kernel = tuple(g.integer(1, 3) for _ in range(n))
    stride_ = tuple(g.integer(1, 2) for _ in range(n))
    dilation = tuple(g.integer(1, 2) for _ in range(n))
    attrs: dict[str, Any] = {
        "stride": stride_[0] if len(set(stride_)) == 1 and g.flag() else stride_,
        "padding": _conv_padding(g, kernel, stride_),
        "dilation": dilation[0] if len(set(dilation)) == 1 and g.flag() else dilation,
        "groups": groups,
    }
    return attrs, kernel, out_channels


def fam_conv(g: _Gen) -> None:
    n = g.integer(1, 2)
    prim = f"conv{n}d"
    x = g.operand(
        "float",
        lambda a: a.ndim == n + 2 and a.shape[1] <= 4,
        lambda: g.new_input((g.integer(1, 2), g.integer(1, 3), *(g.integer(2, 6) for _ in range(n)))),
    )
    a = g.values[x]
    attrs, kernel, out_channels = _conv_geometry(g, n, a.shape[1])
    w = g.operand_of_shape((out_channels, a.shape[1] // attrs["groups"], *kernel))
    inputs: dict[str, str | Const | None] = {"input": x, "weight": w, "bias": None}
    if g.flag():
        inputs["bias"] = g.operand_of_shape((out_channels,))
    if g.chance(4):  # the gradient helpers with the same geometry, as forward primitives
        out = g.reference(prim, a, g.values[w], None, **attrs)
        grad = g.new_input(out.shape)
        if g.flag():
            g.emit(f"{prim}_grad_input", {"output_grad": grad, "weight": w, "like": x}, attrs)
        else:
            g.emit(f"{prim}_grad_weight", {"output_grad": grad, "input": x, "like": w}, attrs)
        return
    g.emit(prim, inputs, attrs)


def fam_pool(g: _Gen) -> None:
    prim = g.choice(("max_pool2d", "avg_pool2d"))
    x = g.operand(
        "float",
        lambda a: a.ndim >= 2 and min(a.shape[-2:]) >= 2,
        lambda: g.new_input(
            (*(g.integer(1, 2) for _ in range(g.integer(0, 2))), g.integer(2, 6), g.integer(2, 6)),
            dist=g.choice(("grid", "normal")),
        ),
    )
    kernel = (g.integer(1, 3), g.integer(1, 3))
    attrs: dict[str, Any] = {"kernel_size": kernel[0] if kernel[0] == kernel[1] and g.flag() else kernel}
    how = g.integer(0, 2)
    if how == 1:
        attrs["stride"] = g.integer(1, 3)
    elif how == 2:
        attrs["stride"] = (g.integer(1, 3), g.integer(1, 3))
    if g.flag():
        pads = (g.integer(0, kernel[0] // 2), g.integer(0, kernel[1] // 2))
        attrs["padding"] = pads[0] if pads[0] == pads[1] else pads
    if g.chance(4):
        attrs["dilation"] = g.integer(1, 2)
    if prim == "avg_pool2d":
        attrs["count_include_pad"] = g.flag()
    if g.chance(5):  # the gradient helper with the same geometry
        out = g.reference(prim, g.values[x], **spec_for(prim).resolve_attributes(attrs))
        grad = g.new_input(out.shape)
        g.emit(f"{prim}_grad", {"output_grad": grad, "input": x}, attrs)
        return
    g.emit(prim, {"input": x}, attrs)


def fam_gather_embedding(g: _Gen) -> None:
    what = g.integer(0, 3)
    if what == 3:  # a slice written at a run-time start, as a KV-cache chunk
        x = g.operand("float", lambda a: a.ndim >= 1 and a.size > 0)
        a = g.values[x]
        axis = _axis(g, a.ndim)
        shape = list(a.shape)
        shape[axis] = g.integer(1, a.shape[axis])
        start = g.new_input([1], "int", high=a.shape[axis] - shape[axis] + 1)
        g.emit("dynamic_update_slice", {"input": x, "update": g.new_input(shape), "start": start}, {"axis": axis})
        return
    if what == 0:
        x = g.operand("float", lambda a: a.ndim >= 1)
        a = g.values[x]
        axis = _axis(g, a.ndim)
        shape = list(a.shape)
        shape[axis] = g.integer(1, 4)
        index = g.new_input(shape, "int", high=a.shape[axis])
        if g.chance(4):
            grad = g.new_input(shape)
            g.emit("gather_grad", {"output_grad": grad, "index": index, "like": x}, {"axis": axis})
            return
        g.emit("gather", {"input": x, "index": index}, {"axis": axis})
    elif what == 1:
        w = g.operand(
            "float", lambda a: a.ndim == 2 and a.shape[0] >= 2, lambda: g.new_input((g.integer(2, 6), g.integer(1, 4)))
        )
        vocab = g.values[w].shape[0]
        ids = g.operand(
            "int",
            lambda a: a.ndim <= 2 and a.size > 0 and int(a.min()) >= 0 and int(a.max()) < vocab,
            lambda: g.new_input(g.shape(0, 2), "int", high=vocab),
        )
        if g.chance(4):
            grad = g.new_input((*g.values[ids].shape, g.values[w].shape[1]))
            g.emit("embedding_grad", {"output_grad": grad, "input": ids, "like": w})
            return
        g.emit("embedding", {"input": ids, "weight": w})
    else:  # index_grad
        x = g.operand("float", lambda a: a.ndim >= 1)
        key = _index_key(g, g.values[x].shape)
        sub = np.asarray(g.values[x][key])
        grad = g.new_input(sub.shape)
        g.emit("index_grad", {"output_grad": grad, "like": x}, {"key": key})


def fam_attention(g: _Gen) -> None:
    q = g.operand(
        "float",
        lambda a: 2 <= a.ndim <= 4 and a.shape[-1] <= 4 and a.shape[-2] <= 4,
        lambda: g.new_input((*(g.integer(1, 2) for _ in range(g.integer(0, 2))), g.integer(1, 4), g.integer(1, 4))),
    )
    a = g.values[q]
    batch, lq, d = a.shape[:-2], a.shape[-2], a.shape[-1]
    lk, dv = g.integer(1, 4), g.integer(1, 3)
    k = g.operand_of_shape((*batch, lk, d))
    causal = g.flag()
    attrs: dict[str, Any] = {"causal": causal}
    if g.flag():
        attrs["scale"] = g.choice((0.5, 1.25))
    mask: str | None = None
    how = g.integer(0, 2)
    if how == 1:
        mask = g.new_input((lq, lk) if g.flag() else (1, lk), "bool")
        keep = np.broadcast_to(g.values[mask], (lq, lk)).copy()
        if causal:
            keep &= np.arange(lk)[None, :] <= np.arange(lq)[:, None]
        if not keep.any(axis=-1).all():
            keep_row = g.values[mask]
            keep_row[..., 0] = True  # every query attends to something
            g.recipe.inputs[mask].array = keep_row
    elif how == 2:
        mask = g.new_input(_broadcast_partner(g, (lq, lk))[-2:] if g.flag() else (lq, lk), dist="uniform")
    if g.chance(4):
        g.emit("attention_weights", {"query": q, "key": k, "mask": mask}, attrs)
        return
    v = g.operand_of_shape((*batch, lk, dv))
    g.emit("scaled_dot_product_attention", {"query": q, "key": k, "value": v, "mask": mask}, attrs)


def fam_recurrent(g: _Gen) -> None:
    """``lstm_recurrence`` (a whole LSTM layer's loop; C and GGML run its decomposition), sometimes followed by
    its backpropagation helper applied to the call's own output (the helper reads it to recompute the gates);
    or ``lstm_layer`` (projection and loop: ``torch.lstm`` on PyTorch, decomposed elsewhere)."""
    if g.chance(3):
        x = g.operand(
            "float",
            lambda a: a.ndim == 3 and a.shape[0] <= 2 and a.shape[1] <= 3 and a.shape[-1] <= 6,
            lambda: g.new_input((g.integer(1, 2), g.integer(1, 3), g.integer(1, 4))),
        )
        batch, _, features = g.values[x].shape
        hidden = g.integer(1, 3)
        g.emit("lstm_layer", {
            "input": x, "weight_ih": g.operand_of_shape((4 * hidden, features)),
            "weight_hh": g.operand_of_shape((4 * hidden, hidden)), "bias_ih": g.operand_of_shape((4 * hidden,)),
            "bias_hh": g.operand_of_shape((4 * hidden,)), "initial_hidden": g.operand_of_shape((batch, hidden)),
            "initial_cell": g.operand_of_shape((batch, hidden)),
        })  # fmt: skip
        return
    x = g.operand(
        "float",
        lambda a: a.ndim == 3 and a.shape[-1] % 4 == 0 and a.shape[0] <= 2 and a.shape[1] <= 3 and a.shape[-1] <= 12,
        lambda: g.new_input((g.integer(1, 2), g.integer(1, 3), 4 * g.integer(1, 3))),
    )
    batch, _, gates = g.values[x].shape
    hidden = gates // 4
    inputs: dict[str, str | Const | None] = {
        "input": x,
        "weight_hh": g.operand_of_shape((gates, hidden)),
        "initial_hidden": g.operand_of_shape((batch, hidden)),
        "initial_cell": g.operand_of_shape((batch, hidden)),
    }
    outs = g.emit("lstm_recurrence", inputs)
    if outs and g.chance(4):
        output = outs[0]
        cotangents = {
            "output_grad": g.operand_of_shape(g.values[output].shape),
            "hidden_grad": g.operand_of_shape((batch, hidden)),
            "cell_grad": g.operand_of_shape((batch, hidden)),
        }
        g.emit("lstm_recurrence_grad", {**cotangents, **inputs, "output": output})


def fam_loss(g: _Gen) -> None:
    prim = g.choice(("squared_error", "absolute_error", "cross_entropy", "binary_cross_entropy", "cross_entropy_grad"))
    if prim in ("squared_error", "absolute_error"):
        x = g.operand("float")
        y = g.operand(
            "float",
            lambda a: _broadcastable(a.shape, g.values[x].shape),
            lambda: g.new_input(_broadcast_partner(g, g.values[x].shape)),
        )
        g.emit(prim, {"input": x, "target": y})
        return
    if prim == "binary_cross_entropy":
        x = g.operand("float")
        input_type = g.choice(("logits", "probs"))
        if input_type == "probs":
            x = _probability(g, x)
        if g.chance(4):  # a target computed from the model's own values (knowledge-distillation style)
            shape = g.values[x].shape
            t = _probability(
                g,
                g.operand(
                    "float", lambda a: _broadcastable(a.shape, shape) and np.broadcast_shapes(a.shape, shape) == shape
                ),
            )
        else:
            t = g.new_input(
                _broadcast_partner(g, g.values[x].shape),
                dist="probability",
                roles=("data", "data_default", "constant_key"),
            )
        g.emit(prim, {"input": x, "target": t}, {"input_type": input_type})
        return
    x = g.operand("float", lambda a: 2 <= a.ndim <= 4)
    a = g.values[x]
    input_type = g.choice(("logits", "probs", "log_probs"))
    if input_type == "probs":
        (x,) = g.emit("softmax", {"input": x}, {"axis": 1})
    elif input_type == "log_probs":
        (x,) = g.emit("log_softmax", {"input": x}, {"axis": 1})
    categorical = g.flag()
    rest = (a.shape[0], *a.shape[2:])
    if categorical:
        target = g.new_input(rest, "int", high=a.shape[1])
    else:
        if g.chance(4):  # soft targets computed from the model's own values
            raw = g.operand_of_shape(a.shape)
        else:
            raw = g.new_input(a.shape, dist="positive", roles=("data", "constant_key"))
        (target,) = g.emit("softmax", {"input": raw}, {"axis": 1})
    attrs = {"input_type": input_type, "categorical": categorical}
    if prim == "cross_entropy_grad":
        grad = g.new_input(rest)
        g.emit(prim, {"output_grad": grad, "input": x, "target": target}, attrs)
        return
    g.emit(prim, {"input": x, "target": target}, attrs)


def fam_like_helpers(g: _Gen) -> None:
    prim = g.choice(("sum_to_like", "reshape_like", "broadcast_to_like", "linear_grad_weight"))
    x = g.operand("float")
    a = g.values[x]
    if prim == "sum_to_like":
        keep = g.integer(0, a.ndim)
        dims = a.shape[a.ndim - keep :]
        mask = g.integer(0, 2 ** len(dims) - 1) if dims else 0
        like = g.new_input(tuple(1 if mask >> i & 1 else d for i, d in enumerate(dims)), roles=("data", "param"))
    elif prim == "reshape_like":
        like = g.new_input(_factorise(g, a.size), roles=("data", "param"))
    elif prim == "broadcast_to_like":
        extra = tuple(g.integer(1, 3) for _ in range(g.integer(0, 2)))
        like = g.new_input(
            extra + tuple(g.integer(1, 3) if d == 1 and g.flag() else d for d in a.shape), roles=("data", "param")
        )
    else:
        if a.ndim < 1:
            raise _Skip("linear_grad_weight of a scalar")
        other = g.new_input((*a.shape[:-1], g.integer(1, 4)))
        g.emit(prim, {"output_grad": x, "input": other})
        return
    g.emit(prim, {"input": x, "like": like})


def fam_creation(g: _Gen) -> None:
    prim = g.choice(("full", "ones", "zeros", "arange"))
    if prim == "arange":
        if g.flag():
            attrs: dict[str, Any] = {"start": g.integer(0, 3)}
            if g.flag():
                attrs = {"start": attrs["start"], "stop": attrs["start"] + g.integer(1, 6), "step": g.integer(1, 2)}
        else:
            attrs = {"start": -1.0, "stop": g.choice((1.0, 2.5)), "step": 0.5}
        if attrs.get("stop") is None and attrs["start"] == 0:
            raise _Skip("empty arange")
        (out,) = g.emit(prim, {}, attrs)
    else:
        shape = g.shape(0, 3)
        attrs = {"shape": shape}
        if prim == "full":
            attrs["fill_value"] = g.choice((1.5, -2.0, 3))
        if g.chance(3):
            attrs["dtype"] = "float"
        (out,) = g.emit(prim, {}, attrs)
    if g.kind(out) == "float":  # combine the constant with a runtime value
        shape = g.values[out].shape
        y = g.operand("float", lambda a: _broadcastable(a.shape, shape) and a.ndim >= len(shape))
        g.emit(g.choice(("add", "multiply")), {"left": y, "right": out})


def fam_twin(g: _Gen) -> None:
    """Repeat an earlier call exactly (same inputs, same attributes): common-subexpression fodder."""
    if not g.recipe.ops:
        raise _Skip("nothing to repeat")
    op = g.recipe.ops[-1 - g.integer(0, min(len(g.recipe.ops), 8) - 1)]
    if op.primitive in g.profile.exclude:
        raise _Skip("excluded")
    outs = g.emit(op.primitive, dict(op.inputs), dict(op.attrs))
    if g.flag():  # use both copies together
        (a, b) = (next(iter(op.outputs.values())), outs[0])
        if g.kind(a) == "float":
            g.emit("add", {"left": a, "right": b})


FAMILIES: dict[str, tuple[Callable[[_Gen], None], int]] = {
    "unary": (fam_unary, 6),
    "binary": (fam_binary, 6),
    "reduce": (fam_reduce, 3),
    "shape": (fam_shape, 4),
    "concat_split": (fam_concat_split, 2),
    "matmul": (fam_matmul, 2),
    "conv": (fam_conv, 1),
    "pool": (fam_pool, 1),
    "gather_embedding": (fam_gather_embedding, 1),
    "attention": (fam_attention, 1),
    "recurrent": (fam_recurrent, 1),
    "loss": (fam_loss, 2),
    "int_ops": (fam_int_ops, 2),
    "where": (lambda g: fam_where(g), 1),
    "like_helpers": (fam_like_helpers, 1),
    "creation": (fam_creation, 1),
    "twin": (fam_twin, 2),
}
"""Op family -> (function, weight)."""

GENERATED_PRIMITIVES: frozenset[str] = frozenset(
    {
        *UNARY_FLOAT, *BINARY_ARITH, *COMPARISONS, *LOGICAL, *REDUCTIONS, "softmax", "log_softmax", "where",
        "positions", "shape", "size", "reshape", "transpose", "swapaxes", "squeeze", "unsqueeze", "flatten",
        "broadcast_to", "index", "pad", "at_least_1d", "concat", "split", "linear", "matmul", "conv1d", "conv2d",
        "conv1d_grad_input", "conv1d_grad_weight", "conv2d_grad_input", "conv2d_grad_weight", "max_pool2d",
        "avg_pool2d", "max_pool2d_grad", "avg_pool2d_grad", "gather", "gather_grad", "dynamic_update_slice",
        "embedding", "embedding_grad",
        "index_grad", "attention_weights", "scaled_dot_product_attention", "squared_error", "absolute_error",
        "cross_entropy", "binary_cross_entropy", "cross_entropy_grad", "sum_to_like", "reshape_like",
        "broadcast_to_like", "linear_grad_weight", "full", "ones", "zeros", "arange", "lstm_recurrence",
        "lstm_recurrence_grad", "lstm_layer",
    }
)  # fmt: skip
"""Every primitive some family can emit."""


@st.composite
def _step(draw: st.DrawFn, g: _Gen, families: list[str]) -> bool:
    """One generation step; returns whether to go on."""
    outer, g.draw = g.draw, draw
    try:
        family = families[g.integer(0, len(families) - 1)]
        g.attempt(FAMILIES[family][0])
        return g.integer(0, 23) != 23
    finally:
        g.draw = outer


@st.composite
def recipes(draw: st.DrawFn, profile: FuzzProfile = FuzzProfile()) -> Recipe:
    """Strategy of random models (:class:`Recipe`) within ``profile``'s limits.

    >>> from hypothesis import find, settings
    >>> repeatable = settings(database=None, derandomize=True)  # the same model on every machine
    >>> has_exp = lambda r: any(op.primitive == "exp" for op in r.ops)
    >>> r = find(recipes(FuzzProfile(max_ops=3)), has_exp, settings=repeatable)
    >>> r.ops[-1].primitive, len(r.ops) <= 3  # exp, after the adapters that keep its operand in range
    ('exp', True)
    """
    g = _Gen(draw, profile)
    names = profile.families or tuple(FAMILIES)
    weighted = [name for name in names for _ in range(FAMILIES[name][1])]
    # Each step is one nested draw holding its "stop here?" flag (1 in 24 stops; the flag's simplest value
    # continues, since Hypothesis over-draws simple values), so the shrinker deletes whole steps.
    while len(g.recipe.ops) < profile.max_ops and draw(_step(g, weighted)):
        if len(g.order) > 4 * profile.max_ops:  # steps that keep failing still add inputs
            break
    if not g.recipe.ops:  # always at least one call
        x = g.new_input(g.shape(0, 2), roles=("param",))
        g.emit("exp", {"input": _bounded(g, x)})
    _choose_outputs(g)
    recipe = g.recipe
    recipe.cotangent_seed = g.integer(0, 2**16)
    recipe.jit = g.choice(profile.jit_choices)
    return recipe


def _choose_outputs(g: _Gen) -> None:
    recipe = g.recipe
    consumed = {v for op in recipe.ops for v in op.inputs.values() if isinstance(v, str)}
    produced = [out for op in recipe.ops for out in op.outputs.values()]
    exposed = []
    for name in produced:
        sink = name not in consumed
        if (sink and not g.chance(5)) or (not sink and g.chance(6)):
            exposed.append(name)
    if not exposed:
        exposed.append(produced[-1])
    recipe.exposed = exposed
    if len(exposed) >= 2 and g.chance(3):
        recipe.discard = sorted(
            {exposed[g.integer(0, len(exposed) - 1)] for _ in range(g.integer(1, len(exposed) - 1))}
        )
        if len(recipe.discard) >= len(exposed):
            recipe.discard = recipe.discard[:-1]
