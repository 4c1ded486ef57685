"""Reductions over an axis (or all axes) and the softmax family."""

from __future__ import annotations

from ..rules import float_result, int_result, reduction, same_kind, same_shape
from ..spec import PrimitiveSpec

_AXIS = {"axis": None, "keepdim": False}


def _reduce(name: str, doc: str, type_rule=same_kind, extra=None, **kw) -> PrimitiveSpec:
    return PrimitiveSpec(name, ("input",), reduction, type_rule, attributes={**_AXIS, **(extra or {})}, doc=doc, **kw)


def _sum_kind(kinds, attrs):
    kind = kinds.get("input")
    return None if kind is None else {"output": "int" if kind == "bool" else kind}


SPECS = (
    _reduce("sum", "np.sum(input, axis, keepdims=keepdim)", _sum_kind),
    _reduce("mean", "np.mean(input, axis, keepdims=keepdim)", float_result),
    _reduce("max", "np.max(input, axis, keepdims=keepdim)"),
    _reduce("min", "np.min(input, axis, keepdims=keepdim)"),
    _reduce("prod", "np.prod(input, axis, keepdims=keepdim)", _sum_kind),
    _reduce("argmax", "np.argmax(input, axis, keepdims=keepdim); axis=None is over the flattened input", int_result, differentiable=()),
    _reduce("argmin", "np.argmin(input, axis, keepdims=keepdim); axis=None is over the flattened input", int_result, differentiable=()),
    _reduce("var", "np.var(input, axis, keepdims=keepdim, ddof=correction)", float_result, {"correction": 0}),
    PrimitiveSpec("softmax", ("input",), same_shape, float_result, attributes={"axis": -1}, doc="exp(x - logsumexp(x, axis))"),
    PrimitiveSpec("log_softmax", ("input",), same_shape, float_result, attributes={"axis": -1}, doc="x - logsumexp(x, axis)"),
)
