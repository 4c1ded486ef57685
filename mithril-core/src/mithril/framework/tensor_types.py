"""``ml.Tensor`` and ``ml.DataType``: the type names of Mithril's published API.

``IOKey("x", type=ml.Tensor[float])`` constrains a key to float tensors (``ml.Tensor[int | float]`` or a bare
``ml.Tensor`` leave the kind open); ``ml.DataType`` stands for a backend's array type in annotations
(``params: dict[str, ml.DataType]``).

Example:
    >>> import mithril as ml
    >>> ml.IOKey("x", type=ml.Tensor[float]).type
    'float'
    >>> ml.IOKey("x", type=ml.Tensor[int | float]).type is None
    True
"""

from __future__ import annotations

import types
import typing
from typing import Any

from ..errors import DtypeError
from ..shapes import Shape
from ..types import DataType, Dtype, Kind  # DataType is defined (once) in mithril.types, as in Mithril

__all__ = ["Tensor", "DataType", "describe_shape", "parse_kind", "tensor_kind"]


class _TensorOf:
    """``Tensor[float]``: a tensor whose elements are of the given Python type(s)."""

    __slots__ = ("element",)

    def __init__(self, element: Any) -> None:
        self.element = element

    def __repr__(self) -> str:
        return f"Tensor[{getattr(self.element, '__name__', self.element)!s}]"


class Tensor:
    """Mithril's tensor type: ``ml.Tensor[float]``, ``ml.Tensor[int]``, ``ml.Tensor[bool]``, unions of them."""

    def __class_getitem__(cls, element: Any) -> _TensorOf:
        return _TensorOf(element)


def tensor_kind(type_: Any) -> Any:
    """``Tensor[float]`` -> ``"float"``; a union or a bare ``Tensor`` -> ``None`` (kind left open); anything
    else is returned unchanged."""
    if type_ is Tensor:
        return None
    if not isinstance(type_, _TensorOf):
        return type_
    element = type_.element
    if isinstance(element, types.UnionType) or typing.get_origin(element) is typing.Union:
        members = typing.get_args(element)
        return tensor_kind(_TensorOf(members[0])) if len(members) == 1 else None
    return {float: "float", int: "int", bool: "bool"}.get(element, element)


def describe_shape(shape: Shape) -> list[Any]:
    """A user-facing view of a symbolic shape: ints, ``"d<n>"`` symbols and ``"..."`` for a variadic."""
    prefix, var, suffix = shape.parts()
    items: list[Any] = [d.value if d.value is not None else repr(d) for d in prefix]
    if var is not None:
        items.append("...")
    items.extend(d.value if d.value is not None else repr(d) for d in suffix)
    return items


def parse_kind(type_: Any, where: str = "") -> Kind:
    """``float``/``int``/``bool``, their names, or an ``ml.Dtype`` -> a kind; anything else is a
    :class:`DtypeError` naming ``where``.

    >>> parse_kind("float32")
    'float'
    """
    if type_ in (float, "float"):
        return "float"
    if type_ in (int, "int"):
        return "int"
    if type_ in (bool, "bool"):
        return "bool"
    try:
        return Dtype.parse(type_).kind
    except DtypeError:
        names = ", ".join(d.value for d in Dtype)
        prefix = f"{where}: " if where else ""
        raise DtypeError(f"{prefix}type must be float, int, bool or a dtype ({names}), got {type_!r}") from None
