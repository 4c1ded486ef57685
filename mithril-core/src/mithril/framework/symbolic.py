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

from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentError, ShapeError
from .keys import DimRef, KeyShape, ShapeRef

__all__ = ["ShapeRef", "KeyShape", "DimRef", "reshape_target", "static_shape", "has_dim_refs"]


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
