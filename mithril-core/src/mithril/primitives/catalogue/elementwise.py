"""Elementwise unary and broadcasting binary primitives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...shapes import Shape, unify
from ...types import Kind
from ..shape_rules import bool_result, broadcast, float_result, kind_of, promote, same_kind, same_shape
from ..spec import PrimitiveSpec, TypeRule

UNARY = ("input",)
BINARY = ("left", "right")


def _unary(name: str, doc: str, type_rule: TypeRule = same_kind, **kw: Any) -> PrimitiveSpec:
    return PrimitiveSpec(name, UNARY, same_shape, type_rule, doc=doc, **kw)


def _binary(name: str, doc: str, type_rule: TypeRule = promote, **kw: Any) -> PrimitiveSpec:
    return PrimitiveSpec(name, BINARY, broadcast, type_rule, doc=doc, **kw)


def _cast_kind(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> dict[str, Kind] | None:
    dtype = attrs["dtype"]
    kind = dtype if dtype in ("bool", "int", "float") else getattr(dtype, "kind", None)
    return {"output": kind} if kind else None


def _shape_of_input(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    unify(io["output"], io["input"])
    return True


_NO_GRAD = ()
SPECS = (
    _unary("neg", "-input"),
    _unary("abs", "np.abs(input)"),
    _unary("sign", "np.sign(input)", differentiable=_NO_GRAD),
    _unary("exp", "np.exp(input)", float_result),
    _unary("log", "np.log(input)", float_result),
    _unary("log1p", "np.log1p(input): log(1 + input), accurate for tiny input", float_result),
    _unary("sqrt", "np.sqrt(input)", float_result),
    _unary("rsqrt", "1 / np.sqrt(input)", float_result),
    _unary("square", "input * input"),
    _unary("sin", "np.sin(input)", float_result),
    _unary("cos", "np.cos(input)", float_result),
    _unary("tanh", "np.tanh(input)", float_result),
    _unary("sigmoid", "1 / (1 + np.exp(-input))", float_result),
    _unary("relu", "np.maximum(input, 0)"),
    _unary("leaky_relu", "np.where(input > 0, input, slope * input)", float_result, attributes={"slope": 0.01}),
    _unary(
        "gelu",
        "x * Phi(x) (exact, erf) or the tanh approximation when approximate=True",
        float_result,
        attributes={"approximate": False},
    ),
    _unary("softplus", "np.logaddexp(input, 0)", float_result),
    _unary("erf", "scipy.special.erf(input)", float_result),
    _unary("floor", "np.floor(input)", differentiable=_NO_GRAD),
    _unary(
        "stop_gradient",
        "input, through which no gradient flows (jax.lax.stop_gradient, tensor.detach())",
        differentiable=_NO_GRAD,
    ),
    _unary("isnan", "np.isnan(input)", bool_result, differentiable=_NO_GRAD),
    _unary(
        "nan_to_num",
        "np.nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)",
        attributes={"nan": 0.0, "posinf": None, "neginf": None},
    ),
    _unary("logical_not", "np.logical_not(input)", bool_result, differentiable=_NO_GRAD),
    _unary(
        "cast",
        "input.astype(dtype): dtype is a kind ('bool', 'int', 'float' -> the backend's dtype) or an ml.Dtype",
        _cast_kind,
        attributes={"dtype": "float"},
    ),
    PrimitiveSpec(
        "cast_like",
        ("input", "like"),
        _shape_of_input,
        kind_of("like"),
        differentiable=("input",),
        doc="input.astype(like.dtype): the dtype of another tensor, known when the model runs",
    ),
    _binary("add", "left + right"),
    _binary("subtract", "left - right"),
    _binary("multiply", "left * right"),
    _binary("divide", "left / right (true division)", float_result),
    _binary("floor_divide", "left // right", differentiable=_NO_GRAD),
    _binary("power", "left ** right"),
    _binary("minimum", "np.minimum(left, right)"),
    _binary("maximum", "np.maximum(left, right)"),
    *(
        _binary(name, doc, bool_result, differentiable=_NO_GRAD)
        for name, doc in (
            ("equal", "left == right"),
            ("not_equal", "left != right"),
            ("less", "left < right"),
            ("less_equal", "left <= right"),
            ("greater", "left > right"),
            ("greater_equal", "left >= right"),
            ("logical_and", "np.logical_and(left, right)"),
            ("logical_or", "np.logical_or(left, right)"),
            ("logical_xor", "np.logical_xor(left, right)"),
        )
    ),
    PrimitiveSpec(
        "where",
        ("condition", "left", "right"),
        broadcast,
        lambda kinds, attrs: promote({"l": kinds.get("left"), "r": kinds.get("right")}, attrs),
        differentiable=("left", "right"),
        input_kinds={"condition": ("bool",)},
        doc="np.where(condition, left, right)",
    ),
)

__all__ = ["SPECS", "kind_of"]
