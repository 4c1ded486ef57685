"""Shape manipulation, indexing and array creation primitives."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...errors import ArgumentError
from ...numerics import DTYPE_CONSTANTS
from ...shapes import Dim, Shape, ShapeMismatch, unify, unify_dims
from ...types import Kind, kind_of_python_value
from ..shape_rules import (
    fixed,
    float_result,
    int_result,
    kind_of,
    normalize_axes,
    normalize_axis,
    promote,
    rank_from_host_shape,
    same_kind,
    scalar_output,
)
from ..spec import REQUIRED, PrimitiveSpec, ShapeIO, ShapeRule, TypeRule


def _with_input_dims(rule: Callable[[ShapeIO, Mapping[str, Any], list[Dim]], bool]) -> ShapeRule:
    """A shape rule that needs the input's rank: ``rule(io, attrs, dims)`` with the input's dims once its rank
    is known; until then the rule waits (``False``)."""

    @functools.wraps(rule)
    def run(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
        dims = io["input"].dims()
        return False if dims is None else rule(io, attrs, dims)

    return run


def _reshape(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """Entries of ``shape``: an int, ``-1`` (inferred, at most one) or ``None`` (copy the input dim there)."""
    target: Sequence[int | None] = attrs["shape"]
    if sum(1 for t in target if t == -1) > 1:
        raise ShapeMismatch(f"reshape shape {tuple(target)} has more than one -1")
    source = io["input"]
    src_dims = source.dims()
    # the leading dims known so far: all of them once the rank is known (a resolved variadic may leave
    # them in the suffix), else the prefix before the variadic
    leading = src_dims if src_dims is not None else source.parts()[0]
    out: list[Dim] = []
    for i, entry in enumerate(target):
        if entry is None:
            if i >= len(leading):
                return False  # the input dim at this position is not known yet
            out.append(leading[i])
        elif entry == -1:
            out.append(Dim())
        else:
            out.append(Dim(int(entry)))
    unify(io["output"], Shape(out))
    if src_dims is None:
        return False
    sizes = [d.value for d in src_dims]
    outs = [d.value for d in io["output"].dims()]  # type: ignore[union-attr]
    if None in sizes:
        if -1 in target:
            _infer_with_shared_dims(src_dims, io["output"].dims(), list(target).index(-1))  # type: ignore[arg-type]
        return all(v is not None for v in outs) and -1 not in target
    total = math.prod(sizes)  # type: ignore[arg-type]
    if -1 in target:
        known = math.prod(v for j, v in enumerate(outs) if target[j] != -1 and v is not None)
        if any(v is None for j, v in enumerate(outs) if target[j] != -1):
            return False
        if known == 0 or total % known:
            raise ShapeMismatch(f"cannot reshape {tuple(sizes)} into {tuple(target)}")
        io["output"].dims()[list(target).index(-1)].set(total // known)  # type: ignore[index]
        return True
    if None not in outs and math.prod(outs) != total:  # type: ignore[arg-type]
        raise ShapeMismatch(f"cannot reshape {tuple(sizes)} ({total} elements) into {tuple(outs)}")
    return None not in outs


def _reshape_to(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    """The output's rank is the shape tuple's length; ``inferred`` names the ``-1`` entry (given when the call is
    built), sized from the element count as ``reshape`` does once the other dims are known or shared."""
    if not rank_from_host_shape("shape")(io, attrs):
        return False
    j = attrs["inferred"]
    src, out = io["input"].dims(), io["output"].dims()
    if j is None or out is None or out[j].value is not None:
        return True
    if src is None:
        return False
    sizes = [d.value for d in src]
    if None in sizes:
        _infer_with_shared_dims(src, out, j)
        return out[j].value is not None
    others = [d.value for k, d in enumerate(out) if k != j]
    if None in others:
        return False
    known, total = math.prod(others), math.prod(sizes)  # type: ignore[arg-type]
    if known == 0 or total % known:
        raise ShapeMismatch(f"cannot reshape {tuple(sizes)} into {(*others[:j], -1, *others[j:])}")
    out[j].set(total // known)
    return True


def _infer_with_shared_dims(src_dims: Sequence[Dim], out_dims: Sequence[Dim], inferred: int) -> None:
    """Size the ``-1`` dim of a reshape whose input has unknown dims that the output keeps (the same symbols,
    e.g. ``x.reshape(x.shape[0], 64, -1)`` with a symbolic batch): they cancel out of the element count."""
    unknown = [d.find() for d in src_dims if d.value is None]
    known_out = 1
    for j, dim in enumerate(out_dims):
        if j == inferred:
            continue
        if dim.value is not None:
            known_out *= dim.value
            continue
        root = dim.find()
        match = next((k for k, u in enumerate(unknown) if u is root), None)
        if match is None:
            return  # an unknown output dim not in the input: not determined yet
        unknown.pop(match)
    if unknown:
        return  # an unknown input dim goes into the -1: not determined yet
    known_in = math.prod(d.value for d in src_dims if d.value is not None)
    if known_out == 0 or known_in % known_out:
        raise ShapeMismatch(f"cannot reshape {[d.value for d in src_dims]} into {[d.value for d in out_dims]}")
    out_dims[inferred].set(known_in // known_out)


@_with_input_dims
def _flatten(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    start, end = (
        normalize_axis(attrs["start_dim"], max(len(dims), 1)),
        normalize_axis(attrs["end_dim"], max(len(dims), 1)),
    )
    middle = dims[start : end + 1]
    sizes = [d.value for d in middle]
    merged = Dim(math.prod(sizes)) if None not in sizes else Dim()  # type: ignore[arg-type]
    if len(middle) == 1:
        merged = middle[0]
    unify(io["output"], Shape([*dims[:start], merged, *dims[end + 1 :]]))
    return None not in sizes


def _transpose(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    axes = attrs["axes"]
    dims = io["input"].dims()
    if dims is None:
        if axes is None:
            return False
        unify(io["input"], Shape([Dim() for _ in axes]))
        dims = io["input"].dims()
    assert dims is not None
    order = list(range(len(dims)))[::-1] if axes is None else [normalize_axis(a, len(dims)) for a in axes]
    if sorted(order) != list(range(len(dims))):
        raise ShapeMismatch(f"axes {axes} are not a permutation of {len(dims)} axes")
    unify(io["output"], Shape([dims[a] for a in order]))
    return True


@_with_input_dims
def _swapaxes(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    a, b = normalize_axis(attrs["axis1"], len(dims)), normalize_axis(attrs["axis2"], len(dims))
    order = list(dims)
    order[a], order[b] = order[b], order[a]
    unify(io["output"], Shape(order))
    return True


@_with_input_dims
def _squeeze(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    axis = attrs["axis"]
    if axis is None:
        if any(d.value is None for d in dims):
            return False
        unify(io["output"], Shape([d for d in dims if d.value != 1]))
        return True
    axes = normalize_axes(axis, len(dims))
    for a in axes:
        try:
            dims[a].set(1)
        except ShapeMismatch:
            raise ShapeMismatch(f"cannot squeeze axis {a} of size {dims[a].value}") from None
    unify(io["output"], Shape([d for i, d in enumerate(dims) if i not in axes]))
    return True


@_with_input_dims
def _unsqueeze(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    axis = attrs["axis"]
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    rank = len(dims) + len(axes)
    norm = sorted(normalize_axis(a, rank) for a in axes)
    result: list[Dim] = []
    it = iter(dims)
    for i in range(rank):
        result.append(Dim(1) if i in norm else next(it))
    unify(io["output"], Shape(result))
    return True


def _broadcast_to(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """Output is ``shape``; the input must broadcast to it as in NumPy (each of its trailing dims 1 or equal)."""
    target = list(attrs["shape"])
    unify(io["output"], fixed(target))
    dims = io["input"].dims()
    if dims is None:
        return False  # checked once the input's rank is known
    if len(dims) > len(target):
        raise ShapeMismatch(f"input of rank {len(dims)} cannot broadcast to shape {target} of rank {len(target)}")
    offset = len(target) - len(dims)
    for i, dim in enumerate(dims):
        size = dim.value
        if size is not None and size not in (1, target[offset + i]):
            shown = [d.value for d in dims]
            raise ShapeMismatch(f"input shape {shown} does not broadcast to {target}: axis {i} has size {size}")
    return all(dim.value is not None for dim in dims)


def _concat(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    inputs = [io[f"input_{i}"] for i in range(attrs["n"])]
    all_dims = [s.dims() for s in inputs]
    known = next((d for d in all_dims if d is not None), None)
    if known is None:
        return False
    rank = len(known)
    axis = normalize_axis(attrs["axis"], rank)
    for s in inputs:
        unify(s, Shape([Dim() for _ in range(rank)]))
    all_dims = [s.dims() for s in inputs]
    for dims in all_dims[1:]:
        for i in range(rank):
            if i != axis:
                unify_dims(all_dims[0][i], dims[i])  # type: ignore[index]
    sizes = [d[axis].value for d in all_dims]  # type: ignore[index]
    total = Dim(sum(sizes)) if None not in sizes else Dim()  # type: ignore[arg-type]
    out = list(all_dims[0])  # type: ignore[arg-type]
    out[axis] = total
    unify(io["output"], Shape(out))
    return None not in sizes


def _split_outputs(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    sections = attrs["sections"]
    count = sections if isinstance(sections, int) else len(sections) + 1
    return tuple(f"output_{i}" for i in range(count))


@_with_input_dims
def _split(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    axis = normalize_axis(attrs["axis"], len(dims))
    size = dims[axis].value
    sections = attrs["sections"]
    if size is None:
        return False
    if isinstance(sections, int):
        if size % sections:
            raise ShapeMismatch(f"axis {axis} of size {size} does not split into {sections} equal sections")
        bounds = [size // sections * i for i in range(sections + 1)]
    else:
        bounds = [0, *sections, size]
    for i in range(len(bounds) - 1):
        out = list(dims)
        out[axis] = Dim(max(0, min(bounds[i + 1], size) - min(bounds[i], size)))
        unify(io[f"output_{i}"], Shape(out))
    return True


def _split_at_outputs(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(f"output_{i}" for i in range(attrs["parts"]))


@_with_input_dims
def _split_at(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    """Each part has the input's dims but along ``axis``, where its size is known only when it runs."""
    axis = normalize_axis(attrs["axis"], len(dims))
    for key in _split_at_outputs(attrs):
        unify(io[key], Shape([Dim() if j == axis else d for j, d in enumerate(dims)]))
    return True


def _pad(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    dims = io["input"].dims()
    widths = [tuple(p) for p in attrs["pad_width"]]
    if dims is None:
        unify(io["input"], Shape([Dim() for _ in widths]))
        dims = io["input"].dims()
    assert dims is not None
    if len(widths) != len(dims):
        raise ShapeMismatch(f"pad_width has {len(widths)} entries for an input of rank {len(dims)}")
    out = [Dim(d.value + a + b) if d.value is not None else Dim() for d, (a, b) in zip(dims, widths, strict=True)]
    unify(io["output"], Shape(out))
    return all(d.value is not None for d in dims)


def _expand_key(key: Any, rank: int) -> list[Any]:
    """One entry per input axis (plus ``None`` for each new axis), Ellipsis expanded."""
    items = list(key) if isinstance(key, tuple) else [key]
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if used > rank:
        raise ShapeMismatch(f"index {key!r} has {used} entries for rank {rank}")
    if items.count(Ellipsis) > 1:
        raise ShapeMismatch(f"index {key!r} has more than one Ellipsis")
    if Ellipsis in items:
        pos = items.index(Ellipsis)
        items[pos : pos + 1] = [slice(None)] * (rank - used)
    return items + [slice(None)] * (rank - sum(1 for k in items if k is not None))


def index_dims(dims: Sequence[Dim], key: Any) -> list[Dim]:
    """Result dims of NumPy basic indexing with a static key (ints, slices, None, Ellipsis).

    A full slice keeps the (possibly symbolic) input dim; other slices need a known size.
    """
    out: list[Dim] = []
    axis = 0
    for item in _expand_key(key, len(dims)):
        if item is None:
            out.append(Dim(1))
            continue
        dim = dims[axis]
        axis += 1
        size = dim.value
        if isinstance(item, slice):
            if item == slice(None):
                out.append(dim)
            else:
                out.append(Dim(len(range(*item.indices(size)))) if size is not None else Dim())
        elif isinstance(item, int) and not isinstance(item, bool):
            if size is not None and not -size <= item < size:
                raise ShapeMismatch(f"index {item} is out of range for an axis of size {size}")
        else:
            raise ShapeMismatch(f"unsupported static index entry {item!r}; use ints, slices, None or ...")
    return out


@_with_input_dims
def _index(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    unify(io["output"], Shape(index_dims(dims, attrs["key"])))
    return all(d.value is not None for d in dims)


def _gather(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    dims, idx = io["input"].dims(), io["index"].dims()
    if dims is None or idx is None:
        return False
    if len(dims) != len(idx):
        raise ShapeMismatch(f"gather: index rank {len(idx)} != input rank {len(dims)}")
    unify(io["output"], io["index"])
    return True


def _dynamic_update_slice(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """The output has the input's shape; ``update`` has its rank and dims, but at most as many along ``axis``;
    ``start`` holds one int (shape ``[]`` or ``[1]``)."""
    unify(io["output"], io["input"])
    start = io["start"].dims()
    if start is not None and (len(start) > 1 or (start and start[0].value not in (None, 1))):
        raise ShapeMismatch(f"dynamic_update_slice: start must hold one int (shape [] or [1]), got shape {io['start']}")
    dims, upd = io["input"].dims(), io["update"].dims()
    if dims is None or upd is None:
        return False
    if len(dims) != len(upd):
        raise ShapeMismatch(f"dynamic_update_slice: update rank {len(upd)} != input rank {len(dims)}")
    axis = normalize_axis(int(attrs["axis"]), len(dims))
    for i, (d, u) in enumerate(zip(dims, upd, strict=True)):
        if i != axis:
            unify_dims(d, u)
        elif d.value is not None and u.value is not None and u.value > d.value:
            raise ShapeMismatch(
                f"dynamic_update_slice: update has {u.value} entries along axis {axis}, the input only {d.value}"
            )
    return all(d.value is not None for d in (*dims, *upd)) and start is not None


def _check_dtype_constant(attrs: Mapping[str, Any]) -> None:
    if attrs["constant"] not in DTYPE_CONSTANTS:
        raise ArgumentError(
            f"dtype_constant: constant must be one of {list(DTYPE_CONSTANTS)}, got {attrs['constant']!r}"
        )


def _creation_shape(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    unify(io["output"], fixed([int(s) for s in attrs["shape"]]))
    return True


def _arange_shape(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    if stop is None:
        start, stop = 0, start
    unify(io["output"], fixed([max(0, math.ceil((stop - start) / step))]))
    return True


def _arange_between_shape(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    for key in ("start", "stop", "step"):
        unify(io[key], Shape())
    unify(io["output"], Shape([Dim()]))
    return True


def _arange_between_kind(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> dict[str, Kind] | None:
    if any(kinds.get(k) is None for k in ("start", "stop", "step")):
        return None
    return {"output": "float" if "float" in (kinds["start"], kinds["stop"], kinds["step"]) else "int"}


def _attr_kind(*names: str) -> TypeRule:
    def rule(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> dict[str, Kind] | None:
        values = [attrs[n] for n in names if attrs.get(n) is not None]
        return {"output": "float" if any(kind_of_python_value(v) == "float" for v in values) else "int"}

    return rule


def _full_kind(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> dict[str, Kind] | None:
    dtype = attrs.get("dtype")
    if dtype is not None:
        return {"output": dtype if isinstance(dtype, str) else dtype.kind}
    return {"output": kind_of_python_value(attrs.get("fill_value", 0.0)) or "float"}


def _shape_of(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    rank = io["input"].rank
    if rank is None:
        return False
    unify(io["output"], fixed([rank]))
    return True


def _size_of(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    unify(io["output"], Shape())
    return True


@_with_input_dims
def _positions_shape(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    length = Dim()
    unify(io["output"], Shape([length]))
    unify_dims(length, dims[normalize_axis(attrs["axis"], len(dims))])
    return True


def _like_shape(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    unify(io["output"], io["input"])
    return True


@_with_input_dims
def _at_least_1d(io: ShapeIO, attrs: Mapping[str, Any], dims: list[Dim]) -> bool:
    unify(io["output"], Shape([Dim(1)]) if not dims else io["input"])
    return True


def _unique(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    """A 1-D output whose length (the number of distinct values) is known only at run time."""
    unify(io["output"], Shape([Dim()]))
    return True


def _item(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    dims = io["input"].dims()
    if dims is not None:
        sizes = [d.value for d in dims]
        if None not in sizes and math.prod(sizes) != 1:  # type: ignore[arg-type]
            raise ShapeMismatch(f"item needs an input of one element, got shape {sizes}")
    unify(io["output"], Shape())
    return dims is not None


def _sequence_inputs(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(f"input_{i}" for i in range(attrs["n"]))


def _sequence(io: ShapeIO, attrs: Mapping[str, Any]) -> bool:
    """``n`` values -> a Python sequence of length ``n`` (its shape as an array, for scalars). The members may
    be tensors too (Mithril's ``ToList`` of tensors, read by ``Concat``)."""
    unify(io["output"], fixed([attrs["n"]]))
    return True


def _sequence_spec(name: str, kind: str) -> PrimitiveSpec:
    return PrimitiveSpec(
        name,
        _sequence_inputs,
        _sequence,
        promote,
        attributes={"n": REQUIRED},
        differentiable=(),
        doc=f"{kind}(input_0, ..., input_(n-1)): a Python {kind} of n scalars (a model output: not differentiable)",
    )


_SHAPE_ATTR = {"shape": REQUIRED}
_CREATE = {"shape": REQUIRED, "dtype": None}


def _split_kinds(outputs: Callable[[Mapping[str, Any]], Sequence[str]]) -> TypeRule:
    """Type rule: every output (as ``outputs(attrs)`` names them) is of the input's kind."""

    def rule(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> dict[str, Kind] | None:
        kind = kinds.get("input")
        return None if kind is None else {k: kind for k in outputs(attrs)}

    return rule


SPECS = (
    PrimitiveSpec(
        "reshape",
        ("input",),
        _reshape,
        same_kind,
        attributes=_SHAPE_ATTR,
        doc="input.reshape(shape); None keeps the input dim at that position",
    ),
    PrimitiveSpec(
        "reshape_to",
        ("input", "shape"),
        _reshape_to,
        kind_of("input"),
        attributes={"inferred": None},
        differentiable=("input",),
        input_kinds={"shape": ("int",)},
        host_inputs=frozenset({"shape"}),
        variant_of="reshape",
        doc="input.reshape(shape) with shape a tuple of ints computed at run time (from other tensors' shapes); "
        "inferred: the position of its -1 entry, if any",
    ),
    PrimitiveSpec(
        "flatten",
        ("input",),
        _flatten,
        same_kind,
        attributes={"start_dim": 1, "end_dim": -1},
        doc="merge axes start_dim..end_dim (torch.flatten)",
    ),
    PrimitiveSpec(
        "transpose", ("input",), _transpose, same_kind, attributes={"axes": None}, doc="np.transpose(input, axes)"
    ),
    PrimitiveSpec(
        "swapaxes",
        ("input",),
        _swapaxes,
        same_kind,
        attributes={"axis1": -2, "axis2": -1},
        doc="np.swapaxes(input, axis1, axis2)",
    ),
    PrimitiveSpec("squeeze", ("input",), _squeeze, same_kind, attributes={"axis": None}, doc="np.squeeze(input, axis)"),
    PrimitiveSpec(
        "unsqueeze", ("input",), _unsqueeze, same_kind, attributes={"axis": REQUIRED}, doc="np.expand_dims(input, axis)"
    ),
    PrimitiveSpec(
        "broadcast_to",
        ("input",),
        _broadcast_to,
        same_kind,
        attributes=_SHAPE_ATTR,
        doc="np.broadcast_to(input, shape)",
    ),
    PrimitiveSpec(
        "concat",
        lambda attrs: tuple(f"input_{i}" for i in range(attrs["n"])),
        _concat,
        promote,
        attributes={"axis": 0, "n": 2},
        doc="np.concatenate([input_0, ..., input_{n-1}], axis)",
    ),
    PrimitiveSpec(
        "split",
        ("input",),
        _split,
        _split_kinds(_split_outputs),
        attributes={"sections": REQUIRED, "axis": 0},
        outputs=_split_outputs,
        doc="np.split(input, sections, axis): sections is a count of equal parts or a list of split indices",
    ),
    PrimitiveSpec(
        "split_at",
        ("input", "sections"),
        _split_at,
        _split_kinds(_split_at_outputs),
        attributes={"axis": 0, "parts": REQUIRED},
        outputs=_split_at_outputs,
        input_kinds={"sections": ("int",)},
        host_inputs=frozenset({"sections"}),
        variant_of="split",
        doc="np.split(input, sections, axis) with the split indices computed at run time; parts = len(sections) + 1",
    ),
    PrimitiveSpec(
        "pad",
        ("input",),
        _pad,
        same_kind,
        attributes={"pad_width": REQUIRED, "value": 0.0},
        doc="np.pad(input, pad_width, constant_values=value); pad_width is ((before, after), ...) per axis",
    ),
    PrimitiveSpec(
        "index",
        ("input",),
        _index,
        same_kind,
        attributes={"key": REQUIRED},
        doc="input[key] with a static basic-indexing key",
    ),
    PrimitiveSpec(
        "gather",
        ("input", "index"),
        _gather,
        kind_of("input"),
        attributes={"axis": -1},
        differentiable=("input",),
        input_kinds={"index": ("int",)},
        doc="np.take_along_axis(input, index, axis)",
    ),
    PrimitiveSpec(
        "dynamic_update_slice",
        ("input", "update", "start"),
        _dynamic_update_slice,
        same_kind,
        attributes={"axis": 0},
        differentiable=("input", "update"),
        input_kinds={"start": ("int",)},
        doc="jax.lax.dynamic_update_slice_in_dim(input, update, start, axis): input with update written at "
        "start .. start + update.shape[axis] - 1 along axis (start a run-time int; out of range is an error)",
    ),
    PrimitiveSpec(
        "arange",
        (),
        _arange_shape,
        _attr_kind("start", "stop", "step"),
        attributes={"start": 0, "stop": None, "step": 1},
        doc="np.arange(start, stop, step)",
    ),
    PrimitiveSpec(
        "arange_between",
        ("start", "stop", "step"),
        _arange_between_shape,
        _arange_between_kind,
        differentiable=(),
        host_inputs=frozenset({"start", "stop", "step"}),
        variant_of="arange",
        doc="np.arange(start, stop, step) with bounds computed at run time (e.g. a sequence length)",
    ),
    PrimitiveSpec("ones", (), _creation_shape, _full_kind, attributes=_CREATE, doc="np.ones(shape)"),
    PrimitiveSpec("zeros", (), _creation_shape, _full_kind, attributes=_CREATE, doc="np.zeros(shape)"),
    PrimitiveSpec(
        "full",
        (),
        _creation_shape,
        _full_kind,
        attributes={"shape": REQUIRED, "fill_value": REQUIRED, "dtype": None},
        doc="np.full(shape, fill_value)",
    ),
    PrimitiveSpec("zeros_like", ("input",), _like_shape, same_kind, differentiable=(), doc="np.zeros_like(input)"),
    PrimitiveSpec("ones_like", ("input",), _like_shape, same_kind, differentiable=(), doc="np.ones_like(input)"),
    PrimitiveSpec(
        "dtype_constant",
        ("input",),
        scalar_output,
        float_result,
        attributes={"constant": "min_positive_normal"},
        differentiable=(),
        check_attributes=_check_dtype_constant,
        doc="mithril.numerics.dtype_constant(constant, input.dtype) as a 0-d tensor of input's float dtype (the "
        "backend's float dtype for int or bool input): a robust function's threshold, e.g. np.finfo(dtype).tiny",
    ),
    PrimitiveSpec(
        "positions",
        ("input",),
        _positions_shape,
        int_result,
        attributes={"axis": -1},
        differentiable=(),
        doc="np.arange(input.shape[axis]): int positions along one axis (the length may be known only at run time)",
    ),
    PrimitiveSpec("shape", ("input",), _shape_of, int_result, differentiable=(), doc="np.array(input.shape)"),
    PrimitiveSpec("size", ("input",), _size_of, int_result, differentiable=(), doc="np.array(input.size)"),
    PrimitiveSpec(
        "at_least_1d", ("input",), _at_least_1d, same_kind, doc="np.atleast_1d(input): a scalar becomes shape [1]"
    ),
    PrimitiveSpec(
        "unique",
        ("input",),
        _unique,
        same_kind,
        differentiable=(),
        doc="np.unique(input): the sorted distinct values of the flattened input (length known at run time)",
    ),
    PrimitiveSpec(
        "item",
        ("input",),
        _item,
        same_kind,
        differentiable=(),
        doc="input.item(): the one element of input as a Python number (not differentiable)",
    ),
    _sequence_spec("to_list", "list"),
    _sequence_spec("to_tuple", "tuple"),
)
