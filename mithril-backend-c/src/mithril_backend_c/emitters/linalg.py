"""Matrix products through ``mt_gemm_*`` (CBLAS when linked, else the blocked C fallback)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from mithril.extend import Node, Value

from ..context import Ctx, broadcast_strides, contiguous_strides, node_input
from ..quantize import BLOCK, FORMATS

__all__ = ["linear", "matmul"]


def gemm(
    ctx: Ctx,
    ta: int,
    tb: int,
    m: int | str,
    n: int | str,
    k: int | str,
    a: str,
    lda: int | str,
    b: str,
    ldb: int | str,
    c: str,
    ldc: int | str,
    *,
    alpha: str = "1",
    beta: str = "0",
    nt: str = "nt",
) -> str:
    """One row-major ``C = alpha * op(A) @ op(B) + beta * C`` call (split over ``nt`` threads when large)."""
    return f"mt_gemm_{ctx.sfx}({ta}, {tb}, {m}, {n}, {k}, {alpha}, {a}, {lda}, {b}, {ldb}, {beta}, {c}, {ldc}, {nt});"


def _offsets(batch: Sequence[int], strides: Sequence[int]) -> list[int]:
    return [int(sum(i * s for i, s in zip(idx, strides, strict=True))) for idx in np.ndindex(*batch)] if batch else [0]


def batched_gemm(
    ctx: Ctx,
    L: str,
    R: str,
    out: str,
    lshape: Sequence[int],
    rshape: Sequence[int],
    *,
    tb: int = 0,
    alpha: str = "1",
    real: bool = True,
    ct: str = "double",
) -> list[str]:
    """``out[b] = alpha * left[b] @ right[b]`` (right transposed when ``tb``), NumPy batch broadcasting.

    ``lshape`` is ``[..., m, k]``; ``rshape`` is ``[..., k, n]`` (``[..., n, k]`` when ``tb``)."""
    m, k = lshape[-2], lshape[-1]
    n = rshape[-2] if tb else rshape[-1]
    batch = tuple(np.broadcast_shapes(tuple(lshape[:-2]), tuple(rshape[:-2])))
    count = math.prod(batch)
    ls = [s * m * k for s in broadcast_strides(lshape[:-2], batch)]
    rs = [s * k * n for s in broadcast_strides(rshape[:-2], batch)]
    ldb = k if tb else n
    if not real:  # integer products: plain loops
        return ctx.loops(batch, [(0, [s * m * n for s in contiguous_strides(batch)]), (0, ls), (0, rs)], lambda i: [
            f"for (long p = 0; p < {m}; p++) for (long q = 0; q < {n}; q++) {{",
            f"    {ct} acc = 0;",
            f"    for (long r = 0; r < {k}; r++) acc += {L}[{i[1]} + p * {k} + r] * {R}[{i[2]} + "
            + (f"q * {k} + r" if tb else f"r * {n} + q") + "];",
            f"    {out}[{i[0]} + p * {n} + q] = acc;",
            "}",
        ], simd=False, parallel=False)  # fmt: skip
    if count == 1:
        return [gemm(ctx, 0, tb, m, n, k, L, k, R, ldb, out, n, alpha=alpha)]
    if all(s == 0 for s in rs) and ls == [s * m * k for s in contiguous_strides(batch)]:
        # the right operand is shared by the whole batch: one GEMM with the batch merged into the rows
        return [gemm(ctx, 0, tb, count * m, n, k, L, k, R, ldb, out, n, alpha=alpha)]
    loffs = ", ".join(str(v) for v in _offsets(batch, ls))
    roffs = ", ".join(str(v) for v in _offsets(batch, rs))
    return [
        f"{{ static const long lo[{count}] = {{{loffs}}}, ro[{count}] = {{{roffs}}};",
        f"for (long b = 0; b < {count}; b++)",
        "    "
        + gemm(ctx, 0, tb, m, n, k, f"{L} + lo[b]", k, f"{R} + ro[b]", ldb, f"{out} + b * {m * n}", n, alpha=alpha),
        "}",
    ]


def _real(ctx: Ctx, *values: Value) -> bool:
    return all(ctx.ct(v) == ctx.real for v in values)


def matmul(ctx: Ctx, node: Node) -> list[str]:
    left, right, out = node_input(node, "left"), node_input(node, "right"), node.output
    ls, rs = ctx.shape(left), ctx.shape(right)
    lshape = (1, *ls) if len(ls) == 1 else ls
    rshape = (*rs, 1) if len(rs) == 1 else rs
    return batched_gemm(
        ctx, ctx.p(left), ctx.p(right), ctx.p(out), lshape, rshape, real=_real(ctx, left, right, out), ct=ctx.ct(out)
    )


def linear(ctx: Ctx, node: Node) -> list[str]:
    """``input @ weight.T + bias``: the bias is broadcast into the output, then one GEMM with beta = 1 (a
    block-quantized weight: ``mt_qlinear_f32``, the input quantized per row)."""
    x, w, b, out = node_input(node, "input"), node_input(node, "weight"), node.inputs["bias"], node.output
    d, k = ctx.shape(w)
    rows = math.prod(ctx.shape(x)[:-1])
    Y = ctx.p(out)
    fmt = ctx.quantized.get(w.id)
    if fmt is not None:
        if ctx.real != "float" or ctx.ct(x) != "float":
            raise TypeError(f"quantized weights need float32 code, not {ctx.real}")
        lines = ctx.map(out, [b], lambda v: v) if b is not None else []
        scratch = ctx.scratch(-(-quantized_scratch(rows, k) // 4), "float")
        args = f"{FORMATS[fmt].code}, {rows}, {d}, {k}, {ctx.p(x)}, {ctx.p(w)}, {Y}, {int(b is not None)}, {scratch}"
        return [*lines, f"mt_qlinear_f32({args}, nt);"]
    if not _real(ctx, x, w, out):
        lines = batched_gemm(ctx, ctx.p(x), ctx.p(w), Y, (rows, k), (d, k), tb=1, real=False, ct=ctx.ct(out))
        if b is not None:
            lines += ctx.map(out, [out, b], lambda y, v: f"{y} + {v}")
        return lines
    lines = ctx.map(out, [b], lambda v: v) if b is not None else []
    lines.append(gemm(ctx, 0, 1, rows, d, k, ctx.p(x), k, ctx.p(w), k, Y, d, beta="1" if b is not None else "0"))
    return lines


def quantized_scratch(rows: int, k: int) -> int:
    """Bytes ``mt_qlinear_f32`` needs for ``rows`` activation rows of ``k`` values: ``mt_qlinear_scratch`` of
    the runtime, which the tests compare with this (the rows' quantized lines, scales and corrections, 72
    bytes per row and block, then, for more than one row, room for ``min(8, 2 + rows // 8)`` threads' panels
    of 16 weight rows, 576 bytes per block: the panels take at most as many threads as fit)."""
    blocks = k // BLOCK
    panels = 0 if rows < 2 else min(8, 2 + rows // 8)
    return rows * blocks * 72 + 64 + panels * (-(-576 * blocks // 64) * 64) + 64
