"""The op table of a backend: :func:`op_table`."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from . import conversions, derived, elementwise, linalg, nn, recurrent, reductions, shape_ops
from ._binding import Binding, Impl

__all__ = ["op_table"]

_FAMILIES: dict[str, ModuleType] = {
    "elementwise": elementwise, "reductions": reductions, "shape_ops": shape_ops, "nn": nn, "linalg": linalg,
    "conversions": conversions, "recurrent": recurrent,
}  # fmt: skip


def op_table(
    xp: Any,
    overrides: Mapping[str, Impl] | None = None,
    *,
    sequence: type = tuple,
    floats: tuple[Any, ...] | None = None,
    scan: Impl | None = None,
    autograd: bool = False,
    families: tuple[str, ...] = ("elementwise", "reductions", "shape_ops", "nn", "linalg", "conversions", "recurrent"),
) -> dict[str, Impl]:
    """A backend's op table: the shared implementations bound to ``xp``, with ``overrides`` winning.

    ``autograd`` backends also get the gradient-helper primitives derived from their ``vjp`` (see
    :mod:`.derived`) unless they override them. ``families`` picks the shared modules a namespace fits
    (PyTorch, whose namespace differs from NumPy's beyond elementwise functions, takes ``elementwise``,
    ``linalg`` and ``conversions``).

    >>> import numpy as np
    >>> table = op_table(np, {"exp": lambda input: "mine"})
    >>> exp = table["exp"]
    >>> exp(1.0), table["neg"] is np.negative
    ('mine', True)
    """
    overrides = dict(overrides or {})
    binding = Binding(xp, overrides, sequence=sequence, floats=floats, scan=scan)
    table: dict[str, Impl] = {"linear_grad_weight": derived.linear_grad_weight}
    for family in families:
        table.update(_FAMILIES[family].build(binding))
        binding.overrides, binding.shared = {**table, **overrides}, dict(table)
    if autograd:
        table.update(derived.derived_gradient_helpers(binding.overrides))
    table.update(overrides)
    return table
