"""The gradient-helper primitives the generic VJP rules emit; implementing these gives the C backend
its backward pass from the same rules as NumPy."""

from __future__ import annotations

import math

from mithril.extend import Node, rules

from ..context import Ctx, broadcast_strides, contiguous_strides, float_literal, node_input, view_layout
from . import nn
from .linalg import gemm
from .losses import log_prob_lines
from .reductions import reduce_loops

__all__ = [
    "attention_weights",
    "avg_pool2d_grad",
    "broadcast_to_like",
    "conv1d_grad_input",
    "conv1d_grad_weight",
    "conv2d_grad_input",
    "conv2d_grad_weight",
    "cross_entropy_grad",
    "embedding_grad",
    "gather_grad",
    "index_grad",
    "linear_grad_weight",
    "max_pool2d_grad",
    "reshape_like",
    "sum_to_like",
]  # fmt: skip


def sum_to_like(ctx: Ctx, node: Node) -> list[str]:
    x, like, out = node_input(node, "input"), node_input(node, "like"), node.output
    xs, ls = ctx.shape(x), ctx.shape(like)
    if xs == ls:
        return ctx.map(out, [x], lambda v: v)
    extra = len(xs) - len(ls)
    if extra < 0:
        return ctx.map(out, [x], lambda v: v)
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(ls) if n == 1 and xs[extra + i] != 1)
    acc_t = "double" if ctx.np_dtype(x).kind == "f" else "int64_t"
    return reduce_loops(
        ctx, x, out, axes,
        lambda: [f"{acc_t} acc = 0;"],
        lambda i, k: [f"acc += {ctx.p(x)}[{i}];"],
        lambda o: [f"{ctx.p(out)}[{o}] = ({ctx.ct(out)})acc;"],
    )  # fmt: skip


def reshape_like(ctx: Ctx, node: Node) -> list[str]:
    return []  # an alias of the input (see codegen.ALIAS_PRIMITIVES)


def broadcast_to_like(ctx: Ctx, node: Node) -> list[str]:
    return ctx.map(node.output, [node_input(node, "input")], lambda v: v)


def linear_grad_weight(ctx: Ctx, node: Node) -> list[str]:
    gy, x, out = node_input(node, "output_grad"), node_input(node, "input"), node.output
    d, k = ctx.shape(out)
    rows = ctx.size(gy) // d if d else 0
    return [gemm(ctx, 1, 0, d, k, rows, ctx.p(gy), d, ctx.p(x), k, ctx.p(out), k)]


conv1d_grad_input = conv2d_grad_input = nn.conv_grad_input
conv1d_grad_weight = conv2d_grad_weight = nn.conv_grad_weight
max_pool2d_grad = nn.pool_grad(True)
avg_pool2d_grad = nn.pool_grad(False)


def embedding_grad(ctx: Ctx, node: Node) -> list[str]:
    gy, idx, out = node_input(node, "output_grad"), node_input(node, "input"), node.output
    v, dim = ctx.shape(out)
    rows = ctx.size(idx)
    return (
        ctx.check_indices(idx, v, "input")
        + ctx.fill(out, "0")
        + [
            f"for (long i = 0; i < {rows}; i++) {{",
            f"    int64_t j = {ctx.p(idx)}[i];",
            f"    for (long c = 0; c < {dim}; c++) {ctx.p(out)}[j * {dim} + c] += {ctx.p(gy)}[i * {dim} + c];",
            "}",
        ]
    )


def index_grad(ctx: Ctx, node: Node) -> list[str]:
    gy, out = node_input(node, "output_grad"), node.output
    key = node.attrs["key"]
    key = tuple(key) if isinstance(key, list) else key
    offset, strides, vshape = view_layout(ctx.shape(out), lambda a: a[key])
    src = broadcast_strides(ctx.shape(gy), vshape)
    return ctx.fill(out, "0") + ctx.copy_view(ctx.p(out), (offset, strides), ctx.p(gy), (0, src), vshape)


def gather_grad(ctx: Ctx, node: Node) -> list[str]:
    gy, idx, out = node_input(node, "output_grad"), node_input(node, "index"), node.output
    shape, ishape = ctx.shape(out), ctx.shape(idx)
    axis = rules.normalize_axis(node.attrs["axis"], len(shape))
    strides = contiguous_strides(shape)
    write = [0 if i == axis or shape[i] == 1 else s for i, s in enumerate(strides)]
    operands = [(0, contiguous_strides(ishape)), (0, write)]

    def body(i: list[str]) -> list[str]:
        return [
            f"int64_t j = {ctx.p(idx)}[{i[0]}];",
            f"{ctx.p(out)}[{i[1]} + j * {strides[axis]}] += {ctx.p(gy)}[{i[0]}];",
        ]

    checks = ctx.check_indices(idx, shape[axis], "index")
    return checks + ctx.fill(out, "0") + ctx.loops(ishape, operands, body, simd=False, parallel=False)


def attention_weights(ctx: Ctx, node: Node) -> list[str]:
    return nn.attention_probs(ctx, node, ctx.p(node.output))


def cross_entropy_grad(ctx: Ctx, node: Node) -> list[str]:
    gy, x, t, out = node_input(node, "output_grad"), node_input(node, "input"), node_input(node, "target"), node.output
    shape = ctx.shape(x)
    n, c, r = shape[0], shape[1], math.prod(shape[2:])
    X, T, G, Y = ctx.p(x), ctx.p(t), ctx.p(gy), ctx.p(out)
    categorical = node.attrs["categorical"]
    target = f"((j) == {T}[q] ? 1.0 : 0.0)" if categorical else f"(double){T}[base + (j) * {r}]"
    kind = node.attrs["input_type"]
    lines = ctx.check_indices(t, c, "target") if categorical else []
    lines += [f"for (long q = 0; q < {n * r}; q++) {{", f"    long base = (q / {r}) * {c * r} + q % {r};"]
    lines.append(f"    #define TGT(j) {target}")
    if kind == "logits":
        lines += ["    " + line for line in log_prob_lines(ctx, node, X, c, r)]
        lines.append("    double ts = 0;")
        lines.append(f"    for (long j = 0; j < {c}; j++) ts += TGT(j);")
        grad = "exp(LOGP(j)) * ts - TGT(j)"
    elif kind == "probs":
        eps = float_literal(node.attrs["eps"])
        grad = f"((double){X}[base + j * {r}] >= {eps} ? -TGT(j) / fmax((double){X}[base + j * {r}], {eps}) : 0.0)"
    elif kind == "log_probs":
        grad = "-TGT(j)"
    else:
        raise ValueError(f"cross_entropy_grad: input_type must be 'logits', 'probs' or 'log_probs', got {kind!r}")
    lines.append(
        f"    for (long j = 0; j < {c}; j++) {Y}[base + j * {r}] = ({ctx.ct(out)})(({grad}) * (double){G}[q]);"
    )
    lines += ["    #undef TGT", "    #undef LOGP" if kind == "logits" else "", "}"]
    return [line for line in lines if line]
