"""Symbolic shape values, as Mithril's published API writes them: ``shp = model.input.shape``,
``x.reshape((shp[0], shp[1], heads, -1))``, ``y.reshape(shp[:3])``.

``conn.shape`` is a :class:`ShapeRef`; indexing it gives :class:`DimRef` values (or a tuple of them for a
slice). They are resolved when a reshape is built: a dim known now becomes its int; without an explicit
``-1``, the last unknown one becomes ``-1`` (it follows from the element count); any other unknown dim used
at its own position becomes ``None`` ("keep the input's dim there", read at run time, so the model compiled
once runs for any batch and sequence length) and the reshaped tensor's dim there is unified with it.
Anything else is an error asking for static shapes.

Example:
    >>> from mithril.models import IOKey, Linear, Model
    >>> model = Model()
    >>> model |= Linear(8)(input=IOKey("input", shape=[2, 3, 4]), output="h")
    >>> model.h.shape[1].value, list(model.h.shape)
    (3, [2, 3, 8])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ArgumentError, ShapeError
from .keys import Connection

__all__ = ["ShapeRef", "KeyShape", "DimRef", "resolve_reshape", "reshape_target", "static_shape", "has_dim_refs"]


class KeyShape:
    """``IOKey("x").shape`` of a key given no template: indexing gives :class:`DimRef` values resolved when the
    reshape using them is built (``x`` must be a key of that model by then). Stands for "no template"
    elsewhere: equal to ``None`` and falsy."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, slice):
            if item.stop is None or any(v is not None and v < 0 for v in (item.start, item.stop)):
                raise ShapeError(f"IOKey({self.key.name!r}).shape[{item.start}:{item.stop}]: the rank is not known; use explicit indices (shp[:3])")
            return tuple(DimRef(self.key, i) for i in range(*item.indices(item.stop)))
        if not isinstance(item, int):
            raise ArgumentError(f"shape[...] takes an int or a slice, got {item!r}")
        return DimRef(self.key, item)

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, KeyShape)

    def __hash__(self) -> int:
        return hash(None)

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "None"


def _dims(conn: Connection) -> list[Any]:
    from .model import describe_shape

    return describe_shape(conn.value.shape)


def _rank(conn: Connection) -> int | None:
    prefix, var, suffix = conn.value.shape.parts()
    return None if var is not None else len(prefix) + len(suffix)


class DimRef:
    """Dim ``index`` of ``source``'s shape (``shp[0]``): a connection, or an ``IOKey`` resolved by its name in
    the model where it is used; ``value`` is its int when known."""

    __slots__ = ("source", "index")

    def __init__(self, source: Any, index: int) -> None:
        self.source, self.index = source, index

    def bound(self, model: Any) -> DimRef:
        """This dim with an ``IOKey`` source replaced by the connection to that key of the model the IOKey was
        connected in (when it contains ``model``), else of the nearest model from ``model`` up that is still
        being built (not frozen) and has the key. So ``linear.output.reshape(IOKey("input").shape[0], ...)`` reads the block's ``input``,
        not the ``input`` of the ``Linear`` child that produced ``linear.output``."""
        if isinstance(self.source, Connection):
            return self
        name, start = self.source.name, model
        scope = self.source.__dict__.get("_scope")
        scope = scope() if scope is not None else None
        ancestor = model if scope is not None else None
        while ancestor is not None and ancestor is not scope:
            ancestor = ancestor._parent
        if ancestor is not None and name in ancestor._interface():  # the model the IOKey was connected in
            return DimRef(Connection(ancestor, name), self.index)
        # the key is one of a model still being built (children are frozen: their own "input" is not meant)
        while model is not None and (name is None or model.is_frozen or name not in model._interface()):
            model = model._parent
        if model is None:
            raise ShapeError(f"{self!r}: neither {start._path()} nor a model containing it has a key {name!r} to read the shape of; connect the IOKey first")
        return DimRef(Connection(model, name), self.index)

    @property
    def value(self) -> int | None:
        if not isinstance(self.source, Connection):
            return None
        prefix, var, suffix = self.source.value.shape.parts()
        i = self.index
        if i >= 0:
            dims = prefix if var is not None else [*prefix, *suffix]
        else:
            dims, i = (suffix if var is not None else [*prefix, *suffix]), i
        try:
            return dims[i].value
        except IndexError:
            return None

    def __repr__(self) -> str:
        name = self.source.key if isinstance(self.source, Connection) else self.source.name
        return f"{name}.shape[{self.index}]"


class ShapeRef:
    """``conn.shape``: the symbolic shape of a connection. Indexing gives :class:`DimRef` values (usable in
    ``reshape``); iterating, ``len`` and ``==`` use the shape as known now (ints, ``"d<n>"`` symbols and
    ``"..."`` for an unknown number of dims)."""

    __slots__ = ("source",)

    def __init__(self, source: Connection) -> None:
        self.source = source

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, slice):
            rank = _rank(self.source)
            negative = any(v is not None and v < 0 for v in (item.start, item.stop))
            if rank is None and (item.stop is None or negative):
                raise ShapeError(f"{self.source!r}.shape[{item.start}:{item.stop}]: the rank is not known yet; use explicit indices (shp[:3])")
            return tuple(DimRef(self.source, i) for i in range(*item.indices(rank if rank is not None else item.stop)))
        if not isinstance(item, int):
            raise ArgumentError(f"shape[...] takes an int or a slice, got {item!r}")
        return DimRef(self.source, item)

    def __iter__(self) -> Iterator[Any]:
        return iter(_dims(self.source))

    def __len__(self) -> int:
        rank = _rank(self.source)
        if rank is None:
            raise ShapeError(f"{self.source!r}: the rank is not known yet")
        return rank

    def __eq__(self, other: object) -> bool:
        return _dims(self.source) == (list(other) if isinstance(other, (list, tuple)) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(_dims(self.source))


def has_dim_refs(values: Any) -> bool:
    """Whether a shape given by the user holds symbolic dims (``x.shape[0]``)."""
    return isinstance(values, (tuple, list)) and any(isinstance(v, DimRef) for v in values)


def reshape_target(target: Sequence[Any]) -> tuple[tuple[Any, ...], list[tuple[int, DimRef]]]:
    """The static ``reshape`` shape for ``target`` (ints, ``None`` = the input's dim there at run time, one
    ``-1``) and the ``(position, dim)`` pairs read from the input (see the module doc)."""
    resolved: list[Any] = []
    for entry in target:
        if isinstance(entry, DimRef):
            value = entry.value
            resolved.append(value if value is not None else entry)
        elif entry is None or isinstance(entry, int):
            resolved.append(entry)
        else:
            raise ArgumentError(f"reshape: entries are ints, -1, None or shape values (x.shape[i]), got {entry!r}")
    unknown = [j for j, entry in enumerate(resolved) if isinstance(entry, DimRef)]
    if unknown and -1 not in resolved:  # the last unknown dim follows from the element count
        resolved[unknown.pop()] = -1
    aligned: list[tuple[int, DimRef]] = []
    pending: list[int] = []
    for j in unknown:
        ref = resolved[j]
        if ref.index == j:  # the input's dim at the same position, read at run time
            aligned.append((j, ref))
            resolved[j] = None
        else:
            pending.append(j)
    if pending:
        raise ShapeError(
            f"reshape{tuple(map(repr, target))}: {[repr(target[j]) for j in pending]} are not known and not at "
            "their own position, so they cannot be read from the input at run time; give the shapes to ml.compile"
        )
    return tuple(resolved), aligned


def static_shape(owner: str, target: Sequence[Any]) -> tuple[int, ...]:
    """``target`` with every symbolic dim replaced by its int; a dim not known yet is an error (creation ops
    such as ``Randn(shape=...)`` need static shapes)."""
    result = []
    for entry in target:
        value = entry.value if isinstance(entry, DimRef) else entry
        if value is None:
            raise ShapeError(f"{owner}(shape={list(target)!r}): {entry!r} is not known yet; {owner} needs static shapes (give them to the model or use ints)")
        result.append(value)
    return tuple(result)


def resolve_reshape(x: Any, target: Sequence[Any]) -> Connection:
    """Build ``x.reshape(target)`` where ``target`` holds :class:`DimRef` values (see the module doc)."""
    from .arithmetic import _owner, build

    if not isinstance(x, Connection):
        raise ArgumentError(f"reshape with symbolic dims {list(target)!r} needs a connection of a model, got {x!r}")
    root = _owner(x)
    target = [entry.bound(x.model) if isinstance(entry, DimRef) else entry for entry in target]
    resolved, aligned = reshape_target(target)
    where = f"{root._path()}.reshape{tuple(map(repr, target))}"
    with root._transaction():
        out = build(root, "reshape", [x], {"shape": tuple(resolved)})
        # the result's dim j *is* the referenced dim (and so is x's dim j where it is read at run time)
        symbols: dict[str, object] = {}
        refs = [(j, entry) for j, entry in enumerate(target) if isinstance(entry, DimRef)]
        root._unify_template(out.value, [f"_d{j}" if isinstance(e, DimRef) else None for j, e in enumerate(target)], symbols, where)
        for k, (j, ref) in enumerate(refs):
            i = ref.index
            template = [None] * i + [f"_d{j}", (f"_r{k}", ...)] if i >= 0 else [(f"_r{k}", ...), f"_d{j}", *[None] * (-i - 1)]
            root._unify_template(ref.source.value, template, symbols, where)
        if aligned:
            width = max(j for j, _ in aligned) + 1
            template = [f"_d{j}" if any(j == a for a, _ in aligned) else None for j in range(width)]
            root._unify_template(x.value, [*template, ("_rx", ...)], symbols, where)
        return out
