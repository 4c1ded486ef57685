"""Connection arithmetic: ``a + b`` on connections adds a primitive to the model tree that owns them;
on IOKeys and constants alone it gives an :class:`~mithril.framework.keys.Expr`, built when connected.

Also reshapes with symbolic dims (:func:`resolve_reshape`) and indexing with connections
(:func:`tensor_index`): ``x[arange_out, argmax_out]`` picks ``x[a[i], b[i]]`` (NumPy advanced indexing with
integer tensors on the leading axes), built from ``flatten`` + ``embedding`` so every backend has it, with
gradients. The table and the indices may be IOKeys (OpenAI CLIP's bare parameter table).

This module registers itself with :func:`~mithril.framework.keys.register_expression_builder` when imported:
keys sit below the primitive models the arithmetic creates.

Example:
    >>> from mithril.models import IOKey, Model, Relu
    >>> model = Model()
    >>> model |= Relu()(input=IOKey("x", shape=[2, 3, 4]), output="h")
    >>> model |= Relu()(input=IOKey("i", type=int, shape=[2]), output="a")
    >>> model.h[model.a, model.a].shape
    [2, 4]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError, ModelConnectionError, ShapeError
from ..models.primitive import Primitive
from .keys import Connection, Deferred, DimRef, DtypeOf, Expr, IOKey, known_rank, register_expression_builder
from .symbolic import dim_value, is_dim, reshape_target

if TYPE_CHECKING:
    from .model import Model

__all__ = ["apply", "build", "has_tensor_key", "materialize", "resolve_reshape", "tensor_index", "unify_run_time_shape"]


def _owner(conn: Connection) -> Model:
    model = conn.model
    while model._parent is not None:
        model = model._parent
    return model


def _connections(args: Sequence[Any]) -> list[Connection]:
    found: list[Connection] = []
    for arg in args:
        if isinstance(arg, Connection):
            found.append(arg)
        elif isinstance(arg, (tuple, list)):
            found.extend(_connections(arg))
    return found


def apply(op: str, args: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """Add primitive ``op`` with ``args`` (connections, IOKeys, expressions or constants) to the common root
    model of the connections among them; without any connection, return the deferred :class:`Expr`."""
    if op == "index" and _has_dim_bound(attrs.get("key")):
        key = _known_bounds(attrs["key"])
        if _has_dim_bound(key):  # x[0:n] with n = y.shape[2] not known now: split where it runs
            return (
                build(_owner(args[0]), op, args, {"key": key})
                if isinstance(args[0], Connection)
                else Expr(op, tuple(args), {"key": key})
            )
        attrs = {**attrs, "key": key}
    if op == "index" and has_tensor_key(attrs.get("key")):
        found = _connections([args[0], attrs["key"]])
        if not found:  # IOKeys only: built where connected
            return Expr(op, tuple(args), attrs)
        return tensor_index(_common_owner(op, found), args[0], attrs["key"])
    if op == "reshape" and any(not isinstance(d, int) and d is not None for d in attrs["shape"]):
        if not isinstance(args[0], Connection):  # an expression of IOKeys: reshaped where it is built
            return Expr(op, tuple(args), attrs)
        return resolve_reshape(args[0], attrs["shape"])
    attrs = {k: (v.resolve() if isinstance(v, DtypeOf) else v) for k, v in attrs.items()}
    connections = _connections(args)
    if not connections:
        return Expr(op, tuple(args), attrs)
    return build(_common_owner(op, connections), op, args, attrs)


def _common_owner(op: str, connections: list[Connection]) -> Model:
    owners = {id(_owner(a)): _owner(a) for a in connections}
    if len(owners) != 1:
        raise ModelConnectionError(
            f"{op}: the connections belong to {len(owners)} different model trees; add the models to one "
            "parent first"
        )
    return next(iter(owners.values()))


def has_tensor_key(key: Any) -> bool:
    """Whether an index key holds tensors (connections, IOKeys or expressions), not only static entries."""
    parts = key if isinstance(key, tuple) else (key,)
    return any(isinstance(part, (Connection, IOKey, Expr)) for part in parts)


def build(root: Model, op: str, args: Sequence[Any], attrs: dict[str, Any]) -> Connection:
    """Add primitive ``op`` to ``root`` with ``args`` filling its input keys in order."""
    if op == "index" and has_tensor_key(attrs.get("key")):
        return tensor_index(root, args[0], attrs["key"])
    if op == "index" and _has_dim_bound(attrs.get("key")):
        return _slice_at_run_time(root, _key_connection(materialize(args[0], root), root), attrs["key"])
    if op == "reshape" and any(not isinstance(d, int) and d is not None for d in attrs["shape"]):
        return resolve_reshape(_key_connection(materialize(args[0], root), root), attrs["shape"])
    if op == "call_output":  # one output of a called model (a, b = block(input=x))
        args[0].add_to(root)
        return Connection(args[0].model, attrs["key"])
    targets = [materialize(arg, root) for arg in args]
    if op == "index" and isinstance(targets[0], tuple):  # a list-valued output (Split's): parts[0]
        part: Connection = targets[0][attrs["key"]]
        return part
    child = Primitive(op, **attrs)
    keys = child.input_keys
    root._add(child, dict(zip(keys, targets, strict=True)), extend=False, canonical_update=False)
    return Connection(child, "output")


def _has_dim_bound(key: Any) -> bool:
    """Whether an index key holds a slice bounded by a symbolic dim (``x[0:y.shape[2]]``)."""
    parts = key if isinstance(key, tuple) else (key,)
    return any(isinstance(p, slice) and (is_dim(p.start) or is_dim(p.stop)) for p in parts)


def _known_bounds(key: Any) -> Any:
    """``key`` with the slice bounds whose dims are known now as ints."""

    def known(part: Any) -> Any:
        if not isinstance(part, slice):
            return part
        start, stop = (dim_value(b) if is_dim(b) and dim_value(b) is not None else b for b in (part.start, part.stop))
        return slice(start, stop, part.step)

    return tuple(known(p) for p in key) if isinstance(key, tuple) else known(key)


def _slice_at_run_time(root: Model, x: Any, key: Any) -> Connection:
    """``x[..., start:stop, ...]`` with a bound known only when the model runs: the middle part of
    ``split_at(x, (start, stop), axis)``. One such slice, with the axes before it whole (``slice(None)``)."""
    parts = key if isinstance(key, tuple) else (key,)
    axis = next(j for j, p in enumerate(parts) if isinstance(p, slice) and (is_dim(p.start) or is_dim(p.stop)))
    part = parts[axis]
    if (
        part.step not in (None, 1)
        or part.stop is None
        or any(p != slice(None) for j, p in enumerate(parts) if j != axis)
    ):
        raise ArgumentError(
            f"x[{key!r}]: a slice bounded by a symbolic dim takes a stop, step 1, and whole slices (:) on the other "
            "axes; give the shapes to ml.compile to make the bound a number"
        )
    with root._transaction():
        sections = build(root, "to_tuple", [0 if part.start is None else part.start, part.stop], {"n": 2})
        split = Primitive("split_at", axis=axis, parts=3)
        root._add(split, {"input": x, "sections": sections}, extend=False, canonical_update=False)
        return Connection(split, "output_1")


def _key_connection(target: Any, model: Model) -> Any:
    """An IOKey as the connection to that key of ``model`` (made a key of it when it is not one yet)."""
    if not isinstance(target, IOKey) or target.name is None:
        return target
    if target.name not in model._interface():
        model.apply_iokey(model._graph.new_value(), target, f"{model._path()}.{target.name}")
    return Connection(model, target.name)


def materialize(target: Any, model: Model) -> Any:
    """Build an :class:`Expr` into ``model`` (IOKeys in it become keys of ``model``) and return the connection
    to its result; a symbolic dim (``x.shape[1]``, ``B * L``) is its int when known now, else the connection
    to the value computed from the shapes when the model runs; anything else is returned as it is."""
    if is_dim(target):
        known = dim_value(target)
        if known is not None:
            return known
        if isinstance(target, DimRef):
            return _dim_connection(target, model)
    if isinstance(target, Deferred) and not isinstance(target, Expr):  # a called model: Linear(4)(input=x)
        return target.build_into(model)  # type: ignore[attr-defined]
    if not isinstance(target, Expr):
        return target
    return build(model, target.op, target.args, target.attrs)


def _dim_connection(ref: DimRef, model: Model) -> Connection:
    """``index(shape(source), i)`` built into ``model``: the dim read when the model runs. An IOKey source not
    yet a key of any model becomes a key of ``model`` (``.connect(length=IOKey("input").shape[1])``)."""
    source: Any = ref.source
    try:
        source = ref.bound(model).source
    except ShapeError:
        if not isinstance(source, IOKey):
            raise
    shape = build(model, "shape", [source], {})
    return build(model, "index", [shape], {"key": ref.index})


def resolve_reshape(x: Any, target: Sequence[Any]) -> Connection:
    """Build ``x.reshape(target)`` where ``target`` holds :class:`DimRef` values (see the module doc)."""
    if not isinstance(x, Connection):
        raise ArgumentError(f"reshape with symbolic dims {list(target)!r} needs a connection of a model, got {x!r}")
    root = _owner(x)
    target = [entry.bound(x.model) if isinstance(entry, DimRef) else entry for entry in target]
    where = f"{root._path()}.reshape{tuple(map(repr, target))}"
    try:
        resolved, aligned = reshape_target(target, x)
    except ShapeError:  # dims neither known nor at their own position: the shape is computed when it runs
        return _reshape_at_run_time(root, x, target, where)
    with root._transaction():
        out = build(root, "reshape", [x], {"shape": tuple(resolved)})
        # the result's dim j *is* the referenced dim (and so is x's dim j where it is read at run time)
        symbols: dict[str, object] = {}
        refs = [(j, entry) for j, entry in enumerate(target) if isinstance(entry, DimRef)]
        root._unify_template(
            out.value, [f"_d{j}" if isinstance(e, DimRef) else None for j, e in enumerate(target)], symbols, where
        )
        for k, (j, ref) in enumerate(refs):
            i = ref.index
            template = (
                [None] * i + [f"_d{j}", (f"_r{k}", ...)] if i >= 0 else [(f"_r{k}", ...), f"_d{j}", *[None] * (-i - 1)]
            )
            root._unify_template(ref.source.value, template, symbols, where)
        if aligned:
            width = max(j for j, _ in aligned) + 1
            kept = [f"_d{j}" if any(j == a for a, _ in aligned) else None for j in range(width)]
            root._unify_template(x.value, [*kept, ("_rx", ...)], symbols, where)
        return out


def _reshape_at_run_time(root: Model, x: Connection, target: Sequence[Any], where: str) -> Connection:
    """``reshape_to(x, (d0, d1, ...))`` with the entries computed from the shapes when the model runs (host
    ints, also under a JIT); the result's dims are those entries where they are single dims or ints."""
    entries = [DimRef(x, j) if entry is None else entry for j, entry in enumerate(target)]
    # a key giving a dim (Segformer's height, width) holds an int
    entries = [IOKey(e.name, type=int) if isinstance(e, IOKey) and e.type is None and e.name else e for e in entries]
    with root._transaction():
        shape = build(root, "to_tuple", entries, {"n": len(entries)})
        out = build(root, "reshape_to", [x, shape], {"inferred": _minus_one(entries)})
        unify_run_time_shape(root, out.value, entries, where)
        return out


def _minus_one(entries: Sequence[Any]) -> int | None:
    return next((j for j, e in enumerate(entries) if isinstance(e, int) and e == -1), None)


def unify_run_time_shape(model: Model, value: Any, entries: Sequence[Any], where: str) -> None:
    """Give ``value`` (the result of a shape computed when the model runs: ``reshape_to``, ``randn_of``) the
    dims known now: an int entry is that dim, a single dim ``x.shape[i]`` of a connection *is* that dim of
    ``x``; other entries (``B * L``, ``-1``) stay unknown."""
    symbols: dict[str, object] = {}
    template: list[Any] = []
    refs = []
    for j, entry in enumerate(entries):
        known = dim_value(entry)
        if known is not None and known >= 0:
            template.append(known)
        elif isinstance(entry, DimRef) and isinstance(entry.source, Connection):
            template.append(f"_d{j}")
            refs.append((j, entry))
        else:
            template.append(None)
    model._unify_template(value, template, symbols, where)
    for k, (j, ref) in enumerate(refs):
        i = ref.index
        side = [None] * i + [f"_d{j}", (f"_r{k}", ...)] if i >= 0 else [(f"_r{k}", ...), f"_d{j}", *[None] * (-i - 1)]
        model._unify_template(ref.source.value, side, symbols, where)


# -- indexing with connections ------------------------------------------------------------
def tensor_index(root: Model, x: Any, key: Any) -> Connection:
    """``x[key]`` built into ``root``, where ``key`` holds integer tensors (connections, IOKeys or expressions;
    one or two, on the leading axes). ``x`` may be an IOKey too (a parameter table: ``IOKey("table")[ids]``);
    IOKeys become keys of ``root``."""
    parts = key if isinstance(key, tuple) else (key,)
    tensors = (Connection, IOKey, Expr)
    if not isinstance(x, tensors) or not all(isinstance(p, tensors) for p in parts) or len(parts) > 2:
        raise ArgumentError(
            f"indexing with tensors takes one or two integer tensors (connections or IOKeys) on the leading axes "
            f"(x[rows] or x[rows, cols]) of a connection or IOKey; got {x!r}[{key!r}]"
        )
    with root._transaction():  # nothing is left in root when a check below fails
        x = build(root, "index", [x], {"key": Ellipsis}) if isinstance(x, IOKey) else materialize(x, root)
        parts = tuple(materialize(p, root) for p in parts)
        rank = known_rank(x)
        if rank is None:
            raise ArgumentError(
                f"{x!r}[...]: indexing with tensors needs the rank of {x.key!r}; give its shape (IOKey(shape=...) or "
                "set_shapes)"
            )
        if not len(parts) <= rank <= len(parts) + 1:
            raise ArgumentError(
                f"{x!r}[...]: {len(parts)} index tensor(s) for a tensor of rank {rank}; indexing with tensors "
                f"takes rank {len(parts)} or {len(parts) + 1} (at most one trailing axis kept)"
            )
        table, flat_index = x, parts[0]
        if len(parts) == 2:
            cols = build(root, "index", [build(root, "shape", [x], {})], {"key": 1})
            flat_index = parts[0] * cols + parts[1]
            table = build(root, "flatten", [x], {"start_dim": 0, "end_dim": 1})
        if rank == len(parts):  # x[a, b] of a matrix: scalars, taken as rows of width 1
            picked = build(root, "embedding", [flat_index, build(root, "unsqueeze", [table], {"axis": -1})], {})
            return build(root, "squeeze", [picked], {"axis": -1})
        return build(root, "embedding", [flat_index, table], {})


register_expression_builder(apply, materialize)
