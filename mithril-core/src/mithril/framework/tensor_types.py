"""``ml.Tensor`` and ``ml.DataType``: the tensor names of Mithril's published API.

``ml.Tensor`` is both a type and a value, as in Mithril:

- as a type, ``IOKey("x", type=ml.Tensor[float])`` constrains a key to float tensors (``ml.Tensor[int | float]``
  or a bare ``ml.Tensor`` leave the kind open);
- as a value, ``ml.Tensor(5)`` is a tensor constant wherever a connection takes a value
  (``Minimum().connect(left="x", right=ml.Tensor(5))``, ``IOKey(value=ml.Tensor([1.0, 2.0]))``,
  ``model.set_values(x=ml.Tensor(0.0))``, ``Concat().connect(input=[a, ml.Tensor([1.0])])``), and
  ``ml.Tensor[float](differentiable=True)`` declares a trainable float tensor without a value.

``ml.DataType`` stands for a backend's array type in annotations (``params: dict[str, ml.DataType]``).

Example:
    >>> import mithril as ml
    >>> ml.IOKey("x", type=ml.Tensor[float]).type
    'float'
    >>> ml.IOKey("x", type=ml.Tensor[int | float]).type is None
    True
    >>> ml.Tensor(5).value, ml.Tensor[float](differentiable=True).kind
    (5, 'float')
"""

from __future__ import annotations

import types
import typing
from typing import Any

from ..errors import ArgumentError, DtypeError
from ..shapes import describe_shape
from ..types import (  # DataType is defined (once) in mithril.types, as in Mithril
    DataType,
    Dtype,
    Kind,
    kind_of_python_value,
)

__all__ = ["DataType", "Tensor", "describe_shape", "parse_kind", "tensor_kind"]


class _Unset:
    """The value of a :class:`Tensor` declared without one (Mithril's ``TBD``)."""

    def __repr__(self) -> str:
        return "TBD"


_UNSET: Any = _Unset()


class _TensorOf:
    """``Tensor[float]``: a tensor whose elements are of the given Python type(s)."""

    __slots__ = ("element",)

    def __init__(self, element: Any) -> None:
        self.element = element

    def __repr__(self) -> str:
        return f"Tensor[{getattr(self.element, '__name__', self.element)!s}]"

    def __call__(self, value: Any = _UNSET, *, shape: Any = None, differentiable: bool | None = None) -> Tensor:
        """``Tensor[float](differentiable=True)``: a tensor value whose elements are of this type.

        >>> Tensor[float](differentiable=True).kind
        'float'
        """
        return Tensor(value, type=self.element, shape=shape, differentiable=differentiable)


class Tensor:
    """Mithril's tensor: a type (``ml.Tensor[float]``, ``ml.Tensor[int]``, ``ml.Tensor[bool]``, unions of them)
    and a value (``ml.Tensor(0.0)``, ``ml.Tensor([[1, 2]])``, ``ml.Tensor(float("-inf"))``).

    Args:
        value: the constant (a Python number, bool, nested list or array); left out, the tensor has no value yet
            (``Tensor[float](differentiable=True)`` declares a trainable input of a list key, as Mithril does).
        type: ``float``, ``int``, ``bool``, a union of them (kind left open; the default) or an ``ml.Dtype``.
        shape: a shape template (``["N", 4]``), as ``IOKey(shape=...)`` takes.
        differentiable: ``True`` makes the key a trainable float parameter (not with a value); a value makes it
            a constant, never differentiated.

    Connected to a key (``right=ml.Tensor(5)``, ``IOKey(value=...)``, ``set_values``), the key takes the
    constant, kind, shape and differentiability given here.

    >>> t = Tensor(2.5)
    >>> t.value, t.kind, t.differentiable
    (2.5, 'float', False)
    >>> Tensor(differentiable=True).kind
    'float'
    """

    __slots__ = ("differentiable", "kind", "shape", "value")

    def __class_getitem__(cls, element: Any) -> _TensorOf:
        return _TensorOf(element)

    def __init__(
        self, value: Any = _UNSET, type: Any = None, shape: Any = None, differentiable: bool | None = None
    ) -> None:
        where = f"Tensor({value!r})" if value is not _UNSET else "Tensor()"
        kind = tensor_kind(_TensorOf(type)) if type is not None and type is not Tensor else None
        if kind is not None:
            kind = parse_kind(kind, where)
        if differentiable is not None and not isinstance(differentiable, bool):
            raise ArgumentError(f"{where}: differentiable must be True, False or None, got {differentiable!r}")
        if value is not _UNSET:
            given = kind_of_python_value(value)
            if given is None:
                raise DtypeError(f"{where}: value must be a number, bool, nested list or array, got {value!r}")
            if differentiable:
                raise ArgumentError(f"{where}: a tensor with a value is a constant; differentiable=True takes no value")
            if kind is not None and kind != given and not (kind == "float" and given == "int"):
                raise DtypeError(f"{where}: value of kind {given} does not fit type {kind}")
            kind = kind or given
            differentiable = False
        elif differentiable:
            if kind not in (None, "float"):
                raise DtypeError(f"{where}: only float tensors can be differentiable, type is {kind}")
            kind = "float"
        self.value = value
        self.kind: Kind | None = kind
        self.shape = None if shape is None else list(shape)
        self.differentiable = differentiable

    @property
    def has_value(self) -> bool:
        """Whether this tensor holds a constant (``Tensor(0.0)``) or only declares one (``Tensor[float]()``)."""
        return self.value is not _UNSET

    def __repr__(self) -> str:
        if self.has_value:
            return f"Tensor({self.value!r})"
        return f"Tensor[{self.kind or 'int | float | bool'}](differentiable={self.differentiable})"


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
