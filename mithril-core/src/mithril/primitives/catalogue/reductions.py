"""Reductions over an axis (or all axes) and the softmax family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...shapes import Shape, ShapeMismatch
from ...types import Kind
from ..shape_rules import float_result, int_result, normalize_axes, reduction, same_kind, same_shape
from ..spec import PrimitiveSpec, ShapeRule, TypeRule

_AXIS = {"axis": None, "keepdim": False}


def _reduce(
    name: str,
    doc: str,
    type_rule: TypeRule = same_kind,
    extra: Mapping[str, Any] | None = None,
    rule: ShapeRule = reduction,
    **kw: Any,
) -> PrimitiveSpec:
    return PrimitiveSpec(name, ("input",), rule, type_rule, attributes={**_AXIS, **(extra or {})}, doc=doc, **kw)


def _reduction_with_no_identity(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """:func:`reduction`, refusing a reduced axis of size 0 (``max``/``argmax`` of nothing has no value,
    as in NumPy; ``sum`` and ``mean`` of nothing do)."""
    done = reduction(io, attrs)
    dims = io["input"].dims()
    if dims is not None:
        for axis in normalize_axes(attrs.get("axis"), len(dims)):
            if dims[axis].value == 0:
                raise ShapeMismatch(f"axis {axis} has size 0: a reduction with no identity needs at least one element")
    return done and (dims is not None and all(d.value is not None for d in dims))


def _sum_kind(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> dict[str, Kind] | None:
    kind = kinds.get("input")
    return None if kind is None else {"output": "int" if kind == "bool" else kind}


SPECS = (
    _reduce("sum", "np.sum(input, axis, keepdims=keepdim)", _sum_kind),
    _reduce("mean", "np.mean(input, axis, keepdims=keepdim)", float_result),
    _reduce("max", "np.max(input, axis, keepdims=keepdim)", rule=_reduction_with_no_identity),
    _reduce("min", "np.min(input, axis, keepdims=keepdim)", rule=_reduction_with_no_identity),
    _reduce("prod", "np.prod(input, axis, keepdims=keepdim)", _sum_kind),
    _reduce(
        "argmax",
        "np.argmax(input, axis, keepdims=keepdim); axis=None is over the flattened input",
        int_result,
        differentiable=(),
        rule=_reduction_with_no_identity,
    ),
    _reduce(
        "argmin",
        "np.argmin(input, axis, keepdims=keepdim); axis=None is over the flattened input",
        int_result,
        differentiable=(),
        rule=_reduction_with_no_identity,
    ),
    _reduce("var", "np.var(input, axis, keepdims=keepdim, ddof=correction)", float_result, {"correction": 0}),
    PrimitiveSpec(
        "softmax", ("input",), same_shape, float_result, attributes={"axis": -1}, doc="exp(x - logsumexp(x, axis))"
    ),
    PrimitiveSpec(
        "log_softmax", ("input",), same_shape, float_result, attributes={"axis": -1}, doc="x - logsumexp(x, axis)"
    ),
)
