"""Host values: shape arithmetic computed in Python, not on the device.

A model that reshapes by another tensor's dims (``x.reshape((B * L, d))`` with ``B, L = q.shape[0],
q.shape[1]``), draws noise of a run-time shape or counts ``arange(offset, length)`` needs those dims as Python
ints while it runs, also inside ``jax.jit`` and ``torch.compile`` (where shapes are static, but an array made
from them is a traced value that ``reshape`` cannot take). The primitives that compute such values (``shape``,
``index`` of it, integer arithmetic, ``to_tuple``) then run the Python operations below instead of the
backend's array operations; :mod:`mithril.compiler.passes.host_values` decides which calls do.

One table serves every Python backend and also evaluates symbolic dims at build time
(:func:`mithril.framework.arithmetic.dim_value`), so the build-time and run-time rules are the same code.

Example:
    >>> HOST_OPERATIONS["multiply"](3, 4), HOST_OPERATIONS["floor_divide"](7, 2)
    (12, 3)
    >>> host_implementation("host_to_tuple")(2, 3, -1, n=3)
    (2, 3, -1)
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from .spec import PrimitiveSpec

__all__ = [
    "HOST_OPERATIONS",
    "HOST_PREFIX",
    "as_host_value",
    "base_attributes",
    "host_implementation",
    "with_run_time_attributes",
]

HOST_PREFIX = "host_"
"""Generated code names a host call ``host_<primitive>`` (``host_multiply``)."""


def _shape(input: Any) -> tuple[Any, ...]:
    return tuple(input.shape)


def _size(input: Any) -> Any:
    size = 1
    for dim in input.shape:
        size *= dim
    return size


def _index(input: Any, *, key: Any) -> Any:
    return input if key is Ellipsis else input[key]  # x[...] of an int (a Buffer of a dim) is the int


def _sequence(kind: type) -> Callable[..., Any]:
    def build(*inputs: Any, n: int) -> Any:
        return kind(inputs)

    return build


HOST_OPERATIONS: Mapping[str, Callable[..., Any]] = {
    "shape": _shape,
    "size": _size,
    "index": _index,
    "to_tuple": _sequence(tuple),
    "to_list": _sequence(list),
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "floor_divide": operator.floordiv,
    "power": operator.pow,
    "negative": operator.neg,
    "minimum": min,
    "maximum": max,
}
"""Primitive name -> the Python operation it is on host values (same inputs in key order, same attributes)."""


def as_host_value(value: Any) -> Any:
    """``value`` as a Python value: an array (a folded constant, or a shape given as data when running
    eagerly) becomes its int or tuple of ints; Python values stay themselves.

    >>> import numpy as np
    >>> as_host_value(np.array([2, 3])), as_host_value(np.int64(4))
    ((2, 3), 4)
    """
    if isinstance(value, (list, tuple)):
        return tuple(as_host_value(v) for v in value)
    if hasattr(value, "tolist") and not isinstance(value, (bool, int, float)):
        plain = value.tolist()
        return tuple(plain) if isinstance(plain, list) else plain
    return value


def host_implementation(name: str) -> Callable[..., Any] | None:
    """The Python operation generated code calls for ``host_<primitive>``; ``None`` for other names."""
    if not name.startswith(HOST_PREFIX):
        return None
    return HOST_OPERATIONS.get(name[len(HOST_PREFIX) :])


def base_attributes(
    spec: PrimitiveSpec, base: PrimitiveSpec, attrs: Mapping[str, Any], host: Mapping[str, Any]
) -> dict[str, Any]:
    """The attributes of the base primitive a variant call runs as: its own attributes the base has (not those
    only its shape rule reads, e.g. ``reshape_to``'s ``inferred``), and the host inputs' values."""
    return {
        **{k: v for k, v in attrs.items() if k in base.attributes},
        **{k: as_host_value(v) for k, v in host.items()},
    }


def with_run_time_attributes(
    spec: PrimitiveSpec, base_spec: PrimitiveSpec, base: Callable[..., Any]
) -> Callable[..., Any]:
    """The implementation of a :attr:`~mithril.primitives.spec.PrimitiveSpec.variant_of` primitive: the base
    primitive's implementation ``base``, given the host inputs as attributes (``reshape_to(x, shape)`` calls
    ``reshape(x, shape=shape)``)."""
    keys = spec.input_keys(spec.attributes)

    def call(*inputs: Any, **attrs: Any) -> Any:
        values = dict(zip(keys, inputs, strict=True))
        arrays = [values[k] for k in keys if k not in spec.host_inputs]
        return base(
            *arrays, **base_attributes(spec, base_spec, attrs, {k: values[k] for k in keys if k in spec.host_inputs})
        )

    call.__name__ = call.__qualname__ = spec.name
    return call
