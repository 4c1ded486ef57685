"""Reductions (accumulated in double / int64) and the softmax family.

A reduction loops over the kept axes outside (in parallel when large) and the reduced axes inside;
``softmax`` views its input as ``[outer, n, inner]``.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence

from mithril.extend import Node, Value, rules

from ..context import Ctx, Emitter, contiguous_strides, float_literal, node_input, omp

__all__ = ["argmax", "argmin", "log_softmax", "max", "mean", "min", "prod", "softmax", "sum", "var"]


def reduce_loops(
    ctx: Ctx,
    x: Value,
    out: Value,
    axes: Sequence[int],
    start: Callable[[], list[str]],
    step: Callable[..., list[str]],
    finish: Callable[[str], list[str]],
    passes: int = 1,
    sums: Sequence[str] = (),
) -> list[str]:
    """``for each kept index o: start(); for pass: for each reduced r: step(x_index, counter); finish(out_index)``.

    ``step`` receives the input element's index and a running counter over the reduced elements
    (row-major), plus the pass number through ``ctx`` convention (``passes`` > 1 calls it per pass).
    ``sums``: per pass, the accumulator that pass only adds to (``acc += ...``): when the last reduced axis
    is the input's last, the innermost loop is then an ``omp simd`` sum (several partial sums added at the
    end, so it vectorises; a serial double sum runs at one add per latency, ~4 cycles an element).
    """
    shape = ctx.shape(x)
    strides = contiguous_strides(shape)
    kept = [a for a in range(len(shape)) if a not in axes]
    red = list(axes)
    outer = math.prod(shape[a] for a in kept)
    inner = math.prod(shape[a] for a in red)
    lines = []
    o = ctx.fresh("o")
    pragma = ctx.par(outer * builtins.max(inner, 1))
    if pragma and outer > 1:
        lines.append(pragma)
    lines.append(f"for (long {o} = 0; {o} < {outer}; {o}++) {{")
    # the input offset of output element o: decompose o over the kept axes
    terms = []
    div = 1
    for a in reversed(kept):
        terms.append(f"(({o} / {div}) % {shape[a]}) * {strides[a]}")
        div *= shape[a]
    base = ctx.fresh("b")
    lines.append(f"    long {base} = {' + '.join(terms) or '0'};")
    lines += ["    " + line for line in start()]
    for p in range(passes):
        counter = ctx.fresh("k")
        lines.append(f"    long {counter} = 0;")
        names = [ctx.fresh("r") for _ in red]
        for depth, (a, name) in enumerate(zip(red, names, strict=True)):
            if depth == len(red) - 1 and p < len(sums) and a == len(shape) - 1:
                lines.append(f"    {omp(f'simd reduction(+:{sums[p]}, {counter})')}")
            lines.append(f"    for (long {name} = 0; {name} < {shape[a]}; {name}++)")
        index = " + ".join([base] + [f"{name} * {strides[a]}" for a, name in zip(red, names, strict=True)])
        inner_lines = step(f"{index}", counter) if passes == 1 else step(f"{index}", counter, p)
        lines.append("    {")
        lines += ["        " + line for line in inner_lines]
        lines.append(f"        {counter}++;")
        lines.append("    }")
        lines.append(f"    (void){counter};")
    lines += ["    " + line for line in finish(o)]
    lines.append("}")
    return lines


def _axes(node: Node, x: Value, ctx: Ctx) -> tuple[int, ...]:
    return rules.normalize_axes(node.attrs["axis"], len(ctx.shape(x)))


def _acc_type(ctx: Ctx, x: Value) -> str:
    return "double" if ctx.np_dtype(x).kind == "f" else "int64_t"


def _simple(init: str, update: str, finish: str = "acc", *, additive: bool = False) -> Emitter:
    """``additive``: ``update`` only adds to ``acc`` (a vectorisable sum: :func:`reduce_loops`' ``sums``)."""
    sums = ("acc",) if additive else ()

    def emit(ctx: Ctx, node: Node) -> list[str]:
        x, out = node_input(node, "input"), node.output
        acc_t = _acc_type(ctx, x)
        if init == "first":
            start = lambda: [f"{acc_t} acc = 0; int has = 0;"]  # noqa: E731
            step = lambda i, k: [f"{acc_t} v = {ctx.p(x)}[{i}];", f"if (!has || {update}) {{ acc = v; has = 1; }}"]  # noqa: E731
        else:
            start = lambda: [f"{acc_t} acc = {init};"]  # noqa: E731
            step = lambda i, k: [f"{acc_t} v = {ctx.p(x)}[{i}];", update]  # noqa: E731
        axes = _axes(node, x, ctx)
        count = math.prod(ctx.shape(x)[a] for a in axes)
        fin = finish.replace("COUNT", str(count))
        fill = lambda o: [f"{ctx.p(out)}[{o}] = ({ctx.ct(out)})({fin});"]  # noqa: E731
        return reduce_loops(ctx, x, out, axes, start, step, fill, sums=sums)

    return emit


sum = _simple("0", "acc += v;", additive=True)
mean = _simple("0", "acc += v;", "(double)acc / COUNT", additive=True)
prod = _simple("1", "acc *= v;")
max = _simple("first", "v > acc || v != v")
min = _simple("first", "v < acc || v != v")


def _arg(better: str) -> Emitter:
    def emit(ctx: Ctx, node: Node) -> list[str]:
        x, out = node_input(node, "input"), node.output
        axis = node.attrs["axis"]
        rank = len(ctx.shape(x))
        axes = tuple(range(rank)) if axis is None else (rules.normalize_axis(axis, rank),)
        acc_t = _acc_type(ctx, x)
        start = lambda: [f"{acc_t} best = 0; long arg = -1;"]  # noqa: E731
        step = lambda i, k: [  # noqa: E731
            f"{acc_t} v = {ctx.p(x)}[{i}];",
            f"if (arg < 0 || (best == best && (v {better} best || v != v))) {{ best = v; arg = {k}; }}",
        ]
        return reduce_loops(ctx, x, out, axes, start, step, lambda o: [f"{ctx.p(out)}[{o}] = arg;"])

    return emit


argmax = _arg(">")
argmin = _arg("<")


def var(ctx: Ctx, node: Node) -> list[str]:
    x, out = node_input(node, "input"), node.output
    axes = _axes(node, x, ctx)
    count = math.prod(ctx.shape(x)[a] for a in axes)
    ddof = float_literal(float(node.attrs["correction"]))
    start = lambda: ["double s = 0, q = 0;"]  # noqa: E731

    def step(i: str, k: str, p: int) -> list[str]:
        if p == 0:
            return [f"s += {ctx.p(x)}[{i}];"]
        return [f"double d = {ctx.p(x)}[{i}] - s / {count}; q += d * d;"]

    # NumPy divides by max(count - ddof, 0): 0 / 0 is NaN for an empty or too small sample
    fin = lambda o: [f"{ctx.p(out)}[{o}] = ({ctx.ct(out)})(q / fmax({count} - {ddof}, 0.0));"]  # noqa: E731
    return reduce_loops(ctx, x, out, axes, start, step, fin, passes=2, sums=("s", "q"))


def _softmax(log: bool) -> Emitter:
    def emit(ctx: Ctx, node: Node) -> list[str]:
        x, out = node_input(node, "input"), node.output
        shape = ctx.shape(x)
        axis = rules.normalize_axis(node.attrs["axis"], len(shape))
        outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
        X, Y, ct = ctx.p(x), ctx.p(out), ctx.ct(out)
        lines = []
        pragma = ctx.par(outer * n * inner)
        if pragma and outer * inner > 1:
            lines.append(pragma)
        if not log and inner == 1 and ct == "float" and ctx.ct(x) == "float":  # contiguous rows: vectorised
            return [
                *lines,
                f"for (long t = 0; t < {outer}; t++) {{",
                f"    memmove({Y} + t * {n}, {X} + t * {n}, {n} * sizeof(float));",
                f"    mt_softmax_row_f32({Y} + t * {n}, {n});",
                "}",
            ]
        lines += [
            f"for (long t = 0; t < {outer * inner}; t++) {{",
            f"    long base = (t / {inner}) * {n * inner} + t % {inner};",
            "    double mx = -INFINITY, s = 0;",
            f"    for (long j = 0; j < {n}; j++) "
            f"{{ double v = {X}[base + j * {inner}]; if (v > mx || v != v) mx = v; }}",
            f"    for (long j = 0; j < {n}; j++) s += exp((double){X}[base + j * {inner}] - mx);",
        ]
        if log:
            lines.append("    double ls = log(s);")
            lines.append(
                f"    for (long j = 0; j < {n}; j++) "
                f"{Y}[base + j * {inner}] = ({ct})((double){X}[base + j * {inner}] - mx - ls);"
            )
        else:
            lines.append(
                f"    for (long j = 0; j < {n}; j++) "
                f"{Y}[base + j * {inner}] = ({ct})(exp((double){X}[base + j * {inner}] - mx) / s);"
            )
        lines.append("}")
        return lines

    return emit


softmax = _softmax(False)
log_softmax = _softmax(True)
