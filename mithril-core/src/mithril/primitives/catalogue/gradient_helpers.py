"""Primitives that gradient rules need. They are ordinary primitives, so every manual-gradient backend
(NumPy, C, GGML) gets its backward pass from the same generic VJP rules by implementing these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...shapes import Dim, Shape, Variadic, unify
from ..shape_rules import float_result, kind_of
from ..spec import REQUIRED, PrimitiveSpec, ShapeRule, TypeRule
from .nn import _CONV_ATTRS, _POOL_ATTRS, _mask_fits


def _output_like(key: str) -> ShapeRule:
    """Shape rule: ``output`` is shaped like input ``key``."""

    def rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
        unify(io["output"], io[key])
        return True

    return rule


def _linear_grad_weight(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    batch, d, k = Variadic(), Dim(), Dim()
    unify(io["output_grad"], Shape([], batch, [d]))
    unify(io["input"], Shape([], batch, [k]))
    unify(io["output"], Shape([d, k]))
    return True


def _eigvalsh_grad(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    batch, n = Variadic(), Dim()
    unify(io["input"], Shape([], batch, [n, n]))
    unify(io["output_grad"], Shape([], batch, [n]))
    unify(io["output"], io["input"])
    return True


def _attention_weights(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    batch, lq, lk, d = Variadic(), Dim(), Dim(), Dim()
    unify(io["query"], Shape([], batch, [lq, d]))
    unify(io["key"], Shape([], batch, [lk, d]))
    unify(io["output"], Shape([], batch, [lq, lk]))
    return _mask_fits(io)


def _helper(
    name: str,
    inputs: tuple[str, ...],
    doc: str,
    rule: ShapeRule | None = None,
    type_rule: TypeRule | None = None,
    differentiable: tuple[str, ...] = (),
    **kw: Any,
) -> PrimitiveSpec:
    """A gradient helper's spec; by default its output is shaped like ``like`` and of its first input's kind."""
    return PrimitiveSpec(
        name,
        inputs,
        rule or _output_like("like"),
        type_rule or kind_of(inputs[0]),
        differentiable=differentiable,
        doc=doc,
        **kw,
    )


def _conv_helper(name: str, operand: str, doc: str) -> PrimitiveSpec:
    """A convolution gradient helper: ``(output_grad, operand, like)`` with the convolution's attributes."""
    return _helper(name, ("output_grad", operand, "like"), doc, attributes=_CONV_ATTRS)


def _matmul_helper(operand: str) -> PrimitiveSpec:
    """``matmul_grad_left`` / ``matmul_grad_right``: the gradient of ``matmul(left, right)`` in ``operand``."""
    return _helper(
        f"matmul_grad_{operand}",
        ("output_grad", "left", "right"),
        f"d matmul(left, right) / d {operand} times output_grad (NumPy's 1-D promotion, batch axes summed back), "
        f"shaped like {operand}",
        rule=_output_like(operand),
        type_rule=float_result,
    )


# The three ``*_like`` helpers also appear in forward graphs (GroupNorm reshapes back with
# ``reshape_like``), so gradients flow through their ``input``; ``like`` only lends its shape.
SPECS = (
    _helper(
        "sum_to_like",
        ("input", "like"),
        "sum input over its broadcast axes so it has like's shape",
        differentiable=("input",),
    ),
    _helper("reshape_like", ("input", "like"), "input.reshape(like.shape)", differentiable=("input",)),
    _helper("broadcast_to_like", ("input", "like"), "np.broadcast_to(input, like.shape)", differentiable=("input",)),
    _helper(
        "linear_grad_weight",
        ("output_grad", "input"),
        "output_grad[..., d]^T @ input[..., k] summed over all leading axes -> [d, k]",
        rule=_linear_grad_weight,
    ),
    _matmul_helper("left"),
    _matmul_helper("right"),
    _conv_helper("conv1d_grad_input", "weight", "gradient of conv1d with respect to its input (shaped like `like`)"),
    _conv_helper("conv2d_grad_input", "weight", "gradient of conv2d with respect to its input (shaped like `like`)"),
    _conv_helper("conv1d_grad_weight", "input", "gradient of conv1d with respect to its weight (shaped like `like`)"),
    _conv_helper("conv2d_grad_weight", "input", "gradient of conv2d with respect to its weight (shaped like `like`)"),
    _helper(
        "max_pool2d_grad",
        ("output_grad", "input"),
        "routes output_grad to the arg-max of each window (ties: first), shaped like input",
        rule=_output_like("input"),
        attributes=_POOL_ATTRS,
    ),
    _helper(
        "avg_pool2d_grad",
        ("output_grad", "input"),
        "spreads output_grad evenly over each window, shaped like input",
        rule=_output_like("input"),
        attributes={**_POOL_ATTRS, "count_include_pad": True},
    ),
    _helper(
        "embedding_grad",
        ("output_grad", "input", "like"),
        "scatter-add of output_grad rows into zeros shaped like the weight, at the integer indices input",
    ),
    _helper(
        "index_grad",
        ("output_grad", "like"),
        "zeros like `like` with output_grad added at [key]",
        attributes={"key": REQUIRED},
    ),
    _helper(
        "gather_grad",
        ("output_grad", "index", "like"),
        "zeros like `like` with output_grad added along axis at index (inverse of take_along_axis)",
        attributes={"axis": -1},
    ),
    _helper(
        "cholesky_grad",
        ("output_grad", "input"),
        "gradient of cholesky at input (symmetric): sym(L^-T Phi(L^T tril(output_grad)) L^-1), Phi = tril with "
        "halved diagonal",
        rule=_output_like("input"),
        type_rule=float_result,
    ),
    _helper(
        "eigvalsh_grad",
        ("output_grad", "input"),
        "gradient of eigvalsh at input: V @ diag(output_grad) @ V.T with V the eigenvectors of input",
        rule=_eigvalsh_grad,
        type_rule=float_result,
    ),
    _helper(
        "attention_weights",
        ("query", "key", "mask"),
        "softmax(q @ k^T * scale + mask) with the masking rules of scaled_dot_product_attention",
        rule=_attention_weights,
        type_rule=float_result,
        attributes={"causal": False, "scale": None},
        optional_inputs=frozenset({"mask"}),
    ),
    _helper(
        "cross_entropy_grad",
        ("output_grad", "input", "target"),
        "d cross_entropy / d input times output_grad (broadcast over the class axis 1), shaped like input",
        rule=_output_like("input"),
        type_rule=float_result,
        attributes={"input_type": "logits", "categorical": True, "eps": 1e-12},
    ),
)
