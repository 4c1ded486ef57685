"""Per-element losses. ``cross_entropy`` views its input as ``[N, C, R]`` (R: the trailing axes)."""

from __future__ import annotations

import math

from mithril.extend import Node

from ..context import Ctx, float_literal, node_input
from .elementwise import select

__all__ = ["absolute_error", "binary_cross_entropy", "cross_entropy", "squared_error"]


def log_prob_lines(ctx: Ctx, node: Node, x: str, c: int, r: int) -> list[str]:
    """Lines defining ``LOGP(j)`` for class ``j`` at ``base`` (input layout ``[N, C, R]``)."""
    kind = node.attrs["input_type"]
    if kind == "logits":
        return [
            "double mx = -INFINITY, s = 0;",
            f"for (long j = 0; j < {c}; j++) {{ double v = {x}[base + j * {r}]; if (v > mx || v != v) mx = v; }}",
            f"for (long j = 0; j < {c}; j++) s += exp((double){x}[base + j * {r}] - mx);",
            "double lse = mx + log(s);",
            f"#define LOGP(j) ((double){x}[base + (j) * {r}] - lse)",
        ]
    if kind == "probs":
        eps = float_literal(node.attrs["eps"])
        return [f"#define LOGP(j) log(fmax((double){x}[base + (j) * {r}], {eps}))"]
    if kind == "log_probs":
        return [f"#define LOGP(j) ((double){x}[base + (j) * {r}])"]
    raise ValueError(f"cross_entropy: input_type must be 'logits', 'probs' or 'log_probs', got {kind!r}")


def cross_entropy(ctx: Ctx, node: Node) -> list[str]:
    x, t, out = node_input(node, "input"), node_input(node, "target"), node.output
    shape = ctx.shape(x)
    n, c, r = shape[0], shape[1], math.prod(shape[2:])
    X, T, Y = ctx.p(x), ctx.p(t), ctx.p(out)
    lines = ctx.check_indices(t, c, "target") if node.attrs["categorical"] else []
    lines += [f"for (long q = 0; q < {n * r}; q++) {{", f"    long base = (q / {r}) * {c * r} + q % {r};"]
    lines += ["    " + line for line in log_prob_lines(ctx, node, X, c, r)]
    if node.attrs["categorical"]:
        lines.append(f"    {Y}[q] = ({ctx.ct(out)})(-LOGP({T}[q]));")
    else:
        lines.append("    double acc = 0;")
        lines.append(f"    for (long j = 0; j < {c}; j++) acc += (double){T}[base + j * {r}] * LOGP(j);")
        lines.append(f"    {Y}[q] = ({ctx.ct(out)})(-acc);")
    lines += ["    #undef LOGP", "}"]
    return lines


def binary_cross_entropy(ctx: Ctx, node: Node) -> list[str]:
    ins = [node_input(node, "input"), node_input(node, "target")]
    if node.attrs["input_type"] == "logits":
        return ctx.map(
            node.output, ins, lambda x, t: f"fmax((double){x}, 0) - (double){x} * {t} + log1p(exp(-fabs((double){x})))"
        )
    if node.attrs["input_type"] == "probs":
        eps = float_literal(node.attrs["eps"])
        return ctx.map(
            node.output, ins,
            lambda x, t: f"-((double){t} * log(fmax((double){x}, {eps})) "
                         f"+ (1 - (double){t}) * log(fmax(1 - (double){x}, {eps})))",
        )  # fmt: skip
    raise ValueError(f"binary_cross_entropy: input_type must be 'logits' or 'probs', got {node.attrs['input_type']!r}")


def squared_error(ctx: Ctx, node: Node) -> list[str]:
    return ctx.map(
        node.output, [node_input(node, "input"), node_input(node, "target")], lambda x, t: f"({x} - {t}) * ({x} - {t})"
    )


def absolute_error(ctx: Ctx, node: Node) -> list[str]:
    return ctx.map(
        node.output,
        [node_input(node, "input"), node_input(node, "target")],
        lambda x, t: select(ctx.ct(node.output), f"{x} - {t} < 0", f"{t} - {x}", f"{x} - {t}"),
    )
