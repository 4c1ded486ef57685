"""Symbolic shape values, as Mithril's published API writes them: ``shp = model.input.shape``,
``x.reshape((shp[0], shp[1], heads, -1))``, ``y.reshape(shp[:3])``.

``conn.shape`` is a :class:`ShapeRef`; indexing it gives :class:`DimRef` values (or a tuple of them for a
slice). They are resolved when a reshape is built: a dim known now becomes its int; without an explicit
``-1``, the last unknown one becomes ``-1`` (it follows from the element count); any other unknown dim used
at its own position becomes ``None`` ("keep the input's dim there", read at run time, so the model compiled
once runs for any batch and sequence length) and the reshaped tensor's dim there is unified with it.
Other symbolic entries (a dim at another position, ``B * L``, ``n // 2 + 1``) are read at run time: the reshape
becomes ``reshape_to`` with a shape tuple computed in Python from the tensors' shapes
(:mod:`mithril.primitives.host`), so it also runs under ``jax.jit``.

Example:
    >>> from mithril.models import IOKey, Linear, Model
    >>> model = Model()
    >>> model |= Linear(8)(input=IOKey("input", shape=[2, 3, 4]), output="h")
    >>> model.h.shape[1].value, list(model.h.shape)
    (3, [2, 3, 8])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentError, ShapeError
from ..primitives.host import HOST_OPERATIONS
from .keys import Connection, Deferred, DimRef, Expr, IOKey, KeyShape, ShapeRef

__all__ = ["DimRef", "KeyShape", "ShapeRef", "dim_value", "has_dim_refs", "is_dim", "reshape_target", "static_shape"]


def is_dim(entry: Any) -> bool:
    """Whether ``entry`` is a symbolic dim: ``x.shape[i]``, or arithmetic on such dims and ints (``B * L``)."""
    if isinstance(entry, DimRef):
        return True
    return (
        isinstance(entry, Expr)
        and entry.op in HOST_OPERATIONS
        and any(is_dim(a) for a in entry.args)
        and all(is_dim(a) or (isinstance(a, int) and not isinstance(a, bool)) for a in entry.args)
    )


def dim_value(entry: Any) -> int | None:
    """The int a symbolic dim has when every dim in it is known now (an int stays itself), else ``None``.

    >>> dim_value(7)
    7
    """
    if isinstance(entry, int) and not isinstance(entry, bool):
        return entry
    if isinstance(entry, DimRef):
        return entry.value
    if is_dim(entry):
        values = [dim_value(a) for a in entry.args]
        return None if None in values else HOST_OPERATIONS[entry.op](*values, **entry.attrs)
    return None


def has_dim_refs(values: Any) -> bool:
    """Whether a shape given by the user holds symbolic dims (``x.shape[0]``, ``B * L``)."""
    return isinstance(values, (tuple, list)) and any(is_dim(v) for v in values)


def reshape_target(target: Sequence[Any], input: Any = None) -> tuple[tuple[Any, ...], list[tuple[int, DimRef]]]:
    """The static ``reshape`` shape for ``target`` (ints, ``None`` = the input's dim there at run time, one
    ``-1``) and the ``(position, dim)`` pairs read from the input (see the module doc). ``input`` is the
    connection reshaped: only its own dims can be read at their position (``None`` when it is not known:
    then no dim is)."""
    resolved: list[Any] = []
    for entry in target:
        if is_dim(entry):
            value = dim_value(entry)
            resolved.append(value if value is not None else entry)
        elif entry is None or isinstance(entry, int):
            resolved.append(entry)
        elif isinstance(entry, (Connection, Deferred, IOKey)):  # an int value of the model: read when it runs
            resolved.append(entry)
        else:
            raise ArgumentError(
                f"reshape: entries are ints, -1, None or shape values (x.shape[i], B * L), got {entry!r}"
            )
    unknown = [
        j for j, entry in enumerate(resolved) if is_dim(entry) or isinstance(entry, (Connection, Deferred, IOKey))
    ]
    if unknown and -1 not in resolved:  # the last unknown dim follows from the element count
        resolved[unknown.pop()] = -1
    aligned: list[tuple[int, DimRef]] = []
    pending: list[int] = []
    for j in unknown:
        ref = resolved[j]
        if isinstance(ref, DimRef) and ref.index == j and _same_tensor(ref.source, input):  # read at run time
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


def _same_tensor(source: Any, input: Any) -> bool:
    return isinstance(source, Connection) and isinstance(input, Connection) and source.value is input.value


def static_shape(owner: str, target: Sequence[Any]) -> tuple[int, ...]:
    """``target`` with every symbolic dim replaced by its int; a dim not known yet is an error (creation ops
    such as ``Randn(shape=...)`` need static shapes)."""
    result = []
    for entry in target:
        value = dim_value(entry) if is_dim(entry) else entry
        if value is None:
            raise ShapeError(
                f"{owner}(shape={list(target)!r}): {entry!r} is not known yet; {owner} needs static shapes (give them "
                "to the model or use ints)"
            )
        result.append(value)
    return tuple(result)
