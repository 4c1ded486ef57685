"""Small helpers shared by the rule modules (all of them emit ordinary primitives)."""

from __future__ import annotations

from collections.abc import Callable

from ...compiler.graph import Value
from ..context import GradContext

__all__ = ["as_float", "reduced_axes", "reduced_count", "unbroadcast", "unreduce", "wants"]


def wants(ctx: GradContext, key: str) -> bool:
    """Whether input ``key`` can take a gradient: present, not a constant, and not int/bool."""
    value = ctx.inputs.get(key)
    return value is not None and not value.is_constant and value.kind not in ("int", "bool")


def unbroadcast(ctx: GradContext, **grads: Callable[[], Value]) -> dict[str, Value | None]:
    """``{key: sum_to_like(make(), ctx[key])}`` for the inputs that want a gradient; ``make`` is only
    called (and its nodes only emitted) for those. Used by every broadcasting binary rule."""
    out: dict[str, Value | None] = {}
    for key, make in grads.items():
        if not wants(ctx, key):
            out[key] = None
            continue
        grad, like = make(), ctx[key]
        same = like.shape.static() is not None and like.shape.static() == grad.shape.static()
        out[key] = grad if same else ctx.ops.sum_to_like(grad, like)
    return out


def unreduce(ctx: GradContext, value: Value) -> Value:
    """Put the reduced axes of a reduction's output (or cotangent) back as size-1 axes, so it broadcasts
    against the input: ``[a, c]`` -> ``[a, 1, c]`` for ``axis=1``."""
    if ctx.attrs["keepdim"] or ctx.attrs["axis"] is None:  # kept dims, or a scalar that broadcasts anyway
        return value
    expanded: Value = ctx.ops.unsqueeze(value, axis=reduced_axes(ctx))
    return expanded


def reduced_axes(ctx: GradContext) -> int | tuple[int, ...] | None:
    """A reduction's axes as the backward graph names them: normalised and sorted when the input's rank
    is known at compile time; otherwise the attribute as given (``None`` or possibly negative axes), which
    names the same axes at run time, as ``unsqueeze`` (``expand_dims``) counts its axes in its output,
    whose rank is the input's."""
    axis = ctx.attrs["axis"]
    if axis is None or ctx["input"].shape.rank is None:
        return axis  # type: ignore[no-any-return]
    return ctx.axes(ctx["input"], axis)


def as_float(ctx: GradContext, mask: Value) -> Value:
    """A bool mask as 1.0 / 0.0."""
    floats: Value = ctx.ops.where(mask, 1.0, 0.0)
    return floats


def reduced_count(ctx: GradContext) -> Value | float:
    """How many input elements fall into each output element of a reduction (a Python number when the
    reduced dims are static, else ``size(input) / size(output)`` computed at run time)."""
    x = ctx["input"]
    dims = x.shape.ints()
    sizes = [dims[a] for a in ctx.axes(x, ctx.attrs["axis"])] if dims is not None else [None]
    if None not in sizes:
        n = 1
        for s in sizes:
            n *= s  # type: ignore[operator]
        return float(n)
    ratio: Value = ctx.ops.cast(ctx.ops.size(x), dtype="float") / ctx.ops.cast(ctx.ops.size(ctx.output), dtype="float")
    return ratio
