"""VJP rules for shape manipulation and indexing: each moves the cotangent back to the input layout."""

from __future__ import annotations

from ...errors import UnsupportedPrimitiveError
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
    """Split the cotangent at the inputs' (static) sizes along the concatenation axis."""
    n = ctx.attrs["n"]
    first = ctx["input_0"]
    axis = ctx.axis(first, ctx.attrs["axis"])
    sizes = []
    for i in range(n):
        dims = ctx[f"input_{i}"].shape.ints()
        size = None if dims is None else dims[axis]
        if size is None:
            raise UnsupportedPrimitiveError(
                f"{ctx.node.path or '<root>'}: the gradient of 'concat' needs the size of input_{i} along axis "
                f"{axis}, which is not known at compile time; give its shape to ml.compile(shapes=...)"
            )
        sizes.append(size)
    bounds = [0]
    for size in sizes[:-1]:
        bounds.append(bounds[-1] + size)
    parts = ctx.ops.split(ctx.cotangent, sections=bounds[1:], axis=axis)
    return {f"input_{i}": part if wants(ctx, f"input_{i}") else None for i, part in enumerate(parts)}


def split(ctx: GradContext) -> Cotangents:
    """Concatenate the outputs' cotangents, zeros standing in for outputs that got none."""
    keys = list(ctx.outputs)
    given = [ctx.cotangents.get(k) for k in keys]
    if all(g is None for g in given):
        return {"input": None}
    parts = [g if g is not None else ctx.ops.zeros_like(ctx.outputs[k]) for k, g in zip(keys, given)]
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


RULES = {
    "reshape": reshape,
    "reshape_to": reshape_to,
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
}
