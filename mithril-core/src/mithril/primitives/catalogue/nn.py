"""Neural-network primitives: convolution, pooling, embedding, attention and random sampling."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ...shapes import Dim, Shape, ShapeMismatch, Variadic, unify, unify_dims
from ..geometry import conv_geometry, conv_output_size, spatial
from ..shape_rules import (
    broadcast_dims,
    fixed,
    float_result,
    float_results,
    int_result,
    kind_of,
    promote,
    rank_from_host_shape,
    same_kind,
    same_shape,
)
from ..spec import REQUIRED, PrimitiveSpec


def _conv_rule(n: int) -> Callable[[Mapping[str, Shape], Mapping[str, Any]], bool]:
    def rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
        groups = attrs["groups"]
        batch, c_in, c_out = Dim(), Dim(), Dim()
        in_spatial = [Dim() for _ in range(n)]
        k_spatial = [Dim() for _ in range(n)]
        c_per_group = Dim()
        unify(io["input"], Shape([batch, c_in, *in_spatial]))
        unify(io["weight"], Shape([c_out, c_per_group, *k_spatial]))
        if "bias" in io:
            unify(io["bias"], Shape([c_out]))
        if groups == 1:
            unify_dims(c_in, c_per_group)
        elif c_in.value is not None:
            if c_in.value % groups:
                raise ShapeMismatch(f"{c_in.value} input channels are not divisible by groups={groups}")
            c_per_group.set(c_in.value // groups)
        if c_out.value is not None and c_out.value % groups:
            raise ShapeMismatch(f"{c_out.value} output channels are not divisible by groups={groups}")
        out_spatial = [Dim() for _ in range(n)]
        unify(io["output"], Shape([batch, c_out, *out_spatial]))
        kernel = [k.value for k in k_spatial]
        if None in kernel:
            return False
        stride, padding, dilation = conv_geometry(attrs, tuple(kernel))  # type: ignore[arg-type]
        done = True
        for i in range(n):
            size = in_spatial[i].value
            if size is None:
                done = False
                continue
            out_spatial[i].set(conv_output_size(size, kernel[i], stride[i], sum(padding[i]), dilation[i]))  # type: ignore[arg-type]
        return done and c_in.value is not None

    return rule


def _pool_rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    kernel = spatial(attrs["kernel_size"], 2)
    stride, padding, dilation = conv_geometry(attrs, kernel)
    lead, h, w = Dim(), Dim(), Dim()

    batch = Variadic()
    unify(io["input"], Shape([], batch, [h, w]))
    oh, ow = Dim(), Dim()
    unify(io["output"], Shape([], batch, [oh, ow]))
    del lead
    if h.value is None or w.value is None:
        return False
    oh.set(conv_output_size(h.value, kernel[0], stride[0], sum(padding[0]), dilation[0]))
    ow.set(conv_output_size(w.value, kernel[1], stride[1], sum(padding[1]), dilation[1]))
    return True


def _embedding_rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    batch, dim = Variadic(), Dim()
    unify(io["input"], Shape([], batch, []))
    unify(io["weight"], Shape([Dim(), dim]))
    unify(io["output"], Shape([], batch, [dim]))
    return True


def _sdpa_rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    batch = Variadic()
    lq, lk, d, dv = Dim(), Dim(), Dim(), Dim()
    unify(io["query"], Shape([], batch, [lq, d]))
    unify(io["key"], Shape([], batch, [lk, d]))
    unify(io["value"], Shape([], batch, [lk, dv]))
    unify(io["output"], Shape([], batch, [lq, dv]))
    return _mask_fits(io)


def _mask_fits(io: Mapping[str, Shape]) -> bool:
    """An optional mask must broadcast to the attention scores ``[..., Lq, Lk]``."""
    if "mask" not in io:
        return True

    mask, query, key = io["mask"].dims(), io["query"].dims(), io["key"].dims()
    if mask is None or query is None or key is None:
        return False
    broadcast_dims([mask, [*query[:-1], key[-2]]])  # raises ShapeMismatch when it cannot broadcast
    return True


def _shape_attribute(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """The output's shape is the ``shape`` attribute (creation primitives)."""
    unify(io["output"], fixed(list(attrs["shape"])))
    return True


def _batch_norm_rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """``input`` and ``output`` ``[N, C, H, W]``; ``weight``, ``bias`` and the statistics ``[C]``."""
    channels = Dim()
    unify(io["input"], Shape([Dim(), channels, Dim(), Dim()]))
    unify(io["output"], io["input"])
    for key in ("weight", "bias", "mean", "var"):
        if key in io:
            unify(io[key], Shape([channels]))
    return True


_CONV_ATTRS = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1}
_POOL_ATTRS = {"kernel_size": REQUIRED, "stride": None, "padding": 0, "dilation": 1}


def _conv_spec(rank: int, doc: str) -> PrimitiveSpec:
    """``conv1d`` / ``conv2d``: ``(input, weight, bias)``, ``bias`` optional, with the convolution attributes."""
    return PrimitiveSpec(
        f"conv{rank}d",
        ("input", "weight", "bias"),
        _conv_rule(rank),
        promote,
        attributes=_CONV_ATTRS,
        optional_inputs=frozenset({"bias"}),
        doc=doc,
    )


SPECS: tuple[PrimitiveSpec, ...] = (
    _conv_spec(1, "torch.nn.functional.conv1d: input [N, C, L], weight [O, C/groups, k], bias [O] or None"),
    _conv_spec(
        2,
        "torch.nn.functional.conv2d: input [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] or None; "
        "padding is an int, a pair, ((top, bottom), (left, right)), 'valid' or 'same'",
    ),
    PrimitiveSpec(
        "batch_norm2d",
        ("input", "weight", "bias"),
        _batch_norm_rule,
        float_results("output", "mean", "var"),
        attributes={"eps": 1e-5},
        outputs=("output", "mean", "var"),
        optional_inputs=frozenset({"weight", "bias"}),
        differentiable=("input", "weight", "bias"),
        outputs_without_gradient=frozenset({"mean", "var"}),
        doc="training-mode batch normalisation (torch.nn.functional.batch_norm with training=True): input "
        "[N, C, H, W] normalised with its per-channel mean and biased variance over (N, H, W), then * weight "
        "+ bias ([C] or None); mean and var [C] are the batch statistics, returned without gradient (what "
        "the running statistics are made of); elsewhere than PyTorch: mean, var, rsqrt and a per-channel scale",
        decomposition="mithril.models.blocks.norm:batch_norm2d_decomposition",
    ),
    PrimitiveSpec(
        "max_pool2d",
        ("input",),
        _pool_rule,
        same_kind,
        attributes=_POOL_ATTRS,
        doc="torch max_pool2d over the last two axes; stride defaults to kernel_size; padding pads with -inf",
    ),
    PrimitiveSpec(
        "avg_pool2d",
        ("input",),
        _pool_rule,
        float_result,
        attributes={**_POOL_ATTRS, "count_include_pad": True},
        doc="torch avg_pool2d over the last two axes; padding counts as zeros when count_include_pad",
    ),
    PrimitiveSpec(
        "embedding",
        ("input", "weight"),
        _embedding_rule,
        kind_of("weight"),
        differentiable=("weight",),
        input_kinds={"input": ("int",)},
        doc="weight[input]: rows of weight [num_embeddings, dim] picked by integer indices",
    ),
    PrimitiveSpec(
        "scaled_dot_product_attention",
        ("query", "key", "value", "mask"),
        _sdpa_rule,
        float_result,
        attributes={"causal": False, "scale": None},
        optional_inputs=frozenset({"mask"}),
        differentiable=("query", "key", "value", "mask"),
        input_kinds={"mask": ("float", "bool")},
        doc="softmax(q @ k^T * scale + mask) @ v; scale defaults to 1/sqrt(d); a bool mask keeps True "
        "positions, a float mask is added; causal masks positions j > i (torch semantics)",
    ),
    PrimitiveSpec(
        "dropout_mask",
        ("input",),
        same_shape,
        float_result,
        attributes={"p": 0.5, "training": True},
        differentiable=(),
        random=True,
        doc="keep-mask scaled by 1/(1-p) (zeros where dropped) shaped like input; all ones when not training",
    ),
    PrimitiveSpec(
        "randn",
        (),
        _shape_attribute,
        float_result,
        attributes={"shape": REQUIRED},
        random=True,
        doc="standard normal samples of the given shape",
    ),
    PrimitiveSpec(
        "randn_of",
        ("shape",),
        rank_from_host_shape("shape"),
        float_result,
        differentiable=(),
        input_kinds={"shape": ("int",)},
        random=True,
        host_inputs=frozenset({"shape"}),
        variant_of="randn",
        doc="standard normal samples of a shape computed at run time (from other tensors' shapes)",
    ),
    PrimitiveSpec(
        "randint",
        (),
        _shape_attribute,
        int_result,
        attributes={"low": 0, "high": REQUIRED, "shape": REQUIRED},
        random=True,
        doc="integers uniform in [low, high) of the given shape",
    ),
)


def _polynomial_features_shape(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """``[N, d_in] -> [N, d_out]``, ``d_out = C(d_in + degree, degree) - 1`` once ``d_in`` is known."""
    batch, width, out = Dim(), Dim(), Dim()
    unify(io["input"], Shape([batch, width]))
    unify(io["output"], Shape([batch, out]))
    dims = io["input"].dims()
    assert dims is not None
    if dims[1].value is None:
        return False
    unify_dims(io["output"].dims()[1], Dim(math.comb(dims[1].value + attrs["degree"], attrs["degree"]) - 1))  # type: ignore[index]
    return True


SPECS += (
    PrimitiveSpec(
        "polynomial_features",
        ("input",),
        _polynomial_features_shape,
        same_kind,
        attributes={"degree": REQUIRED},
        doc="every monomial of the columns of input [N, d] of degrees 1..degree, scikit-learn's column order",
        decomposition="mithril.models.blocks.tensor_ops:polynomial_features_decomposition",
    ),
)
