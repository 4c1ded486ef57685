"""Test cases for every core primitive: inputs, attributes and whether gradients are checked.

A :class:`Case` names one primitive call. Inputs are arrays or functions of a ``numpy.random.Generator``
(so every run draws the same values: the generator is seeded from the case id). Inputs are chosen so
finite differences are meaningful: ``log``/``sqrt`` see positive values, ``relu``/``abs`` stay more than
0.1 away from their kinks, ``max``/``argmax``/pooling see distinct values (no ties).

Example (what a third-party primitive package adds for its own primitive):
    >>> import numpy as np
    >>> from mithril_testing.cases import Case, normal
    >>> case = Case("add", {"left": normal(2, 3), "right": np.ones(3)}, id="add-example")
    >>> sorted(case.make_inputs(np.random.default_rng(0)))
    ['left', 'right']
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from mithril.extend import PrimitiveSpec, plugin_registry
from mithril.types import Dtype

__all__ = [
    "CASES",
    "Case",
    "away_from_zero",
    "booleans",
    "distinct",
    "integers",
    "normal",
    "positive",
    "probabilities",
    "spd",
    "spec_for",
    "uniform",
]

InputFn = Callable[[np.random.Generator], np.ndarray]


def spec_for(name: str) -> PrimitiveSpec:
    """The :class:`~mithril.primitives.PrimitiveSpec` of ``name`` (plugins' primitives included)."""
    return plugin_registry().primitive(name)


@dataclass
class Case:
    """One primitive call to check.

    Attributes:
        primitive: registry name.
        inputs: input key -> array, or function ``rng -> array``. Optional inputs not given are absent.
        attrs: attributes passed to the primitive (defaults fill the rest).
        id: unique test id (``"conv2d-stride-groups"``).
        grad: check gradients by finite differences. ``None`` (default) means: the primitive is not random
            and the case has at least one float input among the spec's differentiable inputs.
    """

    primitive: str
    inputs: Mapping[str, np.ndarray | InputFn] = field(default_factory=dict)
    attrs: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""
    grad: bool | None = None

    def __post_init__(self) -> None:
        if not self.id:
            self.id = self.primitive

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    def make_inputs(self, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Concrete input arrays (float inputs as float64, ints as int64, bools as bool)."""
        rng = np.random.default_rng(self.seed) if rng is None else rng
        arrays: dict[str, np.ndarray] = {}
        for key, value in self.inputs.items():
            array = np.asarray(value(rng) if callable(value) else value)
            if array.dtype.kind == "f":
                array = array.astype(np.float64)
            elif array.dtype.kind in "iu":
                array = array.astype(np.int64)
            arrays[key] = array
        return arrays

    def differentiable_inputs(self, arrays: Mapping[str, np.ndarray]) -> list[str]:
        """Float inputs gradients flow into (the keys a test makes trainable)."""
        spec = spec_for(self.primitive)
        keys = spec.differentiable_keys(spec.resolve_attributes(dict(self.attrs)))
        return [k for k in keys if k in arrays and arrays[k].dtype.kind == "f"]

    def checks_gradient(self) -> bool:
        spec = spec_for(self.primitive)
        if spec.random:
            return False
        if self.grad is not None:
            return self.grad
        return bool(self.differentiable_inputs(self.make_inputs()))

    def __repr__(self) -> str:
        return f"Case({self.id})"


# -- input generators ----------------------------------------------------------------------------
def normal(*shape: int, scale: float = 1.0) -> InputFn:
    """Standard normal values times ``scale``."""
    return lambda rng: rng.standard_normal(shape) * scale


def uniform(low: float, high: float, *shape: int) -> InputFn:
    return lambda rng: rng.uniform(low, high, shape)


def positive(*shape: int) -> InputFn:
    """Values in [0.5, 2]: safe for log, sqrt, rsqrt, power bases."""
    return uniform(0.5, 2.0, *shape)


def away_from_zero(*shape: int, gap: float = 0.2) -> InputFn:
    """Values with ``gap <= |x| <= gap + 1.5`` and random sign (relu, abs, sign kinks at 0)."""
    return lambda rng: rng.choice([-1.0, 1.0], size=shape) * rng.uniform(gap, gap + 1.5, shape)


def distinct(*shape: int, spacing: float = 0.3, offset: float = 0.0) -> InputFn:
    """A shuffled grid ``offset + spacing * k`` plus noise below ``spacing / 6``: no two values closer
    than ``2/3 * spacing`` (max, argmax, pooling, minimum/maximum with a grid shifted by ``offset``)."""

    def make(rng: np.random.Generator) -> np.ndarray:
        count = int(np.prod(shape))
        grid = (np.arange(count) - count // 2) * spacing + offset
        return (rng.permutation(grid) + rng.uniform(-spacing / 6, spacing / 6, count)).reshape(shape)

    return make


def spd(*shape: int) -> InputFn:
    """Symmetric positive definite ``[..., n, n]`` matrices (``spd(2, 4)``: two 4x4) with well separated
    eigenvalues (``cholesky``, ``eigvalsh``)."""
    *batch, n = shape

    def make(rng: np.random.Generator) -> np.ndarray:
        root = rng.standard_normal((*batch, n, n))
        return root @ np.swapaxes(root, -1, -2) + n * np.eye(n)

    return make


def integers(low: int, high: int, *shape: int) -> InputFn:
    """Integers uniform in ``[low, high)`` (indices, class targets)."""
    return lambda rng: rng.integers(low, high, shape)


def integer_valued(low: int, high: int, *shape: int) -> InputFn:
    """Floats with integer values (exact in every float dtype, so comparisons can tie)."""
    return lambda rng: rng.integers(low, high, shape).astype(np.float64)


def booleans(*shape: int) -> InputFn:
    return lambda rng: rng.random(shape) < 0.5


def probabilities(*shape: int, axis: int = 1) -> InputFn:
    """Positive values summing to one along ``axis``, each at least ~0.05."""

    def make(rng: np.random.Generator) -> np.ndarray:
        raw = rng.uniform(0.5, 2.0, shape)
        return cast(np.ndarray, raw / raw.sum(axis=axis, keepdims=True))

    return make


def _frac(*shape: int) -> InputFn:
    """Floats whose fractional part is in [0.2, 0.8] (floor, casts to int stay stable under rounding)."""
    return lambda rng: rng.integers(-5, 5, shape) + rng.uniform(0.2, 0.8, shape)


def _half_integers(*shape: int) -> InputFn:
    """``m + 0.5``: divided by 1, 2 or 4 the quotient is at least 0.125 away from an integer."""
    return lambda rng: rng.integers(-8, 8, shape) + 0.5


def _with_nans(rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((3, 4))
    x[0, 1] = x[2, 3] = np.nan
    return x


def _with_non_finite(rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((3, 4))
    x[0, 0], x[1, 2], x[2, 1] = np.nan, np.inf, -np.inf
    return x


SPECIAL_VALUES = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0, 1e-30])
"""NaN, infinities, signed zeros, ordinary and tiny values: every float elementwise primitive must treat
them as NumPy does (NaN propagates through ``relu``/``maximum``, ``gelu(inf)`` is ``inf``, ...)."""

FLOAT_UNARY = (
    "neg", "abs", "sign", "exp", "log", "log1p", "sqrt", "rsqrt", "square", "sin", "cos", "tanh", "sigmoid", "relu",
    "leaky_relu", "gelu", "softplus", "erf", "floor", "isnan", "nan_to_num", "stop_gradient",
)  # fmt: skip
FLOAT_BINARY = (
    "add", "subtract", "multiply", "divide", "floor_divide", "power", "minimum", "maximum", "equal", "not_equal",
    "less", "less_equal", "greater", "greater_equal",
)  # fmt: skip


def _special_cases() -> list[Case]:
    """Forward-only cases with :data:`SPECIAL_VALUES` for every float elementwise primitive: unary ones
    on all of them, binary ones on every pair (the left operand runs through the values, the right one
    through them again in another order)."""
    left = np.repeat(SPECIAL_VALUES, SPECIAL_VALUES.size)
    right = np.tile(SPECIAL_VALUES, SPECIAL_VALUES.size)
    cases = [Case(name, {"input": SPECIAL_VALUES.copy()}, id=f"{name}-special", grad=False) for name in FLOAT_UNARY]
    cases.append(
        Case("gelu", {"input": SPECIAL_VALUES.copy()}, {"approximate": True}, id="gelu-tanh-special", grad=False)
    )
    cases.append(
        Case("leaky_relu", {"input": SPECIAL_VALUES.copy()}, {"slope": 0.2}, id="leaky_relu-slope-special", grad=False)
    )
    cases += [
        Case(name, {"left": left.copy(), "right": right.copy()}, id=f"{name}-special", grad=False)
        for name in FLOAT_BINARY
    ]
    return cases


def _bool_mask_rows(lq: int, lk: int) -> InputFn:
    """A bool attention mask with at least one True per row."""

    def make(rng: np.random.Generator) -> np.ndarray:
        mask = rng.random((lq, lk)) < 0.6
        mask[np.arange(lq), rng.integers(0, lk, lq)] = True
        return mask

    return make


# -- the cases -----------------------------------------------------------------------------------
def _on_3x4(values: Callable[..., InputFn], *primitives: str) -> list[Case]:
    """One case per primitive of one ``input`` ``[3, 4]`` drawn by ``values`` (``normal``, ``positive``...)."""
    return [Case(primitive, {"input": values(3, 4)}) for primitive in primitives]


def _unary_cases() -> list[Case]:
    """Elementwise functions of one input, casts included."""
    return [
        *_on_3x4(normal, "neg", "exp", "square", "sin", "cos", "tanh", "erf", "stop_gradient", "nan_to_num"),
        *_on_3x4(away_from_zero, "abs", "sign", "relu", "leaky_relu"),  # kinks at 0
        *_on_3x4(positive, "log", "log1p", "sqrt", "rsqrt"),
        Case("sigmoid", {"input": normal(3, 4, scale=2.0)}),
        Case("relu", {"input": away_from_zero(2, 3, 4)}, id="relu-3d"),
        Case("leaky_relu", {"input": away_from_zero(3, 4)}, {"slope": 0.2}, id="leaky_relu-slope"),
        Case("gelu", {"input": normal(3, 4, scale=2.0)}),
        Case("gelu", {"input": normal(3, 4, scale=2.0)}, {"approximate": True}, id="gelu-tanh"),
        Case("softplus", {"input": normal(3, 4, scale=3.0)}),
        Case("floor", {"input": _frac(3, 4)}),
        Case("isnan", {"input": _with_nans}),
        Case("nan_to_num", {"input": _with_nans}, id="nan_to_num-nan", grad=False),
        Case(
            "nan_to_num",
            {"input": _with_non_finite},
            {"nan": 1.5, "posinf": 100.0, "neginf": -50.0},
            id="nan_to_num-inf",
            grad=False,
        ),
        Case("logical_not", {"input": booleans(3, 4)}),
        Case("cast", {"input": integers(-5, 5, 3, 4)}, {"dtype": "float"}, id="cast-int-to-float"),
        Case("cast", {"input": normal(3, 4)}, {"dtype": "float"}, id="cast-float-to-float"),
        Case("cast", {"input": _frac(3, 4)}, {"dtype": "int"}, id="cast-float-to-int", grad=False),
        Case("cast", {"input": integers(-1, 2, 3, 4)}, {"dtype": "bool"}, id="cast-int-to-bool"),
        Case("cast", {"input": booleans(3, 4)}, {"dtype": "int"}, id="cast-bool-to-int"),
        Case("cast", {"input": _frac(3, 4)}, {"dtype": Dtype.int32}, id="cast-float-to-int32", grad=False),
    ]


def _binary_cases() -> list[Case]:
    """Arithmetic of two inputs and ``where``, with NumPy broadcasting."""
    return [
        Case("add", {"left": normal(3, 4), "right": normal(3, 4)}),
        Case("add", {"left": normal(2, 3, 4), "right": normal(4)}, id="add-broadcast"),
        Case("add", {"left": normal(3, 1), "right": normal(1, 4)}, id="add-broadcast-both"),
        Case("add", {"left": normal(), "right": normal(2, 3)}, id="add-scalar"),
        Case("add", {"left": integers(-5, 5, 3, 4), "right": integers(-5, 5, 4)}, id="add-int"),
        Case("subtract", {"left": normal(3, 4), "right": normal(3, 4)}),
        Case("subtract", {"left": normal(4), "right": normal(2, 3, 4)}, id="subtract-broadcast"),
        Case("multiply", {"left": normal(3, 4), "right": normal(3, 4)}),
        Case("multiply", {"left": normal(2, 1, 4), "right": normal(3, 1)}, id="multiply-broadcast"),
        Case("divide", {"left": normal(3, 4), "right": away_from_zero(3, 4, gap=0.5)}),
        Case("divide", {"left": normal(2, 3, 4), "right": away_from_zero(3, 1, gap=0.5)}, id="divide-broadcast"),
        Case("divide", {"left": integers(-9, 9, 3, 4), "right": integers(1, 5, 4)}, id="divide-int"),
        Case(
            "floor_divide",
            {"left": _half_integers(3, 4), "right": lambda rng: rng.choice([1.0, -1.0, 2.0, -2.0, 4.0, -4.0], (4,))},
        ),
        Case(
            "floor_divide",
            {"left": integers(-9, 9, 3, 4), "right": lambda rng: rng.choice([1, -1, 2, -3, 4], (3, 4))},
            id="floor_divide-int",
        ),
        Case("power", {"left": positive(3, 4), "right": uniform(-2.0, 2.0, 3, 4)}),
        Case("power", {"left": positive(2, 3, 4), "right": uniform(-2.0, 2.0, 4)}, id="power-broadcast"),
        Case("minimum", {"left": distinct(3, 4), "right": distinct(3, 4, offset=0.15)}),
        Case("minimum", {"left": distinct(2, 3, 4), "right": distinct(4, offset=0.15)}, id="minimum-broadcast"),
        Case("maximum", {"left": distinct(3, 4), "right": distinct(3, 4, offset=0.15)}),
        Case("maximum", {"left": distinct(3, 1), "right": distinct(1, 4, offset=0.15)}, id="maximum-broadcast"),
        Case(
            "where",
            {"condition": booleans(3, 4), "left": normal(3, 4), "right": normal(3, 4)},
        ),
        Case(
            "where",
            {"condition": booleans(3, 1), "left": normal(2, 3, 4), "right": normal(4)},
            id="where-broadcast",
        ),
    ]


def _comparison_cases() -> list[Case]:
    """Comparisons (on integer-valued floats, so equal values occur exactly) and logical operators."""
    cases: list[Case] = []
    for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        cases += [
            Case(name, {"left": integer_valued(0, 3, 3, 4), "right": integer_valued(0, 3, 3, 4)}),
            Case(
                name, {"left": integer_valued(0, 3, 2, 3, 4), "right": integer_valued(0, 3, 4)}, id=f"{name}-broadcast"
            ),
        ]
    cases.append(Case("equal", {"left": integers(0, 3, 3, 4), "right": integers(0, 3, 4)}, id="equal-int"))
    for name in ("logical_and", "logical_or", "logical_xor"):
        cases += [
            Case(name, {"left": booleans(3, 4), "right": booleans(3, 4)}),
            Case(name, {"left": booleans(2, 3, 4), "right": booleans(3, 1)}, id=f"{name}-broadcast"),
        ]
    return cases


def _reductions() -> list[Case]:
    axis_variants: list[tuple[dict[str, Any], str]] = [
        ({}, "all"),
        ({"axis": 1}, "axis1"),
        ({"axis": -1, "keepdim": True}, "axis-1-keepdim"),
        ({"axis": (0, 2)}, "axes02"),
        ({"axis": (0, 2), "keepdim": True}, "axes02-keepdim"),
        ({"axis": None, "keepdim": True}, "all-keepdim"),
    ]
    cases: list[Case] = []
    for name in ("sum", "mean", "max", "min", "prod", "var"):
        for attrs, tag in axis_variants:
            if name in ("max", "min"):
                source = distinct(3, 4, 5)
            elif name == "prod":
                source = lambda rng: rng.choice([-1.0, 1.0], (3, 4, 5)) * rng.uniform(0.7, 1.3, (3, 4, 5))  # noqa: E731
            else:
                source = normal(3, 4, 5)
            cases.append(Case(name, {"input": source}, attrs, id=f"{name}-{tag}"))
    cases += [
        Case("sum", {"input": integers(-5, 5, 3, 4)}, {"axis": 0}, id="sum-int"),
        Case("sum", {"input": booleans(3, 4)}, {"axis": 1}, id="sum-bool"),
        Case("max", {"input": integers(-50, 50, 3, 4)}, {"axis": 1}, id="max-int"),
        Case("var", {"input": normal(3, 4, 5)}, {"axis": 1, "correction": 1}, id="var-correction1"),
        Case("var", {"input": normal(3, 4, 5)}, {"correction": 1}, id="var-all-correction1"),
    ]
    for name in ("argmax", "argmin"):
        cases += [
            Case(name, {"input": distinct(3, 4, 5)}, id=f"{name}-all"),
            Case(name, {"input": distinct(3, 4, 5)}, {"axis": 1}, id=f"{name}-axis1"),
            Case(name, {"input": distinct(3, 4, 5)}, {"axis": -1, "keepdim": True}, id=f"{name}-axis-1-keepdim"),
            Case(name, {"input": distinct(3, 4, 5)}, {"axis": None, "keepdim": True}, id=f"{name}-all-keepdim"),
        ]
    for name in ("softmax", "log_softmax"):
        cases += [
            Case(name, {"input": normal(3, 5, scale=2.0)}),
            Case(name, {"input": normal(2, 3, 4, scale=2.0)}, {"axis": 1}, id=f"{name}-axis1"),
            Case(name, {"input": normal(2, 3, 4, scale=2.0)}, {"axis": 0}, id=f"{name}-axis0"),
        ]
    return cases


def _linalg() -> list[Case]:
    return [
        Case("matmul", {"left": normal(3, 4), "right": normal(4, 5)}),
        Case("matmul", {"left": normal(4), "right": normal(4)}, id="matmul-vec-vec"),
        Case("matmul", {"left": normal(4), "right": normal(4, 3)}, id="matmul-vec-mat"),
        Case("matmul", {"left": normal(3, 4), "right": normal(4)}, id="matmul-mat-vec"),
        Case("matmul", {"left": normal(2, 3, 4), "right": normal(2, 4, 5)}, id="matmul-batched"),
        Case("matmul", {"left": normal(2, 3, 4), "right": normal(4, 5)}, id="matmul-batched-mat"),
        Case("matmul", {"left": normal(2, 1, 3, 4), "right": normal(3, 4, 2)}, id="matmul-batch-broadcast"),
        Case("matmul", {"left": normal(4), "right": normal(2, 4, 3)}, id="matmul-vec-batched"),
        Case("linear", {"input": normal(5, 3), "weight": normal(4, 3), "bias": normal(4)}),
        Case("linear", {"input": normal(5, 3), "weight": normal(4, 3)}, id="linear-no-bias"),
        Case("linear", {"input": normal(2, 5, 3), "weight": normal(4, 3), "bias": normal(4)}, id="linear-batched"),
        Case("linear", {"input": normal(3), "weight": normal(4, 3), "bias": normal(4)}, id="linear-vector"),
        Case("cholesky", {"input": spd(3)}),
        Case("cholesky", {"input": spd(2, 4)}, id="cholesky-batched"),
        Case("eigvalsh", {"input": spd(3)}),
        Case("eigvalsh", {"input": spd(2, 4)}, id="eigvalsh-batched"),
    ]


def _reshape_cases() -> list[Case]:
    """Primitives that rearrange one array: reshapes, transposes, (un)squeezes, broadcasts."""
    x = normal(2, 3, 4)
    return [
        Case("reshape", {"input": x}, {"shape": (6, 4)}),
        Case("reshape", {"input": x}, {"shape": (-1, 2)}, id="reshape-minus1"),
        Case("reshape", {"input": x}, {"shape": (None, -1)}, id="reshape-none-minus1"),
        Case("reshape", {"input": x}, {"shape": (None, None, 2, 2)}, id="reshape-none"),
        Case("reshape", {"input": x}, {"shape": (24,)}, id="reshape-flat"),
        Case("reshape_to", {"input": x, "shape": np.array([6, -1])}),
        Case("split_at", {"input": normal(2, 6), "sections": np.array([2, 5])}, {"axis": 1, "parts": 3}),
        Case("arange_between", {"start": np.array(1), "stop": np.array(9), "step": np.array(3)}),
        Case("cast_like", {"input": x, "like": integers(0, 3, 2)}, id="cast_like-int", grad=False),
        Case("cast_like", {"input": x, "like": normal(2)}, id="cast_like-float"),
        Case("flatten", {"input": normal(2, 3, 4, 5)}),
        Case("flatten", {"input": normal(2, 3, 4, 5)}, {"start_dim": 0, "end_dim": 1}, id="flatten-0-1"),
        Case("flatten", {"input": normal(2, 3, 4, 5)}, {"start_dim": 1, "end_dim": -2}, id="flatten-1--2"),
        Case("transpose", {"input": x}),
        Case("transpose", {"input": x}, {"axes": (1, 0, 2)}, id="transpose-axes"),
        Case("transpose", {"input": x}, {"axes": (-1, 0, 1)}, id="transpose-negative-axes"),
        Case("swapaxes", {"input": x}),
        Case("swapaxes", {"input": x}, {"axis1": 0, "axis2": 2}, id="swapaxes-0-2"),
        Case("squeeze", {"input": normal(2, 1, 3, 1)}),
        Case("squeeze", {"input": normal(2, 1, 3, 1)}, {"axis": 1}, id="squeeze-axis"),
        Case("squeeze", {"input": normal(2, 1, 3, 1)}, {"axis": (1, -1)}, id="squeeze-axes"),
        Case("unsqueeze", {"input": normal(2, 3)}, {"axis": 0}),
        Case("unsqueeze", {"input": normal(2, 3)}, {"axis": -1}, id="unsqueeze-last"),
        Case("unsqueeze", {"input": normal(2, 3)}, {"axis": (0, 2)}, id="unsqueeze-axes"),
        Case("broadcast_to", {"input": normal(3, 1)}, {"shape": (2, 3, 4)}),
        Case("broadcast_to", {"input": normal(4)}, {"shape": (3, 4)}, id="broadcast_to-prepend"),
    ]


def _join_and_index_cases() -> list[Case]:
    """Concatenation, splits, padding, static indexing and gathers."""
    return [
        Case("concat", {"input_0": normal(2, 3), "input_1": normal(4, 3)}),
        Case(
            "concat",
            {"input_0": normal(2, 3), "input_1": normal(2, 1), "input_2": normal(2, 2)},
            {"n": 3, "axis": 1},
            id="concat-3-axis1",
        ),
        Case("concat", {"input_0": normal(2, 3, 2), "input_1": normal(2, 3, 1)}, {"axis": -1}, id="concat-axis-1"),
        Case("concat", {"input_0": integers(0, 5, 2, 3), "input_1": integers(0, 5, 1, 3)}, id="concat-int"),
        Case("split", {"input": normal(6, 4)}, {"sections": 3}),
        Case("split", {"input": normal(2, 6)}, {"sections": 2, "axis": 1}, id="split-int-axis1"),
        Case("split", {"input": normal(7, 3)}, {"sections": [2, 5]}, id="split-list"),
        Case("split", {"input": normal(3, 7)}, {"sections": [1, 3, 4], "axis": -1}, id="split-list-axis-1"),
        Case("pad", {"input": normal(2, 3)}, {"pad_width": ((1, 2), (0, 1))}),
        Case("pad", {"input": normal(2, 3, 4)}, {"pad_width": ((0, 0), (2, 0), (1, 1)), "value": 1.5}, id="pad-value"),
        Case("index", {"input": normal(4, 5)}, {"key": 1}, id="index-int"),
        Case("index", {"input": normal(4, 5)}, {"key": (slice(1, 3), -1)}, id="index-slice-int"),
        Case("index", {"input": normal(4, 5, 3)}, {"key": (Ellipsis, slice(0, 2))}, id="index-ellipsis"),
        Case("index", {"input": normal(4, 5)}, {"key": (None, slice(None), 2)}, id="index-none"),
        Case(
            "index",
            {"input": normal(4, 5, 3)},
            {"key": (slice(None, None, 2), None, Ellipsis, 0)},
            id="index-step-none-ellipsis",
        ),
        Case("index", {"input": normal(6, 3)}, {"key": (slice(4, 0, -2),)}, id="index-negative-step"),
        Case("gather", {"input": normal(3, 5), "index": integers(0, 5, 3, 4)}),
        Case("gather", {"input": normal(3, 5), "index": integers(0, 3, 2, 5)}, {"axis": 0}, id="gather-axis0"),
        Case("gather", {"input": normal(2, 3, 4), "index": integers(0, 3, 2, 5, 4)}, {"axis": 1}, id="gather-3d"),
        Case(
            "dynamic_update_slice",
            {"input": normal(6, 3), "update": normal(2, 3), "start": integers(0, 5, 1)},
            id="dynamic-update-slice",
        ),
        Case(
            "dynamic_update_slice",
            {"input": normal(2, 3, 8, 4), "update": normal(2, 3, 3, 4), "start": integers(0, 6, 1)},
            {"axis": 2},
            id="dynamic-update-slice-kv-cache",
        ),
        Case(
            "dynamic_update_slice",
            {"input": normal(3, 5), "update": normal(3, 5), "start": integers(0, 1, 1)},
            {"axis": -1},
            id="dynamic-update-slice-whole",
        ),
    ]


def _creation_cases() -> list[Case]:
    """Arrays made from attributes or from another array's shape, and conversions to Python values."""
    return [
        Case("arange", {}, {"start": 5}, id="arange-stop"),
        Case("arange", {}, {"start": 2, "stop": 11, "step": 3}, id="arange-int-step"),
        Case("arange", {}, {"start": 0.5, "stop": 3.0, "step": 0.5}, id="arange-float"),
        Case("ones", {}, {"shape": (2, 3)}),
        Case("ones", {}, {"shape": (2, 3), "dtype": "int"}, id="ones-int"),
        Case("zeros", {}, {"shape": (3,)}),
        Case("zeros", {}, {"shape": (2, 2), "dtype": Dtype.int32}, id="zeros-int32"),
        Case("full", {}, {"shape": (2, 3), "fill_value": 2.5}),
        Case("full", {}, {"shape": (2,), "fill_value": 7}, id="full-int"),
        Case("zeros_like", {"input": normal(2, 3)}),
        Case("zeros_like", {"input": integers(0, 4, 2, 3)}, id="zeros_like-int"),
        Case("ones_like", {"input": normal(2, 3)}),
        Case("dtype_constant", {"input": normal(2, 3)}),
        Case("dtype_constant", {"input": integers(0, 4, 2, 3)}, id="dtype_constant-int"),
        Case(
            "dtype_constant",
            {"input": normal(3)},
            {"constant": "stable_reciprocal_threshold"},
            id="dtype_constant-reciprocal",
        ),
        Case("positions", {"input": normal(2, 5)}),
        Case("positions", {"input": integers(0, 4, 3, 4, 2)}, {"axis": 1}, id="positions-axis1"),
        Case("shape", {"input": normal(2, 3, 4)}),
        Case("size", {"input": normal(2, 3, 4)}),
        Case("at_least_1d", {"input": normal()}, id="at_least_1d-scalar"),
        Case("at_least_1d", {"input": normal(2, 3)}),
        Case("unique", {"input": integer_valued(0, 4, 3, 4)}),
        Case("unique", {"input": integers(-2, 3, 7)}, id="unique-int"),
        Case("item", {"input": integers(0, 9, 1, 1)}),
        Case("to_list", {"input_0": integers(0, 9), "input_1": integers(0, 9)}, {"n": 2}),
        Case("to_tuple", {f"input_{i}": integers(-5, 5) for i in range(3)}, {"n": 3}),
    ]


def _conv(
    primitive: str, input: tuple[int, ...], weight: tuple[int, ...], *, bias: bool = False, id: str = "", **attrs: Any
) -> Case:
    """A ``conv1d``/``conv2d`` case of normal ``input`` and ``weight`` of these shapes (and a ``bias`` of the
    weight's output channels)."""
    inputs = {"input": normal(*input), "weight": normal(*weight)}
    if bias:
        inputs["bias"] = normal(weight[0])
    return Case(primitive, inputs, attrs, id=id)


def _conv_cases() -> list[Case]:
    return [
        _conv("conv1d", (2, 3, 8), (4, 3, 3), bias=True),
        _conv("conv1d", (2, 3, 8), (4, 3, 3), id="conv1d-no-bias"),
        _conv("conv1d", (2, 3, 9), (4, 3, 3), bias=True, stride=2, padding=1, id="conv1d-stride-padding"),
        _conv("conv1d", (1, 2, 10), (3, 2, 3), dilation=2, id="conv1d-dilation"),
        _conv("conv1d", (2, 4, 7), (6, 2, 3), bias=True, groups=2, id="conv1d-groups"),
        _conv("conv1d", (2, 3, 7), (2, 3, 4), padding="same", id="conv1d-same-even"),
        _conv("conv1d", (2, 3, 7), (2, 3, 3), padding=((2, 1),), id="conv1d-asymmetric"),
        _conv("conv2d", (2, 3, 6, 5), (4, 3, 3, 3), bias=True),
        _conv("conv2d", (1, 2, 5, 5), (3, 2, 2, 3), id="conv2d-no-bias-rect"),
        _conv("conv2d", (2, 2, 7, 6), (3, 2, 3, 3), bias=True, stride=2, padding=1, id="conv2d-stride2-pad1"),
        _conv(
            "conv2d",
            (1, 2, 7, 6),
            (2, 2, 3, 2),
            stride=(2, 1),
            padding=((1, 0), (2, 1)),
            id="conv2d-stride-asymmetric-padding",
        ),
        _conv("conv2d", (1, 2, 6, 6), (3, 2, 3, 3), padding="same", id="conv2d-same"),
        _conv("conv2d", (1, 2, 6, 5), (2, 2, 4, 2), padding="same", id="conv2d-same-even"),
        _conv("conv2d", (1, 2, 8, 8), (2, 2, 3, 3), padding="same", dilation=2, id="conv2d-same-dilation"),
        _conv("conv2d", (1, 2, 9, 7), (3, 2, 3, 3), dilation=(2, 1), id="conv2d-dilation"),
        _conv("conv2d", (2, 4, 5, 5), (6, 2, 3, 3), bias=True, groups=2, id="conv2d-groups"),
        _conv("conv2d", (1, 3, 5, 5), (3, 1, 3, 3), groups=3, padding=1, id="conv2d-depthwise"),
        _conv("conv2d", (1, 2, 5, 5), (2, 2, 3, 3), padding="valid", id="conv2d-valid"),
    ]


def _pool_cases() -> list[Case]:
    cases = []
    for name in ("max_pool2d", "avg_pool2d"):
        cases += [
            Case(name, {"input": distinct(2, 3, 4, 6)}, {"kernel_size": 2}),
            Case(
                name,
                {"input": distinct(1, 2, 7, 7)},
                {"kernel_size": 3, "stride": 2, "padding": 1},
                id=f"{name}-stride-padding",
            ),
            Case(name, {"input": distinct(2, 5, 6)}, {"kernel_size": (2, 3), "stride": (1, 2)}, id=f"{name}-3d-rect"),
            Case(
                name,
                {"input": distinct(1, 1, 7, 7)},
                {"kernel_size": 2, "stride": 1, "dilation": 2},
                id=f"{name}-dilation",
            ),
            Case(
                name,
                {"input": distinct(1, 2, 5, 5)},
                {"kernel_size": 3, "stride": 1, "padding": "same"},
                id=f"{name}-same",
            ),
        ]
    cases.append(
        Case(
            "avg_pool2d",
            {"input": normal(1, 2, 5, 6)},
            {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
            id="avg_pool2d-exclude-pad",
        )
    )
    return cases


def _nn_cases() -> list[Case]:
    return [
        *_conv_cases(),
        *_pool_cases(),
        Case("batch_norm2d", {"input": uniform(0.5, 3.0, 4, 3, 5, 2), "weight": normal(3), "bias": normal(3)}),
        Case("batch_norm2d", {"input": normal(2, 4, 3, 3)}, {"eps": 0.1}, id="batch_norm2d-plain"),
        Case("embedding", {"input": integers(0, 6, 2, 3), "weight": normal(6, 4)}),
        Case("embedding", {"input": integers(0, 5, 7), "weight": normal(5, 3)}, id="embedding-1d"),
        Case(
            "scaled_dot_product_attention", {"query": normal(2, 3, 4), "key": normal(2, 5, 4), "value": normal(2, 5, 6)}
        ),
        Case(
            "scaled_dot_product_attention",
            {"query": normal(2, 2, 3, 4), "key": normal(2, 2, 5, 4), "value": normal(2, 2, 5, 4)},
            {"scale": 0.3},
            id="scaled_dot_product_attention-4d-scale",
        ),
        Case(
            "scaled_dot_product_attention",
            {"query": normal(2, 3, 4), "key": normal(2, 5, 4), "value": normal(2, 5, 4), "mask": _bool_mask_rows(3, 5)},
            id="scaled_dot_product_attention-bool-mask",
        ),
        Case(
            "scaled_dot_product_attention",
            {"query": normal(2, 3, 4), "key": normal(2, 5, 4), "value": normal(2, 5, 4), "mask": normal(2, 3, 5)},
            id="scaled_dot_product_attention-float-mask",
        ),
        Case(
            "scaled_dot_product_attention",
            {"query": normal(2, 4, 4), "key": normal(2, 4, 4), "value": normal(2, 4, 3)},
            {"causal": True},
            id="scaled_dot_product_attention-causal",
        ),
        Case(
            "scaled_dot_product_attention",
            {"query": normal(2, 4, 4), "key": normal(2, 4, 4), "value": normal(2, 4, 3), "mask": normal(4, 4)},
            {"causal": True},
            id="scaled_dot_product_attention-causal-float-mask",
        ),
        Case("dropout_mask", {"input": normal(4, 5)}, {"p": 0.3}),
        Case("dropout_mask", {"input": normal(4, 5)}, {"p": 0.3, "training": False}, id="dropout_mask-eval"),
        Case("randn", {}, {"shape": (3, 4)}),
        Case("randn_of", {"shape": np.array([3, 4])}),
        Case("randint", {}, {"low": 2, "high": 7, "shape": (3, 4)}),
        Case("polynomial_features", {"input": normal(4, 3)}, {"degree": 2}),
        Case("polynomial_features", {"input": normal(3, 2)}, {"degree": 3}, id="polynomial_features-degree-3"),
    ]


def _lstm_cases() -> list[Case]:
    """``lstm_recurrence`` (B 2, T 3, H 2), ``lstm_layer`` (D 5) and the loop's helper, whose ``output`` input
    is the forward's output at the case's other inputs (the helper recomputes the gates from it)."""
    from .references import lstm_recurrence

    drawn: dict[str, np.ndarray] = {}

    def kept(key: str, *shape: int, scale: float = 1.0) -> InputFn:
        def draw(rng: np.random.Generator) -> np.ndarray:
            drawn[key] = rng.standard_normal(shape) * scale
            return drawn[key]

        return draw

    forward = {
        "input": normal(2, 3, 8),
        "weight_hh": normal(8, 2, scale=0.5),
        "initial_hidden": normal(2, 2),
        "initial_cell": normal(2, 2),
    }
    keys = ("input", "weight_hh", "initial_hidden", "initial_cell")
    backward = {"output_grad": normal(2, 3, 2), "hidden_grad": normal(2, 2), "cell_grad": normal(2, 2)}
    backward |= {
        k: kept(k, *shape, scale=0.5 if k == "weight_hh" else 1.0)
        for k, shape in zip(keys, ((2, 3, 8), (8, 2), (2, 2), (2, 2)), strict=True)
    }
    backward["output"] = lambda rng: lstm_recurrence(*(drawn[k] for k in keys))[0]
    return [
        Case("lstm_recurrence", forward),
        Case("lstm_recurrence", {**forward, "input": normal(2, 1, 8)}, id="lstm_recurrence-one-step"),
        Case("lstm_recurrence_grad", backward),
        Case(
            "lstm_layer",
            {
                "input": normal(2, 3, 5),
                "weight_ih": normal(8, 5, scale=0.5),
                "weight_hh": normal(8, 2, scale=0.5),
                "bias_ih": normal(8),
                "bias_hh": normal(8),
                "initial_hidden": normal(2, 2),
                "initial_cell": normal(2, 2),
            },
        ),
    ]


def _loss_cases() -> list[Case]:
    log_probs = lambda rng: np.log(probabilities(4, 5)(rng))  # noqa: E731
    return [
        Case("cross_entropy", {"input": normal(4, 5), "target": integers(0, 5, 4)}),
        Case("cross_entropy", {"input": normal(2, 3, 4), "target": integers(0, 3, 2, 4)}, id="cross_entropy-spatial"),
        Case(
            "cross_entropy",
            {"input": probabilities(4, 5), "target": integers(0, 5, 4)},
            {"input_type": "probs"},
            id="cross_entropy-probs",
        ),
        Case(
            "cross_entropy",
            {"input": log_probs, "target": integers(0, 5, 4)},
            {"input_type": "log_probs"},
            id="cross_entropy-log_probs",
        ),
        Case(
            "cross_entropy",
            {"input": normal(4, 5), "target": probabilities(4, 5)},
            {"categorical": False},
            id="cross_entropy-logits-soft",
        ),
        Case(
            "cross_entropy",
            {"input": probabilities(4, 5), "target": probabilities(4, 5)},
            {"input_type": "probs", "categorical": False},
            id="cross_entropy-probs-soft",
        ),
        Case(
            "cross_entropy",
            {"input": log_probs, "target": probabilities(4, 5)},
            {"input_type": "log_probs", "categorical": False},
            id="cross_entropy-log_probs-soft",
        ),
        Case("binary_cross_entropy", {"input": normal(3, 4, scale=2.0), "target": uniform(0.0, 1.0, 3, 4)}),
        Case(
            "binary_cross_entropy",
            {"input": uniform(0.1, 0.9, 3, 4), "target": uniform(0.0, 1.0, 3, 4)},
            {"input_type": "probs"},
            id="binary_cross_entropy-probs",
        ),
        Case(
            "binary_cross_entropy",
            {"input": normal(3, 4), "target": lambda rng: (rng.random((4,)) < 0.5).astype(np.float64)},
            id="binary_cross_entropy-broadcast",
        ),
        Case("squared_error", {"input": normal(3, 4), "target": normal(3, 4)}),
        Case("squared_error", {"input": normal(2, 3, 4), "target": normal(4)}, id="squared_error-broadcast"),
        Case("absolute_error", {"input": distinct(3, 4), "target": distinct(3, 4, offset=0.15)}),
        Case(
            "absolute_error",
            {"input": distinct(2, 3, 4), "target": distinct(4, offset=0.15)},
            id="absolute_error-broadcast",
        ),
    ]


def _gradient_helper_cases() -> list[Case]:
    """Forward-only: these are what gradient rules emit (never differentiated themselves)."""
    return [*_shape_grad_cases(), *_window_grad_cases(), *_nn_grad_cases(), *_matmul_grad_cases()]


def _shape_grad_cases() -> list[Case]:
    """Helpers that undo broadcasting, reshapes, indexing and gathers, and ``linear``'s weight gradient."""
    return [
        Case("sum_to_like", {"input": normal(2, 3, 4), "like": normal(3, 1)}),
        Case("sum_to_like", {"input": normal(3, 4), "like": normal(3, 4)}, id="sum_to_like-same"),
        Case("sum_to_like", {"input": normal(2, 3, 4), "like": normal()}, id="sum_to_like-scalar"),
        Case("reshape_like", {"input": normal(2, 6), "like": normal(3, 4)}),
        Case("broadcast_to_like", {"input": normal(3, 1), "like": normal(2, 3, 4)}),
        Case("linear_grad_weight", {"output_grad": normal(5, 4), "input": normal(5, 3)}),
        Case(
            "linear_grad_weight",
            {"output_grad": normal(2, 5, 4), "input": normal(2, 5, 3)},
            id="linear_grad_weight-batched",
        ),
        Case(
            "embedding_grad",
            {"output_grad": normal(2, 3, 4), "input": np.array([[0, 2, 2], [5, 0, 2]]), "like": normal(6, 4)},
        ),
        Case("index_grad", {"output_grad": normal(2), "like": normal(4, 5)}, {"key": (slice(1, 3), -1)}),
        Case(
            "index_grad",
            {"output_grad": normal(1, 4), "like": normal(4, 5)},
            {"key": (None, slice(None), 2)},
            id="index_grad-none",
        ),
        Case(
            "gather_grad",
            {
                "output_grad": normal(3, 4),
                "index": np.array([[0, 0, 4, 1], [2, 3, 3, 3], [1, 0, 1, 0]]),
                "like": normal(3, 5),
            },
        ),
        Case(
            "gather_grad",
            {"output_grad": normal(2, 5), "index": integers(0, 3, 2, 5), "like": normal(3, 5)},
            {"axis": 0},
            id="gather_grad-axis0",
        ),
    ]


def _window_grad_cases() -> list[Case]:
    """Gradients of convolutions and pooling (grouped, strided, padded, dilated)."""
    conv = {"stride": 2, "padding": 1, "dilation": 1, "groups": 2}
    # conv2d input [2, 4, 7, 6], weight [6, 2, 3, 3], stride 2, padding 1 -> output [2, 6, 4, 3]
    # conv1d input [2, 4, 9], weight [6, 2, 3], stride 2, padding 1 -> output [2, 6, 5]
    pool = {"kernel_size": 3, "stride": 2, "padding": 1}
    return [
        Case(
            "conv1d_grad_input",
            {"output_grad": normal(2, 6, 5), "weight": normal(6, 2, 3), "like": normal(2, 4, 9)},
            conv,
        ),
        Case(
            "conv1d_grad_weight",
            {"output_grad": normal(2, 6, 5), "input": normal(2, 4, 9), "like": normal(6, 2, 3)},
            conv,
        ),
        Case(
            "conv2d_grad_input",
            {"output_grad": normal(2, 6, 4, 3), "weight": normal(6, 2, 3, 3), "like": normal(2, 4, 7, 6)},
            conv,
        ),
        Case(
            "conv2d_grad_weight",
            {"output_grad": normal(2, 6, 4, 3), "input": normal(2, 4, 7, 6), "like": normal(6, 2, 3, 3)},
            conv,
        ),
        Case(
            "conv2d_grad_input",
            {"output_grad": normal(1, 2, 6, 6), "weight": normal(2, 3, 3, 3), "like": normal(1, 3, 6, 6)},
            {"padding": "same", "dilation": 1},
            id="conv2d_grad_input-same",
        ),
        Case(
            "conv2d_grad_weight",
            {"output_grad": normal(1, 2, 3, 7), "input": normal(1, 3, 7, 7), "like": normal(2, 3, 3, 2)},
            {"dilation": (2, 1), "stride": (1, 1), "padding": ((0, 0), (0, 1))},
            id="conv2d_grad_weight-dilation",
        ),
        # max_pool2d input [1, 2, 7, 7], kernel 3, stride 2, padding 1 -> [1, 2, 4, 4]
        Case("max_pool2d_grad", {"output_grad": normal(1, 2, 4, 4), "input": distinct(1, 2, 7, 7)}, pool),
        Case("avg_pool2d_grad", {"output_grad": normal(1, 2, 4, 4), "input": normal(1, 2, 7, 7)}, pool),
        Case(
            "avg_pool2d_grad",
            {"output_grad": normal(1, 2, 4, 4), "input": normal(1, 2, 7, 7)},
            {**pool, "count_include_pad": False},
            id="avg_pool2d_grad-exclude-pad",
        ),
    ]


def _nn_grad_cases() -> list[Case]:
    """Attention weights and the gradients of the linear-algebra and loss primitives."""
    return [
        Case("attention_weights", {"query": normal(2, 3, 4), "key": normal(2, 5, 4)}),
        Case(
            "attention_weights",
            {"query": normal(2, 4, 4), "key": normal(2, 4, 4), "mask": _bool_mask_rows(4, 4)},
            {"causal": True, "scale": 0.5},
            id="attention_weights-causal-mask",
        ),
        Case("cholesky_grad", {"output_grad": normal(2, 3, 3), "input": spd(2, 3)}),
        Case("eigvalsh_grad", {"output_grad": normal(2, 3), "input": spd(2, 3)}),
        Case("cross_entropy_grad", {"output_grad": normal(4), "input": normal(4, 5), "target": integers(0, 5, 4)}),
        Case(
            "cross_entropy_grad",
            {"output_grad": normal(4), "input": probabilities(4, 5), "target": integers(0, 5, 4)},
            {"input_type": "probs"},
            id="cross_entropy_grad-probs",
        ),
        Case(
            "cross_entropy_grad",
            {"output_grad": normal(4), "input": normal(4, 5), "target": integers(0, 5, 4)},
            {"input_type": "log_probs"},
            id="cross_entropy_grad-log_probs",
        ),
        Case(
            "cross_entropy_grad",
            {"output_grad": normal(2, 4), "input": normal(2, 3, 4), "target": probabilities(2, 3, 4)},
            {"categorical": False},
            id="cross_entropy_grad-soft-spatial",
        ),
    ]


def _matmul_grad_cases() -> list[Case]:
    """``matmul_grad_left`` / ``matmul_grad_right`` over NumPy's 1-D promotions and batch broadcasting."""
    operands = {  # id suffix -> (output_grad, left, right)
        "2d": (normal(3, 5), normal(3, 4), normal(4, 5)),
        "batched": (normal(2, 3, 5), normal(3, 4), normal(2, 4, 5)),
        "left-1d": (normal(2, 5), normal(4), normal(2, 4, 5)),
        "right-1d": (normal(2, 3), normal(2, 3, 4), normal(4)),
        "both-1d": (normal(), normal(4), normal(4)),
    }
    return [
        Case(name, {"output_grad": g, "left": left, "right": right}, id=f"{name}-{suffix}")
        for name in ("matmul_grad_left", "matmul_grad_right")
        for suffix, (g, left, right) in operands.items()
    ]


def double_plus_one(x: Any) -> Any:
    """A user function that works on any Python array type (``lambda`` cases)."""
    return x * 2.0 + 1.0


def first_two_columns(x: Any) -> Any:
    return x[:, :2]


def _custom_cases() -> list[Case]:
    # gradients of ``lambda`` exist only on autograd backends: forward checks only
    return [
        Case("lambda", {"input": normal(3, 4)}, {"fn": double_plus_one}, grad=False),
        Case(
            "lambda",
            {"input": normal(3, 4)},
            {"fn": first_two_columns, "same_shape": False},
            id="lambda-new-shape",
            grad=False,
        ),
    ]


def _optim_cases() -> list[Case]:
    """``adam_update`` with the step's scalars of step 3, without decay, with AdamW's shrink and Adam's L2."""
    inputs = {"param": normal(3, 4), "grad": normal(3, 4), "m": normal(3, 4, scale=0.1), "v": uniform(0.0, 0.05, 3, 4),
              "step_size": lambda rng: np.array(0.01 * np.sqrt(1 - 0.999**3) / (1 - 0.9**3)),
              "eps_hat": lambda rng: np.array(1e-8 * np.sqrt(1 - 0.999**3))}  # fmt: skip
    return [
        Case("adam_update", inputs),
        Case("adam_update", {**inputs, "shrink": lambda rng: np.array(0.999)}, {"beta1": 0.8}, id="adam_update-shrink"),
        Case("adam_update", inputs, {"l2": 0.1}, id="adam_update-l2"),
        Case(
            "adam_update",
            {**inputs, "shrink": lambda rng: np.array(0.99)},
            {"in_place": True},
            id="adam_update-in-place",
        ),
    ]


CASES: list[Case] = [
    *_unary_cases(),
    *_binary_cases(),
    *_comparison_cases(),
    *_special_cases(),
    *_reductions(),
    *_linalg(),
    *_reshape_cases(),
    *_join_and_index_cases(),
    *_creation_cases(),
    *_nn_cases(),
    *_lstm_cases(),
    *_optim_cases(),
    *_loss_cases(),
    *_gradient_helper_cases(),
    *_custom_cases(),
]
"""Every core primitive's cases; ids are unique."""

_ids = [c.id for c in CASES]
assert len(_ids) == len(set(_ids)), sorted({i for i in _ids if _ids.count(i) > 1})
del _ids
