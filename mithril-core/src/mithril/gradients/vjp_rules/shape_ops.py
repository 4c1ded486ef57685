"""VJP rules for shape manipulation and indexing: each moves the cotangent back to the input layout."""

from __future__ import annotations

from ...compiler.graph import Value
from ..context import Cotangents, GradContext
from ._common import wants


def _reshape_back(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.reshape_like(ctx.cotangent, ctx["input"])}


reshape = reshape_to = flatten = squeeze = unsqueeze = reshape_like = at_least_1d = _reshape_back


def sum_to_like(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.broadcast_to_like(ctx.cotangent, ctx["input"])}


def broadcast_to_like(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.sum_to_like(ctx.cotangent, ctx["input"])}


def transpose(ctx: GradContext) -> Cotangents:
    axes = ctx.attrs["axes"]
    if axes is None:  # reversing the axes is its own inverse
        return {"input": ctx.ops.transpose(ctx.cotangent)}
    rank = ctx.rank(ctx["input"])
    order = [ctx.axis(ctx["input"], a) for a in axes]
    inverse = tuple(sorted(range(rank), key=order.__getitem__))  # argsort of the permutation
    return {"input": ctx.ops.transpose(ctx.cotangent, axes=inverse)}


def swapaxes(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.swapaxes(ctx.cotangent, axis1=ctx.attrs["axis1"], axis2=ctx.attrs["axis2"])}


def broadcast_to(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.sum_to_like(ctx.cotangent, ctx["input"])}


def concat(ctx: GradContext) -> Cotangents:
    """Split the cotangent at the inputs' sizes along the concatenation axis: static sizes as ``split``'s
    attribute; sizes known only when the model runs as ``split_at``'s, summed from the inputs' shapes."""
    n = ctx.attrs["n"]
    if n == 1:
        return {"input_0": ctx.cotangent if wants(ctx, "input_0") else None}
    inputs = [ctx[f"input_{i}"] for i in range(n)]
    dims = [x.shape.ints() for x in inputs]
    static = all(d is not None for d in dims)
    if static:
        axis = ctx.axis(inputs[0], ctx.attrs["axis"])
        sizes = [d[axis] for d in dims]  # type: ignore[index]
        static = None not in sizes
    if not static:  # rank or a size not known now: split where the sizes add up when it runs
        axis = ctx.attrs["axis"]
        bounds = [ctx.ops.index(ctx.ops.shape(inputs[0]), key=axis)]
        for x in inputs[1:-1]:
            bounds.append(bounds[-1] + ctx.ops.index(ctx.ops.shape(x), key=axis))
        parts = ctx.ops.split_at(ctx.cotangent, ctx.ops.to_tuple(*bounds, n=len(bounds)), axis=axis, parts=n)
    else:
        bounds = [sum(sizes[: i + 1]) for i in range(n - 1)]
        parts = ctx.ops.split(ctx.cotangent, sections=bounds, axis=axis)
    return {f"input_{i}": part if wants(ctx, f"input_{i}") else None for i, part in enumerate(parts)}


def split(ctx: GradContext) -> Cotangents:
    """Concatenate the outputs' cotangents, zeros standing in for outputs that got none."""
    keys = list(ctx.outputs)
    given = [ctx.cotangents.get(k) for k in keys]
    if all(g is None for g in given):
        return {"input": None}
    parts = [g if g is not None else ctx.ops.zeros_like(ctx.outputs[k]) for k, g in zip(keys, given, strict=True)]
    if len(parts) == 1:
        return {"input": parts[0]}
    return {"input": ctx.ops.concat(*parts, n=len(parts), axis=ctx.attrs["axis"])}


def pad(ctx: GradContext) -> Cotangents:
    """Slice the padding off: ``g[before : size - after]`` on every axis."""
    key = tuple(slice(int(before), -int(after) if after else None) for before, after in ctx.attrs["pad_width"])
    return {"input": ctx.ops.index(ctx.cotangent, key=key)}


def index(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.index_grad(ctx.cotangent, ctx["input"], key=ctx.attrs["key"])}


def gather(ctx: GradContext) -> Cotangents:
    return {"input": ctx.ops.gather_grad(ctx.cotangent, ctx["index"], ctx["input"], axis=ctx.attrs["axis"])}


def dynamic_update_slice(ctx: GradContext) -> Cotangents:
    """``input``: the cotangent with the written slice zeroed; ``update``: the cotangent's slice, gathered at
    ``start + 0 .. T-1`` along the axis."""
    g, update, start = ctx.cotangent, ctx["update"], ctx["start"]
    axis = ctx.axis(ctx["input"], ctx.attrs["axis"])
    grads: dict[str, Value | None] = {"input": None, "update": None}
    if wants(ctx, "input"):
        grads["input"] = ctx.ops.dynamic_update_slice(g, ctx.ops.zeros_like(update), start, axis=axis)
    if wants(ctx, "update"):
        offsets = ctx.ops.add(ctx.ops.positions(update, axis=axis), ctx.ops.reshape(start, shape=(1,)))  # [T]
        column = ctx.ops.reshape(offsets, shape=tuple(-1 if i == axis else 1 for i in range(ctx.rank(update))))
        grads["update"] = ctx.ops.gather(g, ctx.ops.broadcast_to_like(column, update), axis=axis)
    return grads


RULES = {
    "reshape": reshape,
    "reshape_to": reshape_to,
    "split_at": split,
    "flatten": flatten,
    "squeeze": squeeze,
    "unsqueeze": unsqueeze,
    "reshape_like": reshape_like,
    "at_least_1d": at_least_1d,
    "sum_to_like": sum_to_like,
    "broadcast_to_like": broadcast_to_like,
    "transpose": transpose,
    "swapaxes": swapaxes,
    "broadcast_to": broadcast_to,
    "concat": concat,
    "split": split,
    "pad": pad,
    "index": index,
    "gather": gather,
    "dynamic_update_slice": dynamic_update_slice,
}
