"""Shape manipulation, indexing and creation. Layouts of views (transpose, basic indexing, broadcast,
slices of concat/split/pad) are computed by NumPy on a dummy array at compile time; the C code is a
strided copy. ``reshape``-like primitives alias their input (see ``ALIAS_PRIMITIVES``) and emit nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from mithril.extend import Node, rules
from mithril.extend import dtype_constant as dtype_constant_value

from ..context import Ctx, Emitter, contiguous_strides, literal, node_input, view_layout

__all__ = [
    "arange",
    "at_least_1d",
    "broadcast_to",
    "concat",
    "dtype_constant",
    "dynamic_update_slice",
    "flatten",
    "full",
    "gather",
    "index",
    "ones",
    "ones_like",
    "pad",
    "positions",
    "reshape",
    "shape",
    "size",
    "split",
    "squeeze",
    "swapaxes",
    "transpose",
    "unsqueeze",
    "zeros",
    "zeros_like",
]  # fmt: skip


def _alias(ctx: Ctx, node: Node) -> list[str]:
    return []  # the codegen points the output at the input's memory


reshape = flatten = squeeze = unsqueeze = at_least_1d = _alias


def copy_from_view(ctx: Ctx, node: Node, view: Callable[[np.ndarray], np.ndarray]) -> list[str]:
    """``output = view(input)`` as a strided copy."""
    x, out = node_input(node, "input"), node.output
    offset, strides, shape = view_layout(ctx.shape(x), view)
    assert tuple(shape) == ctx.shape(out), (shape, ctx.shape(out))
    return ctx.copy_view(ctx.p(out), (0, contiguous_strides(shape)), ctx.p(x), (offset, strides), shape)


def transpose(ctx: Ctx, node: Node) -> list[str]:
    axes = node.attrs["axes"]
    return copy_from_view(ctx, node, lambda a: np.transpose(a, None if axes is None else tuple(axes)))


def swapaxes(ctx: Ctx, node: Node) -> list[str]:
    return copy_from_view(ctx, node, lambda a: np.swapaxes(a, node.attrs["axis1"], node.attrs["axis2"]))


def broadcast_to(ctx: Ctx, node: Node) -> list[str]:
    shape = ctx.shape(node.output)
    return copy_from_view(ctx, node, lambda a: np.broadcast_to(a, shape))


def index(ctx: Ctx, node: Node) -> list[str]:
    key = node.attrs["key"]
    key = tuple(key) if isinstance(key, list) else key
    return copy_from_view(ctx, node, lambda a: a[key])


def _slices(rank: int, axis: int, start: int, stop: int) -> tuple[slice, ...]:
    return tuple(slice(start, stop) if i == axis else slice(None) for i in range(rank))


def _selector(key: tuple[slice, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """The view ``a[key]`` (a function for :func:`~mithril_backend_c.context.view_layout`)."""
    return lambda a: a[key]


def concat(ctx: Ctx, node: Node) -> list[str]:
    out = node.output
    shape = ctx.shape(out)
    axis = rules.normalize_axis(node.attrs["axis"], len(shape))
    lines, start = [], 0
    for i in range(node.attrs["n"]):
        x = node_input(node, f"input_{i}")
        xs = ctx.shape(x)
        stop = start + xs[axis]
        offset, strides, vshape = view_layout(shape, _selector(_slices(len(shape), axis, start, stop)))
        cast = f"({ctx.ct(out)})"
        lines += ctx.copy_view(ctx.p(out), (offset, strides), ctx.p(x), (0, contiguous_strides(xs)), vshape, cast)
        start += xs[axis]
    return lines


def split(ctx: Ctx, node: Node) -> list[str]:
    x = node_input(node, "input")
    shape = ctx.shape(x)
    axis = rules.normalize_axis(node.attrs["axis"], len(shape))
    lines, start = [], 0
    for out in node.outputs.values():
        os_ = ctx.shape(out)
        stop = start + os_[axis]
        offset, strides, vshape = view_layout(shape, _selector(_slices(len(shape), axis, start, stop)))
        lines += ctx.copy_view(ctx.p(out), (0, contiguous_strides(os_)), ctx.p(x), (offset, strides), vshape)
        start += os_[axis]
    return lines


def pad(ctx: Ctx, node: Node) -> list[str]:
    x, out = node_input(node, "input"), node.output
    widths = [tuple(p) for p in node.attrs["pad_width"]]
    xs, shape = ctx.shape(x), ctx.shape(out)
    lines = ctx.fill(out, literal(node.attrs["value"], ctx.np_dtype(out)))
    key = tuple(slice(b, b + n) for (b, _), n in zip(widths, xs, strict=True))
    offset, strides, vshape = view_layout(shape, lambda a: a[key])
    return lines + ctx.copy_view(ctx.p(out), (offset, strides), ctx.p(x), (0, contiguous_strides(xs)), vshape)


def gather(ctx: Ctx, node: Node) -> list[str]:
    """``np.take_along_axis``: the output walks the index's shape; the input axis comes from the index."""
    x, idx, out = node_input(node, "input"), node_input(node, "index"), node.output
    xs, ishape = ctx.shape(x), ctx.shape(idx)
    axis = rules.normalize_axis(node.attrs["axis"], len(xs))
    xstrides = list(contiguous_strides(xs))
    read = [0 if i == axis or xs[i] == 1 else s for i, s in enumerate(xstrides)]
    operands = [(0, contiguous_strides(ishape)), (0, contiguous_strides(ishape)), (0, read)]
    n = xs[axis]

    def body(i: list[str]) -> list[str]:
        return [
            f"int64_t j = {ctx.p(idx)}[{i[1]}];",
            f"{ctx.p(out)}[{i[0]}] = {ctx.p(x)}[{i[2]} + j * {xstrides[axis]}];",
        ]

    return ctx.check_indices(idx, n, "index") + ctx.loops(ishape, operands, body, simd=False)


def dynamic_update_slice(ctx: Ctx, node: Node) -> list[str]:
    """The input copied to the output (skipped when they are the same memory, as an exported program's
    KV cache updated in place), then the update copied to slots ``start .. start + T - 1`` of the axis:
    ``T`` rows per outer index, not a pass over every slot. ``start`` outside ``[0, size - T]`` returns
    ``MT_ERR_INDEX``."""
    x, update, start = (node_input(node, key) for key in ("input", "update", "start"))
    out = node.output
    shape, ushape = ctx.shape(out), ctx.shape(update)
    axis = rules.normalize_axis(node.attrs["axis"], len(shape))
    lines = ctx.check_indices(start, shape[axis] - ushape[axis] + 1, "start")
    nbytes = math.prod(shape) * ctx.np_dtype(out).itemsize
    if nbytes:
        lines.append(f"if ({ctx.p(out)} != {ctx.p(x)}) memcpy({ctx.p(out)}, {ctx.p(x)}, {nbytes});")
    if not math.prod(ushape):
        return lines
    strides = contiguous_strides(shape)
    cast = "" if ctx.ct(update) == ctx.ct(out) else f"({ctx.ct(out)})"
    dst = f"({ctx.p(out)} + {ctx.p(start)}[0] * {strides[axis]})"
    copy = ctx.copy_view(dst, (0, strides), ctx.p(update), (0, contiguous_strides(ushape)), ushape, cast)
    return [*lines, *copy]


def arange(ctx: Ctx, node: Node) -> list[str]:
    start, stop, step = node.attrs["start"], node.attrs["stop"], node.attrs["step"]
    if stop is None:
        start = 0
    out = node.output
    dt = ctx.np_dtype(out)
    values = np.arange(start, stop if stop is not None else node.attrs["start"], step).astype(dt)
    n = values.size
    if n == 0:
        return []
    return [
        f"for (long i = 0; i < {n}; i++) "
        f"{ctx.p(out)}[i] = ({ctx.ct(out)})({literal(start, dt)} + i * {literal(step, dt)});"
    ]


def _const_fill(value: int | None) -> Emitter:
    def emit(ctx: Ctx, node: Node) -> list[str]:
        fill = node.attrs.get("fill_value", value) if value is None else value
        return ctx.fill(node.output, literal(fill, ctx.np_dtype(node.output)))

    return emit


ones = ones_like = _const_fill(1)
zeros = zeros_like = _const_fill(0)
full = _const_fill(None)


def dtype_constant(ctx: Ctx, node: Node) -> list[str]:
    """Mithril's per-dtype constant (:func:`mithril.extend.dtype_constant`) of the output's float dtype, a literal."""
    dt = ctx.np_dtype(node.output)
    return ctx.fill(node.output, literal(dtype_constant_value(node.attrs["constant"], dt), dt))


def positions(ctx: Ctx, node: Node) -> list[str]:
    (n,) = ctx.shape(node.output)
    return [f"for (long i = 0; i < {n}; i++) {ctx.p(node.output)}[i] = ({ctx.ct(node.output)})i;"] if n else []


def shape(ctx: Ctx, node: Node) -> list[str]:
    dims = ctx.shape(node_input(node, "input"))
    return [f"{ctx.p(node.output)}[{i}] = {d};" for i, d in enumerate(dims)]


def size(ctx: Ctx, node: Node) -> list[str]:
    return [f"{ctx.p(node.output)}[0] = {math.prod(ctx.shape(node_input(node, 'input')))};"]
