"""Convolution, pooling, embedding, attention and the counter-based random primitives.

Convolutions run in blocks of output pixels, each followed by the elementwise chain fused after the
convolution (:mod:`~mithril_backend_c.fusion`): Winograd F(2x2, 3x3) for 3x3 stride-1 kernels over at
least 8x8 outputs, im2col + GEMM otherwise. The input gradient of a stride-1 convolution over an image
with many pixels is such a convolution too (of the output gradient with the flipped kernel), else a GEMM
and col2im. Convolutions and pooling split their work into parts
(:meth:`~mithril_backend_c.context.Ctx.parallel`), so ggml can run them on all its threads too.

Example (the blocks of a convolution whose BatchNorm and ReLU were fused)::

    {  /* conv2d @ layer1.0.conv1.conv2d_0 + subtract, multiply, multiply, add, relu */
        MT_OMP("omp parallel num_threads(nt < 2 ? nt : 2) if(nt > 1)")
        ...
            mt_wino_input_f32(...); for (int xi = 0; xi < 16; xi++) mt_gemm_f32(...);
            ... y00 = s0[0] + s0[1] + s0[2] ... e27 = (e26 > 0 || e26 != e26 ? e26 : 0) ...
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mithril.extend import Node, Value

from ..context import Ctx, Emitter, broadcast_strides, contiguous_strides, float_literal, node_input, omp
from ..quantize import FORMATS
from ._util import geometry2d, geometry_args
from .fused import Unit, chain_lines, pixel_strides
from .linalg import batched_gemm, gemm, quantized_scratch

__all__ = [
    "avg_pool2d",
    "conv1d",
    "conv2d",
    "dropout_mask",
    "embedding",
    "max_pool2d",
    "randint",
    "randn",
    "scaled_dot_product_attention",
]  # fmt: skip


def conv_parts(ctx: Ctx, node: Node, x_shape: Sequence[int], w_shape: Sequence[int]) -> dict[str, Any]:
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


Epilogue = Callable[[str, bool], list[str]]
"""The lines finishing one output of a convolution from its sum (``value``, ``in_memory``)."""

CONV_BLOCK = 256
"""Output pixels per im2col block and GEMM (images with at most twice as many pixels are one block): the
block's columns stay in cache for the GEMM and its epilogue, while the GEMM is still wide enough that
repacking the weights for each block costs little (measured: smaller blocks lose on 7x7 feature maps,
where the weights are the big operand)."""
WINO_BLOCK = 200
"""Winograd tiles per block (images with at most 256 tiles are one block); not a power of two, so the
16 interleaved matrices of a block do not alias in the cache."""
WINO_MIN_TILES = 32
"""Winograd pays from 8x8 outputs on: below, the transformed filters (16/9 of the weights) outweigh the
saved multiplications."""
WINO_MAX_FILTER_BYTES = 8 << 20
"""Each thread transforms the filters of its output channels (all of them when threads split the
pixels); a layer whose transformed filters would take more than this, all threads together, uses im2col."""


def _conv_plan(ctx: Ctx, d: dict[str, Any], quantized: bool = False) -> dict[str, Any]:
    """How a convolution is computed: ``winograd`` (3x3, stride 1: F(2x2, 3x3), 2.25x fewer
    multiplications) or im2col blocks of ``block`` ``units`` (2x2 tiles or pixels); threads split the
    output channels (``by_rows``, ``rows`` at a time) when there are few units per thread, else the units;
    ``scratch``: elements each thread needs. ``quantized`` weights: blocks of pixels whose patches are
    quantized (``mt_qconv_block_f32``)."""
    g, parts = d["geo"], ctx.max_parts

    def by_rows(total: int, per_thread: int) -> bool:
        return parts > 1 and total < per_thread * parts and d["Og"] >= 16 * parts

    def blocks(units: int, total: int, split: bool, largest: int, size: int) -> int:
        """Units per block: all of an image's when few, and never more than a thread's share of the
        pixels when threads split them (so each thread's scratch is one block, however many threads)."""
        block = units if units <= largest else size
        return block if split else min(block, -(-total // parts) + 16)

    winograd = (g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"]) == (3, 3, 1, 1, 1, 1)
    if winograd and not quantized and min(d["Cg"], d["Og"]) >= 16:
        tw, th = (g["OW"] + 1) // 2, (g["OH"] + 1) // 2
        total = d["N"] * d["G"] * tw * th
        split = by_rows(total, 64)
        rows = -(-d["Og"] // parts) if split else d["Og"]
        filters = parts * 16 * rows * d["Cg"] * ctx.dtype.itemsize  # every thread's transformed filters
        if tw * th >= WINO_MIN_TILES and filters <= WINO_MAX_FILTER_BYTES:
            block = blocks(tw * th, total, split, 256, WINO_BLOCK)
            scratch = 16 * (rows * d["Cg"] + d["Cg"] * block + rows * block + tw + 2)
            return dict(winograd=True, by_rows=split, rows=rows, units=tw * th, total=total, block=block,
                        scratch=scratch, TW=tw)  # fmt: skip
    total = d["N"] * d["G"] * d["P"]
    split = by_rows(total, 256)
    block = blocks(d["P"], total, split, 2 * CONV_BLOCK, CONV_BLOCK)
    scratch = 0 if d["pointwise"] else d["Kc"] * block
    if quantized:  # the patch of one pixel, then the block's patches quantized (mt_qconv_scratch)
        scratch = -(-(d["Kc"] * 4 + 64 + quantized_scratch(block, d["Kc"])) // ctx.dtype.itemsize)
    return dict(winograd=False, by_rows=split, rows=d["Og"], units=d["P"], total=total, block=block,
                scratch=scratch)  # fmt: skip


def conv_forward(ctx: Ctx, node: Node, unit: Unit | None = None) -> list[str]:
    """Convolution in blocks of output pixels, each followed by the fused elementwise epilogue of ``unit``
    (:mod:`~mithril_backend_c.fusion`) while the block is in cache:

    - 3x3 stride-1 convolutions over at least 8x8 outputs: Winograd F(2x2, 3x3) (input tiles transformed,
      16 GEMMs, 2x2 outputs transformed back), 2.25x fewer multiplications;
    - others: im2col of the block (none for 1x1 kernels), one GEMM.

    Threads split the output pixels, or the output channels when there are few pixels; each has its own
    scratch (``max_parts`` of them) and calls single-threaded GEMMs."""
    x, w, b, out = node_input(node, "input"), node_input(node, "weight"), node.inputs["bias"], node.output
    d = conv_parts(ctx, node, ctx.shape(x), ctx.shape(w))
    return _conv_region(ctx, d, ctx.p(x), ctx.p(w), ctx.quantized.get(w.id), b, out, unit)


def _conv_region(
    ctx: Ctx, d: dict[str, Any], X: str, W: str, fmt: str | None, b: Value | None, out: Value, unit: Unit | None
) -> list[str]:
    """The parallel region of a convolution of ``d`` (:func:`conv_parts`) reading the input at ``X`` and
    the weight at ``W`` (``fmt``: its block quantization, or ``None``), writing ``out`` (and the fused
    chain of ``unit``)."""
    plan = _conv_plan(ctx, d, quantized=fmt is not None)
    out_shape = ctx.shape(out)
    stored = {v.id for v in unit.stored} if unit is not None and unit.fused else {out.id}
    acc_value = out if unit is None or out.id in stored else unit.nodes[-1].output  # where the GEMM of im2col writes
    at = _pixel_at(out_shape, out_shape)
    epilogue = _epilogue(ctx, unit, b, out, stored, at)
    src = f"{X} + n * {d['C'] * d['HW']} + gi * {d['Cg'] * d['HW']}"
    body = _part_range(ctx, d, plan)
    if plan["winograd"]:
        head, inner = _winograd_block(ctx, d, plan, W, src, epilogue)
        body += head
    elif fmt is not None:
        inner = _quantized_block(ctx, d, FORMATS[fmt].code, W, src, acc_value, at, epilogue)
    else:
        inner = _im2col_block(ctx, d, plan, W, src, acc_value, at, epilogue)
    body += _block_loop(d, plan, inner)
    if plan["winograd"]:
        body.append("}")  # the row turns
    return ctx.parallel(body, plan["total"] * d["O"] * d["Kc"])


def _pixel_index(strides: tuple[int, int, int]) -> str:
    """The index of output pixel ``p`` of channel ``o`` of image ``n`` in an operand of ``strides``."""
    terms = (f"n * {strides[0]}" if strides[0] else "", f"o * {strides[1]}" if strides[1] else "")
    pixel = ("p" if strides[2] == 1 else f"p * {strides[2]}") if strides[2] else ""
    return " + ".join(t for t in (*terms, pixel) if t) or "0"


def _pixel_at(shape: Sequence[int], out_shape: Sequence[int]) -> str:
    """:func:`_pixel_index` of an operand of ``shape`` read by a convolution output of ``out_shape`` (the
    output itself, or a value of its fused chain: fusion admits only those with pixel strides)."""
    strides = pixel_strides(shape, out_shape)
    assert strides is not None, (shape, out_shape)
    return _pixel_index(strides)


def _epilogue(ctx: Ctx, unit: Unit | None, b: Value | None, out: Value, stored: set[int], at: str) -> Epilogue:
    """The lines finishing output (n, o, p) whose convolution sum is ``value`` (already at ``acc[at]``
    when ``in_memory``): bias, stores, the fused chain."""
    out_shape, real = ctx.shape(out), ctx.real

    def epilogue(value: str, in_memory: bool) -> list[str]:
        if b is not None:
            value = f"({real})({value} + {ctx.p(b)}[o])"
        if unit is None or not unit.fused:
            return [] if in_memory and b is None else [f"{ctx.p(out)}[{at}] = {value};"]
        cv = ctx.fresh("e")
        lines = [f"{real} {cv} = {value};"]
        if out.id in stored and not (in_memory and b is None):
            lines.append(f"{ctx.p(out)}[{at}] = {cv};")
        strides = lambda v: _pixel_at(ctx.shape(v), out_shape)  # noqa: E731
        return lines + chain_lines(ctx, unit, strides, {out.id: cv})

    return epilogue


def _part_range(ctx: Ctx, d: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """The first lines of a part: its scratch, and its output channels (``m0``..``m1``) or its range of
    blocks (``lo``..``hi``)."""
    per_part = plan["scratch"]
    scratch = ctx.scratch(ctx.max_parts * per_part) if per_part else None
    body = [f"{ctx.real} *scr = {scratch} + part * {per_part};"] if scratch else []
    body += [f"long m0 = 0, m1 = {d['Og']}, lo = 0, hi = {plan['total']};"]
    if plan["by_rows"]:
        body.append(f"mt_part_range({d['Og']}, part, nparts, 1, &m0, &m1);")
    else:
        body.append(f"mt_part_range({plan['total']}, part, nparts, 16, &lo, &hi);")
    return body


def _block_loop(d: dict[str, Any], plan: dict[str, Any], inner: list[str]) -> list[str]:
    """The loop over the part's blocks of ``block`` units (pixels or tiles) of each image and group."""
    units, block, groups = plan["units"], plan["block"], d["G"]
    image = "const long n = ng, gi = 0;" if groups == 1 else f"const long n = ng / {groups}, gi = ng % {groups};"
    return [
        "if (m0 < m1) for (long q = lo; q < hi;) {",
        f"    const long ng = q / {units}, u0 = q - ng * {units};",
        f"    long u1 = u0 + {block} < {units} ? u0 + {block} : {units};",
        f"    if (ng * {units} + u1 > hi) u1 = hi - ng * {units};",
        f"    {image}",
        *["    " + line for line in inner],
        f"    q = ng * {units} + u1;",
        "}",
    ]


def _im2col_block(
    ctx: Ctx, d: dict[str, Any], plan: dict[str, Any], W: str, src: str, acc_value: Value, at: str, epilogue: Epilogue
) -> list[str]:
    """One block by im2col (none for a pointwise convolution) and a GEMM into ``acc_value``, then the
    epilogue over the block."""
    og, k, pixels = d["Og"], d["Kc"], d["P"]
    if d["pointwise"]:
        b_ptr, ldb = f"{src} + u0", str(d["HW"])
        inner = []
    else:
        inner = [f"mt_im2col_range_{ctx.sfx}({src}, scr, {d['Cg']}, {geometry_args(d['geo'])}, u0, u1);"]
        b_ptr, ldb = "scr", "u1 - u0"
    a_ptr = f"{W} + (gi * {og} + m0) * {k}"
    c_ptr = f"{ctx.p(acc_value)} + n * {d['O'] * pixels} + (gi * {og} + m0) * {pixels} + u0"
    inner.append(gemm(ctx, 0, 0, "m1 - m0", "u1 - u0", k, a_ptr, k, b_ptr, ldb, c_ptr, pixels, nt="1"))
    lines = epilogue(f"{ctx.p(acc_value)}[{at}]", True)
    if lines:
        inner += [
            f"for (long o = gi * {og} + m0; o < gi * {og} + m1; o++) {{",
            omp("simd"),
            "    for (long p = u0; p < u1; p++) {",
            *["        " + line for line in lines],
            "    }",
            "}",
        ]
    return inner


def _quantized_block(
    ctx: Ctx, d: dict[str, Any], code: int, W: str, src: str, acc_value: Value, at: str, epilogue: Epilogue
) -> list[str]:
    """One block with block-quantized weights (one group): each pixel's patch quantized, integer block
    products into ``acc_value``, then the epilogue over the block."""
    g, pixels = d["geo"], d["P"]
    window = ", ".join(str(g[k]) for k in ("H", "W", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "OW"))
    y = f"{ctx.p(acc_value)} + n * {d['O'] * pixels}"
    inner = [f"mt_qconv_block_f32({code}, {src}, {W}, {y}, {pixels}, {d['Cg']}, {window}, u0, u1, m0, m1, scr);"]
    lines = epilogue(f"{ctx.p(acc_value)}[{at}]", True)
    if lines:
        inner += [
            "for (long o = m0; o < m1; o++) {",
            omp("simd"),
            "    for (long p = u0; p < u1; p++) {",
            *["        " + line for line in lines],
            "    }",
            "}",
        ]
    return inner


def _winograd_block(
    ctx: Ctx, d: dict[str, Any], plan: dict[str, Any], W: str, src: str, epilogue: Epilogue
) -> tuple[list[str], list[str]]:
    """Winograd F(2x2, 3x3): the lines opening the part's turns over its output channels (transformed
    filters, once per turn when there is one group), and one block: input tiles transformed, 16 GEMMs,
    each tile's 2x2 outputs transformed back and finished by the epilogue."""
    g, tw, og = d["geo"], plan["TW"], d["Og"]
    cg, rows, block, real = d["Cg"], plan["rows"], plan["block"], ctx.real
    head = [
        f"{real} *U = scr, *V = U + {16 * rows * cg}, *M = V + {16 * cg * block}, *buf = M + {16 * rows * block};",
        # a thread with more channels than its scratch holds (fewer threads than planned) does them in turns
        f"for (long r0 = m0; r0 < m1; r0 += {rows}) {{",
        f"const long r1 = r0 + {rows} < m1 ? r0 + {rows} : m1;",
    ]
    filt = f"mt_wino_filter_{ctx.sfx}({W} + (gi * {og} + r0) * {cg * 9}, U, r1 - r0, {cg});"
    if d["G"] == 1:
        head += ["{", "    const long gi = 0;", f"    {filt}", "}"]
    inner = [] if d["G"] == 1 else [filt]
    inner += [
        f"mt_wino_input_{ctx.sfx}({src}, V, {cg}, {g['H']}, {g['W']}, {g['ph']}, {g['pw']}, {tw}, u0, u1, buf);",
        "const long tb = u1 - u0;",
        "for (int xi = 0; xi < 16; xi++)",
        "    " + gemm(ctx, 0, 0, "r1 - r0", "tb", cg, f"U + xi * {cg}", 16 * cg, "V + xi * tb", "16 * tb",
                      "M + xi * tb", "16 * tb", nt="1"),
    ]  # fmt: skip
    return head, inner + _winograd_outputs(ctx, g, og, tw, epilogue)


def _winograd_outputs(ctx: Ctx, g: dict[str, Any], og: int, tw: int, epilogue: Epilogue) -> list[str]:
    """The loop over a block's output channels and tiles: ``A^T m A`` for each tile, its 2x2 outputs
    finished by the epilogue (tiles on the bottom or right edge finish only the outputs inside)."""
    real, oh_, ow_ = ctx.real, g["OH"], g["OW"]
    y = [  # A^T m A for the tile at mm[tw], m(i, j) = mm[(4 i + j) * tb + tw]
        f"const {real} *m_ = mm + tw;",
        f"{real} s0[4], s1[4];",
        "for (int j = 0; j < 4; j++) {",
        "    s0[j] = m_[j * tb] + m_[(4 + j) * tb] + m_[(8 + j) * tb];",
        "    s1[j] = m_[(4 + j) * tb] - m_[(8 + j) * tb] - m_[(12 + j) * tb];",
        "}",
        f"const {real} y00 = s0[0] + s0[1] + s0[2], y01 = s0[1] - s0[2] - s0[3];",
        f"const {real} y10 = s1[0] + s1[1] + s1[2], y11 = s1[1] - s1[2] - s1[3];",
    ]
    fast = []
    for a_, b_ in ((0, 0), (0, 1), (1, 0), (1, 1)):
        fast += ["{", f"    const long p = (oh + {a_}) * {ow_} + 2 * tw + {b_};"]
        fast += ["    " + line for line in epilogue(f"y{a_}{b_}", False)]
        fast.append("}")
    edge = [
        f"const {real} ys[4] = {{y00, y01, y10, y11}};",
        "for (int a2 = 0; a2 < 2; a2++) for (int b2 = 0; b2 < 2; b2++) {",
        f"    if (oh + a2 >= {oh_} || 2 * tw + b2 >= {ow_}) continue;",
        f"    const long p = (oh + a2) * {ow_} + 2 * tw + b2;",
    ]
    edge += ["    " + line for line in epilogue("ys[a2 * 2 + b2]", False)] + ["}"]
    return [
        f"for (long o = gi * {og} + r0; o < gi * {og} + r1; o++) {{",
        f"    const {real} *mo = M + (o - gi * {og} - r0) * 16 * tb - u0;",
        "    for (long t = u0; t < u1;) {",
        f"        const long th = t / {tw}, tw0 = t - th * {tw};",
        f"        const long tw1 = tw0 + (u1 - t) < {tw} ? tw0 + (u1 - t) : {tw};",
        f"        const long oh = 2 * th, full = oh + 1 < {oh_} ? (tw1 < {ow_ // 2} ? tw1 : {ow_ // 2}) : tw0;",
        f"        const {real} *mm = mo + (t - tw0);",
        "        " + omp("simd"),
        "        for (long tw = tw0; tw < full; tw++) {",
        *["            " + line for line in y + fast],
        "        }",
        "        for (long tw = full > tw0 ? full : tw0; tw < tw1; tw++) {",
        *["            " + line for line in y + edge],
        "        }",
        "        t += tw1 - tw0;",
        "    }",
        "}",
    ]


conv1d = conv2d = conv_forward


def _correlation_parts(d: dict[str, Any]) -> dict[str, Any] | None:
    """The input gradient of a stride-1 convolution ``d`` as a convolution of the output gradient (the
    :func:`conv_parts` of that one), when it pays: the gradient is then computed like a forward convolution
    (in blocks, Winograd for 3x3 kernels) instead of a GEMM into columns of every pixel and a col2im
    (measured: ResNet-18's training step on one thread 91 -> 81 ms); ``None`` otherwise, and for images
    with fewer than twice as many pixels as channels, where the columns are small. The weight is the kernel flipped
    spatially with its in/out channels swapped within each group (:func:`_flipped_weight`), the padding
    ``dilation * (kernel - 1) - padding`` (non-negative)."""
    g = d["geo"]
    ph, pw = g["dh"] * (g["kh"] - 1) - g["ph"], g["dw"] * (g["kw"] - 1) - g["pw"]
    if d["pointwise"] or (g["sh"], g["sw"]) != (1, 1) or min(ph, pw) < 0 or d["HW"] < 2 * d["C"]:
        return None
    geo = dict(g, ph=ph, pw=pw, H=g["OH"], W=g["OW"], OH=g["H"], OW=g["W"])
    c, o, cg, og = d["O"], d["C"], d["Og"], d["Cg"]
    return dict(d, C=c, O=o, Cg=cg, Og=og, Kc=cg * g["kh"] * g["kw"], P=d["HW"], HW=d["P"], geo=geo)


def _flipped_weight(ctx: Ctx, d: dict[str, Any], W: str) -> tuple[str, list[str]]:
    """Scratch holding the weight [O, Cg, kh, kw] of ``d`` as [C, Og, kh, kw]: element (gi Cg + c, o, i, j)
    is (gi Og + o, c, kh-1-i, kw-1-j) — the weight of :func:`_correlation_parts`' convolution."""
    cg, og, k = d["Cg"], d["Og"], d["geo"]["kh"] * d["geo"]["kw"]
    flipped = ctx.scratch(d["O"] * cg * k)
    lines = [
        f"for (long gi = 0; gi < {d['G']}; gi++) for (long o = 0; o < {og}; o++) for (long c = 0; c < {cg}; c++) {{",
        f"    const {ctx.real} *src = {W} + ((gi * {og} + o) * {cg} + c) * {k};",
        f"    {ctx.real} *dst = {flipped} + ((gi * {cg} + c) * {og} + o) * {k};",
        f"    for (long t = 0; t < {k}; t++) dst[t] = src[{k - 1} - t];",
        "}",
    ]
    return flipped, lines


def conv_grad_input(ctx: Ctx, node: Node) -> list[str]:
    gy, w, like = node_input(node, "output_grad"), node_input(node, "weight"), node_input(node, "like")
    out = node.output
    d = conv_parts(ctx, node, ctx.shape(like), ctx.shape(w))
    GY, W, DX = ctx.p(gy), ctx.p(w), ctx.p(out)
    corr = _correlation_parts(d) if not ctx.partitioned else None
    if corr is not None:
        flipped, lines = _flipped_weight(ctx, d, W)
        return lines + _conv_region(ctx, corr, GY, flipped, None, None, out, None)
    dst = f"{DX} + n * {d['C'] * d['HW']} + gi * {d['Cg'] * d['HW']}"
    a = f"{W} + gi * {d['Og'] * d['Kc']}"
    b = f"{GY} + n * {d['O'] * d['P']} + gi * {d['Og'] * d['P']}"
    lines = [f"for (long n = 0; n < {d['N']}; n++) for (long gi = 0; gi < {d['G']}; gi++) {{"]
    if d["pointwise"]:
        lines.append("    " + gemm(ctx, 1, 0, d["Kc"], d["P"], d["Og"], a, d["Kc"], b, d["P"], dst, d["P"]))
        return [*lines, "}"]
    cols = ctx.scratch(d["Kc"] * d["P"])
    lines = ctx.fill(out, "0") + lines
    lines.append("    " + gemm(ctx, 1, 0, d["Kc"], d["P"], d["Og"], a, d["Kc"], b, d["P"], cols, d["P"]))
    lines.append(f"    mt_col2im_{ctx.sfx}({cols}, {dst}, {d['Cg']}, {geometry_args(d['geo'])}, nt);")
    return [*lines, "}"]


def conv_grad_weight(ctx: Ctx, node: Node) -> list[str]:
    gy, x, like, out = node_input(node, "output_grad"), node_input(node, "input"), node_input(node, "like"), node.output
    d = conv_parts(ctx, node, ctx.shape(x), ctx.shape(like))
    GY, X, DW = ctx.p(gy), ctx.p(x), ctx.p(out)
    if d["N"] == 0:  # no image: the batch loop below would never write the (accumulated) result
        return ctx.fill(out, "0")
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
    return [*lines, "}"]


def _pool(is_max: bool) -> Emitter:
    def emit(ctx: Ctx, node: Node) -> list[str]:
        x, out = node_input(node, "input"), node.output
        shape = ctx.shape(x)
        g = geometry2d({**node.attrs, "stride": node.attrs["stride"]}, _kernel(node), shape[-2:])
        lead = math.prod(shape[:-2])
        include = int(bool(node.attrs.get("count_include_pad", True)))
        call = f"mt_pool_part_{ctx.sfx}({ctx.p(x)}, {ctx.p(out)}, {lead}, {geometry_args(g)}, {int(is_max)}, {include}"
        return ctx.parallel([f"{call}, part, nparts);"], lead * g["OH"] * g["OW"] * g["kh"] * g["kw"])

    return emit


def _kernel(node: Node) -> tuple[int, int]:
    k = node.attrs["kernel_size"]
    return (k, k) if isinstance(k, int) else tuple(k)


max_pool2d = _pool(True)
avg_pool2d = _pool(False)


def pool_grad(is_max: bool) -> Emitter:
    def emit(ctx: Ctx, node: Node) -> list[str]:
        gy, x, out = node_input(node, "output_grad"), node_input(node, "input"), node.output
        shape = ctx.shape(x)
        g = geometry2d(node.attrs, _kernel(node), shape[-2:])
        lead = math.prod(shape[:-2])
        include = int(bool(node.attrs.get("count_include_pad", True)))
        return [
            f"mt_pool_grad_{ctx.sfx}({ctx.p(gy)}, {ctx.p(x)}, {ctx.p(out)}, {lead}, {geometry_args(g)}, "
            f"{int(is_max)}, {include}, nt);"
        ]

    return emit


def embedding(ctx: Ctx, node: Node) -> list[str]:
    idx, w, out = node_input(node, "input"), node_input(node, "weight"), node.output
    v, dim = ctx.shape(w)
    rows = ctx.size(idx)
    lines = ctx.check_indices(idx, v, "input")
    fmt = ctx.quantized.get(w.id)
    if fmt is not None:  # rows of a block-quantized table, as floats
        code = FORMATS[fmt].code
        return [*lines, f"mt_qrows_f32({code}, {ctx.p(w)}, {ctx.p(idx)}, {rows}, {dim}, {ctx.p(out)});"]
    pragma = ctx.par(rows * dim)
    return (
        lines
        + ([pragma] if pragma else [])
        + [
            f"for (long i = 0; i < {rows}; i++) {{",
            f"    int64_t j = {ctx.p(idx)}[i];",
            f"    memcpy({ctx.p(out)} + i * {dim}, {ctx.p(w)} + j * {dim}, {dim} * sizeof({ctx.ct(out)}));",
            "}",
        ]
    )


def attention_probs(ctx: Ctx, node: Node, probs: str) -> list[str]:
    """``softmax(q @ k^T * scale + mask)`` (causal: ``j > i`` masked) into ``probs`` ``[..., lq, lk]``."""
    q, k, mask = node_input(node, "query"), node_input(node, "key"), node.inputs.get("mask")
    qs, ks = ctx.shape(q), ctx.shape(k)
    scale = node.attrs["scale"]
    scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
    lq, lk = qs[-2], ks[-2]
    pshape = (*np.broadcast_shapes(qs[:-2], ks[:-2]), lq, lk)
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
    lines += [ctx.par(rows * lk), f"for (long r = 0; r < {rows}; r++) {{", f"    {ctx.real} *v = {probs} + r * {lk};"]
    if ctx.real == "float":  # mt_exp_f32: vectorised, one exponential per element
        if node.attrs["causal"]:
            lines.append(f"    for (long j = r % {lq} + 1; j < {lk}; j++) v[j] = -INFINITY;")
        lines.append(f"    mt_softmax_row_f32(v, {lk});")
    else:
        causal = "if (j > r % " + str(lq) + ") v[j] = -INFINITY; " if node.attrs["causal"] else ""
        lines += [
            "    double mx = -INFINITY, s = 0;",
            f"    for (long j = 0; j < {lk}; j++) {{ {causal}if (v[j] > mx || v[j] != v[j]) mx = v[j]; }}",
        ]
        if lk <= _ROW_ON_STACK:  # each exponential computed once, kept in double
            lines += [
                f"    double e[{lk}];",
                f"    for (long j = 0; j < {lk}; j++) {{ e[j] = exp((double)v[j] - mx); s += e[j]; }}",
                f"    for (long j = 0; j < {lk}; j++) v[j] = ({ctx.real})(e[j] / s);",
            ]
        else:  # a row too long for the stack: the exponentials computed again
            lines += [
                f"    for (long j = 0; j < {lk}; j++) s += exp((double)v[j] - mx);",
                f"    for (long j = 0; j < {lk}; j++) v[j] = ({ctx.real})(exp((double)v[j] - mx) / s);",
            ]
    lines.append("}")
    return [line for line in lines if line]


_ROW_ON_STACK = 4096
"""Attention rows up to this many keys keep their exponentials in a stack array (32 KB of doubles)."""


def scaled_dot_product_attention(ctx: Ctx, node: Node) -> list[str]:
    q, k, v, out = node_input(node, "query"), node_input(node, "key"), node_input(node, "value"), node.output
    qs, ks, vs = ctx.shape(q), ctx.shape(k), ctx.shape(v)
    batch = tuple(np.broadcast_shapes(qs[:-2], ks[:-2]))
    pshape = (*batch, qs[-2], ks[-2])
    probs = ctx.scratch(math.prod(pshape))
    lines = attention_probs(ctx, node, probs)
    return lines + batched_gemm(ctx, probs, ctx.p(v), ctx.p(out), pshape, vs)


def _uniform(ctx: Ctx, index: str) -> str:
    seed, stream = ctx.random_stream()
    return f"mt_uniform({seed}, {stream}, (uint64_t)({index}))"


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
        f"for (long i = 0; i < {ctx.size(out)}; i++) "
        f"{ctx.p(out)}[i] = {_uniform(ctx, 'i')} >= {float_literal(p)} ? {scale} : 0;",
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
        f"for (long i = 0; i < {ctx.size(out)}; i++) "
        f"{ctx.p(out)}[i] = ({ctx.ct(out)})(INT64_C({low}) + (int64_t)({_uniform(ctx, 'i')} * {high - low}));",
    ]
