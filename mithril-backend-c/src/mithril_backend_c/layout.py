"""The first pass of code generation: the dtype of every value, and the layout of an entry point's
argument struct (one field per input, cotangent and return, each with its static shape).

A return computed by a node (not an input, and not a view of another value) is written straight into its
field (:attr:`FieldLayout.direct`); the others are copied there at the end.

Example:
    >>> unique_name("in_x", {"in_x"})
    'in_x_1'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mithril.errors import DtypeError, ShapeError
from mithril.extend import Node, Value, escape
from mithril.types import Dtype

from .context import ALIAS_PRIMITIVES, C_TYPES, c_type
from .csource import CField

__all__ = ["FieldLayout", "lay_out_fields", "static_shape", "unique_name", "value_dtypes"]

_EXPLICIT_DTYPE = ("cast", "zeros", "ones", "full")


def value_dtypes(nodes: Sequence[Node], values: Iterable[Value], dtype: Dtype) -> dict[int, np.dtype]:
    """The NumPy dtype of every value: the kind's default, or an explicit ``dtype`` attribute
    (``cast``/``zeros``/``ones``/``full`` with an ``ml.Dtype``)."""
    default = {"float": np.dtype(dtype.value), "int": np.dtype(np.int64), "bool": np.dtype(np.bool_)}
    result: dict[int, np.dtype] = {}

    def assign(value: Value) -> None:
        if value.id in result:
            return
        producer = value.producer
        explicit = producer.attrs.get("dtype") if producer is not None else None
        if producer is not None and isinstance(explicit, Dtype) and producer.spec.name in _EXPLICIT_DTYPE:
            if explicit.value not in C_TYPES:
                raise DtypeError(f"CBackend cannot compute in {explicit.value} (at {producer.path or '<root>'})")
            result[value.id] = np.dtype(explicit.value)
            return
        result[value.id] = default[value.kind or "float"]

    for value in values:
        assign(value)
    for node in nodes:
        for read in node.inputs.values():
            if read is not None:
                assign(read)
        for value in node.outputs.values():
            assign(value)
    return result


def static_shape(value: Value, key: str) -> tuple[int, ...]:
    """The shape of ``value`` (named ``key`` in the error), which must be known at compile time."""
    shape = value.shape.static()
    if shape is None:
        where = value.producer.path if value.producer is not None and value.producer.path else "<root>"
        raise ShapeError(
            f"CBackend needs every shape at compile time, but {key!r} (at {where}) has shape {value.shape!r}; "
            "pass the input shapes to ml.compile(shapes=...)"
        )
    return tuple(shape)


def unique_name(base: str, used: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2`` ... the first not in ``used`` (which it is added to)."""
    name, i = base, 1
    while name in used:
        name, i = f"{base}_{i}", i + 1
    used.add(name)
    return name


@dataclass
class FieldLayout:
    """An entry point's argument struct: the ``inputs`` fields (inputs, then cotangents) and the fields of
    each group of ``returns``; ``pointers``: value id -> the input field it is read from (the first, when
    a value is passed twice); ``direct``: value id -> the return field it is computed into;
    ``input_keys``: value id -> its key among the function's inputs."""

    inputs: list[CField] = field(default_factory=list)
    returns: list[list[CField]] = field(default_factory=list)
    pointers: dict[int, CField] = field(default_factory=dict)
    direct: dict[int, CField] = field(default_factory=dict)
    input_keys: dict[int, str] = field(default_factory=dict)

    def pointer_lines(self) -> list[str]:
        """The declarations of the input pointers (``float *v3 = (float *)a->in_x;``)."""
        return [f"{c_type(f.dtype)} *v{vid} = ({c_type(f.dtype)} *)a->{f.name};" for vid, f in self.pointers.items()]


def lay_out_fields(
    fn: Any, param_names: frozenset[str], dtypes: dict[int, np.dtype], quantized: Mapping[str, str] | None = None
) -> FieldLayout:
    """The argument struct of function ``fn`` (a :class:`~mithril.extend.FunctionSpec`): fields named after
    the keys (made C identifiers, distinct), in order; inputs in ``param_names`` are parameters, those in
    ``quantized`` (key -> block format) passed quantized."""
    quantized = quantized or {}
    layout = FieldLayout()
    used: set[str] = set()

    def add_input(role_prefix: str, role: str, key: str, value: Value) -> None:
        quant = quantized.get(key, "") if role == "param" else ""
        f = CField(unique_name(f"{role_prefix}_{escape.c_identifier(key)}", used), key, role,
                   static_shape(value, key), dtypes[value.id], quant)  # fmt: skip
        layout.inputs.append(f)
        layout.pointers.setdefault(value.id, f)

    for key, value in fn.inputs.items():
        add_input("in", "param" if key in param_names else "data", key, value)
        layout.input_keys.setdefault(value.id, key)
    for key, value in fn.cotangents.items():
        add_input("cot", "cotangent", key, value)
    for g, group in enumerate(fn.returns):
        role_prefix = ("out", "grad")[g] if g < 2 else f"ret{g}"
        role = f"return{g}" if g > 1 else ("output", "gradient")[g]
        fields = []
        for key, value in group.items():
            f = CField(unique_name(f"{role_prefix}_{escape.c_identifier(key)}", used), key, role,
                       static_shape(value, key), dtypes[value.id])  # fmt: skip
            fields.append(f)
            producer = value.producer
            if (
                producer is not None
                and value.id not in layout.direct
                and value.id not in layout.pointers
                and producer.spec.name not in ALIAS_PRIMITIVES
            ):
                layout.direct[value.id] = f
        layout.returns.append(fields)
    return layout
