"""Convolution (im2col + GEMM), pooling, embedding, attention and the counter-based random primitives."""

from __future__ import annotations

import math

from mithril.compiler.graph import Node

from ..codegen import Ctx, broadcast_strides, contiguous_strides, float_literal
from ._util import geometry2d, geometry_args
from .linalg import batched_gemm, gemm

__all__ = [
    "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "embedding", "scaled_dot_product_attention",
    "dropout_mask", "randn", "randint",
]  # fmt: skip


def conv_parts(ctx: Ctx, node: Node, x_shape, w_shape) -> dict:
    n, c = x_shape[:2]
    o, cg = w_shape[:2]
    g = geometry2d(node.attrs, w_shape[2:], x_shape[2:])
    groups = node.attrs["groups"]
    pointwise = (
        g["kh"] == g["kw"] == 1
        and g["sh"] == g["sw"] == 1
        and g["ph"] == g["pw"] == 0
        and g["OH"] == g["H"]
        and g["OW"] == g["W"]
    )
    return dict(
        N=n,
        C=c,
        O=o,
        Cg=cg,
        G=groups,
        Og=o // groups,
        Kc=cg * g["kh"] * g["kw"],
        P=g["OH"] * g["OW"],
        HW=g["H"] * g["W"],
        geo=g,
        pointwise=pointwise,
    )


def conv_forward(ctx: Ctx, node: Node) -> list[str]:
    x, w, b, out = node.inputs["input"], node.inputs["weight"], node.inputs["bias"], node.output
    d = conv_parts(ctx, node, ctx.shape(x), ctx.shape(w))
    X, W, Y = ctx.p(x), ctx.p(w), ctx.p(out)
    lines = []
    if b is not None:
        lines += ctx.loops(
            (d["N"], d["O"], d["P"]),
            [(0, (d["O"] * d["P"], d["P"], 1)), (0, (0, 1, 0))],
            lambda i: [f"{Y}[{i[0]}] = {ctx.p(b)}[{i[1]}];"],
        )
    beta = "1" if b is not None else "0"
    src = f"{X} + n * {d['C'] * d['HW']} + gi * {d['Cg'] * d['HW']}"
    lines += [f"for (long n = 0; n < {d['N']}; n++) for (long gi = 0; gi < {d['G']}; gi++) {{"]
    if d["pointwise"]:
        cols = src
    else:
        cols = ctx.scratch(d["Kc"] * d["P"])
        lines.append(f"    mt_im2col_{ctx.sfx}({src}, {cols}, {d['Cg']}, {geometry_args(d['geo'])}, nt);")
    lines.append(
        "    "
        + gemm(
            ctx,
            0,
            0,
            d["Og"],
            d["P"],
            d["Kc"],
            f"{W} + gi * {d['Og'] * d['Kc']}",
            d["Kc"],
            cols,
            d["P"],
            f"{Y} + n * {d['O'] * d['P']} + gi * {d['Og'] * d['P']}",
            d["P"],
            beta=beta,
        )
    )
    lines.append("}")
    return lines


conv1d = conv2d = conv_forward


def conv_grad_input(ctx: Ctx, node: Node) -> list[str]:
    gy, w, like, out = node.inputs["output_grad"], node.inputs["weight"], node.inputs["like"], node.output
    d = conv_parts(ctx, node, ctx.shape(like), ctx.shape(w))
    GY, W, DX = ctx.p(gy), ctx.p(w), ctx.p(out)
    dst = f"{DX} + n * {d['C'] * d['HW']} + gi * {d['Cg'] * d['HW']}"
    a = f"{W} + gi * {d['Og'] * d['Kc']}"
    b = f"{GY} + n * {d['O'] * d['P']} + gi * {d['Og'] * d['P']}"
    lines = [f"for (long n = 0; n < {d['N']}; n++) for (long gi = 0; gi < {d['G']}; gi++) {{"]
    if d["pointwise"]:
        lines.append("    " + gemm(ctx, 1, 0, d["Kc"], d["P"], d["Og"], a, d["Kc"], b, d["P"], dst, d["P"]))
        return lines + ["}"]
    cols = ctx.scratch(d["Kc"] * d["P"])
    lines = ctx.fill(out, "0") + lines
    lines.append("    " + gemm(ctx, 1, 0, d["Kc"], d["P"], d["Og"], a, d["Kc"], b, d["P"], cols, d["P"]))
    lines.append(f"    mt_col2im_{ctx.sfx}({cols}, {dst}, {d['Cg']}, {geometry_args(d['geo'])}, nt);")
    return lines + ["}"]


def conv_grad_weight(ctx: Ctx, node: Node) -> list[str]:
    gy, x, like, out = node.inputs["output_grad"], node.inputs["input"], node.inputs["like"], node.output
    d = conv_parts(ctx, node, ctx.shape(x), ctx.shape(like))
    GY, X, DW = ctx.p(gy), ctx.p(x), ctx.p(out)
    src = f"{X} + n * {d['C'] * d['HW']} + gi * {d['Cg'] * d['HW']}"
    lines = [f"for (long n = 0; n < {d['N']}; n++) for (long gi = 0; gi < {d['G']}; gi++) {{"]
    if d["pointwise"]:
        cols = src
    else:
        cols = ctx.scratch(d["Kc"] * d["P"])
        lines.append(f"    mt_im2col_{ctx.sfx}({src}, {cols}, {d['Cg']}, {geometry_args(d['geo'])}, nt);")
    a = f"{GY} + n * {d['O'] * d['P']} + gi * {d['Og'] * d['P']}"
    lines.append(
        "    "
        + gemm(
            ctx,
            0,
            1,
            d["Og"],
            d["Kc"],
            d["P"],
            a,
            d["P"],
            cols,
            d["P"],
            f"{DW} + gi * {d['Og'] * d['Kc']}",
            d["Kc"],
            beta="(n ? 1 : 0)",
        )
    )
    return lines + ["}"]


def _pool(is_max: bool):
    def emit(ctx: Ctx, node: Node) -> list[str]:
        x, out = node.inputs["input"], node.output
        shape = ctx.shape(x)
        g = geometry2d({**node.attrs, "stride": node.attrs["stride"]}, _kernel(node), shape[-2:])
        lead = math.prod(shape[:-2])
        include = int(bool(node.attrs.get("count_include_pad", True)))
        return [
            f"mt_pool_{ctx.sfx}({ctx.p(x)}, {ctx.p(out)}, {lead}, {geometry_args(g)}, {int(is_max)}, {include}, nt);"
        ]

    return emit


def _kernel(node: Node) -> tuple[int, int]:
    k = node.attrs["kernel_size"]
    return (k, k) if isinstance(k, int) else tuple(k)  # type: ignore[return-value]


max_pool2d = _pool(True)
avg_pool2d = _pool(False)


def pool_grad(is_max: bool):
    def emit(ctx: Ctx, node: Node) -> list[str]:
        gy, x, out = node.inputs["output_grad"], node.inputs["input"], node.output
        shape = ctx.shape(x)
        g = geometry2d(node.attrs, _kernel(node), shape[-2:])
        lead = math.prod(shape[:-2])
        include = int(bool(node.attrs.get("count_include_pad", True)))
        return [
            f"mt_pool_grad_{ctx.sfx}({ctx.p(gy)}, {ctx.p(x)}, {ctx.p(out)}, {lead}, {geometry_args(g)}, {int(is_max)}, {include}, nt);"
        ]

    return emit


def embedding(ctx: Ctx, node: Node) -> list[str]:
    idx, w, out = node.inputs["input"], node.inputs["weight"], node.output
    v, dim = ctx.shape(w)
    rows = ctx.size(idx)
    return [
        ctx.par(rows * dim),
        f"for (long i = 0; i < {rows}; i++) {{",
        f"    int64_t j = {ctx.p(idx)}[i]; if (j < 0) j += {v};",
        f"    memcpy({ctx.p(out)} + i * {dim}, {ctx.p(w)} + j * {dim}, {dim} * sizeof({ctx.ct(out)}));",
        "}",
    ]


def attention_probs(ctx: Ctx, node: Node, probs: str) -> list[str]:
    """``softmax(q @ k^T * scale + mask)`` (causal: ``j > i`` masked) into ``probs`` ``[..., lq, lk]``."""
    q, k, mask = node.inputs["query"], node.inputs["key"], node.inputs.get("mask")
    qs, ks = ctx.shape(q), ctx.shape(k)
    scale = node.attrs["scale"]
    scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
    lq, lk = qs[-2], ks[-2]
    pshape = (*__import__("numpy").broadcast_shapes(qs[:-2], ks[:-2]), lq, lk)
    lines = batched_gemm(ctx, ctx.p(q), ctx.p(k), probs, qs, ks, tb=1, alpha=float_literal(scale))
    if mask is not None:
        ms = ctx.shape(mask)
        operands = [(0, contiguous_strides(pshape)), (0, broadcast_strides(ms, pshape))]
        if ctx.np_dtype(mask).kind == "b":
            body = lambda i: [f"if (!{ctx.p(mask)}[{i[1]}]) {probs}[{i[0]}] = -INFINITY;"]  # noqa: E731
        else:
            body = lambda i: [f"{probs}[{i[0]}] += {ctx.p(mask)}[{i[1]}];"]  # noqa: E731
        lines += ctx.loops(pshape, operands, body, simd=False)
    rows = math.prod(pshape[:-1])
    causal = "if (j > r % " + str(lq) + ") v[j] = -INFINITY; " if node.attrs["causal"] else ""
    lines += [
        ctx.par(rows * lk),
        f"for (long r = 0; r < {rows}; r++) {{",
        f"    {ctx.real} *v = {probs} + r * {lk};",
        "    double mx = -INFINITY, s = 0;",
        f"    for (long j = 0; j < {lk}; j++) {{ {causal}if (v[j] > mx || v[j] != v[j]) mx = v[j]; }}",
        f"    for (long j = 0; j < {lk}; j++) s += exp((double)v[j] - mx);",
        f"    for (long j = 0; j < {lk}; j++) v[j] = ({ctx.real})(exp((double)v[j] - mx) / s);",
        "}",
    ]
    return [line for line in lines if line]


def scaled_dot_product_attention(ctx: Ctx, node: Node) -> list[str]:
    q, k, v, out = node.inputs["query"], node.inputs["key"], node.inputs["value"], node.output
    qs, ks, vs = ctx.shape(q), ctx.shape(k), ctx.shape(v)
    import numpy as np

    batch = tuple(np.broadcast_shapes(qs[:-2], ks[:-2]))
    pshape = (*batch, qs[-2], ks[-2])
    probs = ctx.scratch(math.prod(pshape))
    lines = attention_probs(ctx, node, probs)
    return lines + batched_gemm(ctx, probs, ctx.p(v), ctx.p(out), pshape, vs)


def _uniform(ctx: Ctx, index: str) -> str:
    return f"mt_uniform(a->seed, {ctx.salt}ULL, (uint64_t)({index}))"


def dropout_mask(ctx: Ctx, node: Node) -> list[str]:
    out = node.output
    p, training = float(node.attrs["p"]), node.attrs["training"]
    if not training or p == 0:
        return ctx.fill(out, "1")
    if p >= 1:
        return ctx.fill(out, "0")
    scale = float_literal(1.0 / (1.0 - p))
    return [
        ctx.par(ctx.size(out)),
        f"for (long i = 0; i < {ctx.size(out)}; i++) {ctx.p(out)}[i] = {_uniform(ctx, 'i')} >= {float_literal(p)} ? {scale} : 0;",
    ]


def randn(ctx: Ctx, node: Node) -> list[str]:
    out = node.output
    return [
        ctx.par(ctx.size(out)),
        f"for (long i = 0; i < {ctx.size(out)}; i++) {{",
        f"    double u1 = {_uniform(ctx, '2 * i')}, u2 = {_uniform(ctx, '2 * i + 1')};",
        f"    {ctx.p(out)}[i] = ({ctx.ct(out)})(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));",
        "}",
    ]


def randint(ctx: Ctx, node: Node) -> list[str]:
    out = node.output
    low, high = int(node.attrs["low"]), int(node.attrs["high"])
    return [
        f"for (long i = 0; i < {ctx.size(out)}; i++) {ctx.p(out)}[i] = ({ctx.ct(out)})(INT64_C({low}) + (int64_t)({_uniform(ctx, 'i')} * {high - low}));",
    ]
