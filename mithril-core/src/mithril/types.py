"""Data types: the user-facing dtypes (``ml.float32``) and the logical kinds used by type inference.

A *dtype* is a concrete storage type a backend allocates. A *kind* (``bool``, ``int``, ``float``) is
what the logical layer reasons about: the backend maps a kind to a dtype at compile time
(``float`` -> the backend's ``dtype``, ``int`` -> ``int64`` or ``int32``, ``bool`` -> ``bool``).

``DataType`` is the type variable standing for a backend's array type in annotations
(``backend: ml.Backend[DataType]``, ``params: dict[str, DataType]``), as in Mithril's published API.

Example:
    >>> import mithril as ml
    >>> ml.float32.kind
    'float'
    >>> from mithril.types import DataType
    >>> dict[str, DataType]
    dict[str, ~DataType]
"""

from __future__ import annotations

import enum
from typing import TypeVar

from .errors import DtypeError

__all__ = ["KINDS", "DataType", "Dtype", "Kind", "kind_of_python_value", "promote_kinds"]

DataType = TypeVar("DataType")
"""A backend's array type (``np.ndarray``, ``jax.Array``, ``torch.Tensor``, ``mx.array``), for annotations:
``ml.Backend[DataType]`` is a backend whose arrays are ``DataType``; ``backend.DataType`` is the concrete type."""

Kind = str  # one of "bool", "int", "float"
KINDS: tuple[Kind, ...] = ("bool", "int", "float")
_KIND_ORDER = {k: i for i, k in enumerate(KINDS)}


class Dtype(enum.Enum):
    """A concrete element type. ``Dtype.float32.name == "float32"``."""

    bool_ = "bool"
    uint8 = "uint8"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"

    @property
    def kind(self) -> Kind:
        """The logical kind (``bool``, ``int`` or ``float``) of this dtype."""
        if self is Dtype.bool_:
            return "bool"
        return "float" if self.value.startswith(("float", "bfloat")) else "int"

    @classmethod
    def parse(cls, value: object) -> Dtype:
        """Accept a ``Dtype``, its name (``"float32"``) or an object with such a ``name``/``str``.

        >>> Dtype.parse("float64") is Dtype.float64
        True
        """
        if isinstance(value, Dtype):
            return value
        text = value if isinstance(value, str) else getattr(value, "name", None) or getattr(value, "__name__", None)
        text = str(text if text is not None else value).rsplit(".", 1)[-1]
        for member in cls:
            if member.value == text:
                return member
        names = ", ".join(m.value for m in cls)
        raise DtypeError(f"unknown dtype {value!r}; expected one of: {names}")

    def __repr__(self) -> str:
        return f"ml.{self.value}"


def promote_kinds(*kinds: Kind) -> Kind:
    """The result kind of arithmetic on values of the given kinds (bool < int < float)."""
    return max(kinds, key=_KIND_ORDER.__getitem__)


def kind_of_python_value(value: object) -> Kind | None:
    """Kind of a Python scalar (or nested list) constant, ``None`` if it is not numeric."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, (list, tuple)) and value:
        kinds = [kind_of_python_value(v) for v in value]
        if None in kinds:
            return None
        return promote_kinds(*kinds)  # type: ignore[arg-type]
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        text = str(dtype)
        if "bool" in text:
            return "bool"
        return "float" if "float" in text else "int"
    return None
