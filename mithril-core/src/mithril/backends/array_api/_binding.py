"""The binding of the shared implementations to one framework (:class:`Binding`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Binding", "Impl"]

Impl = Callable[..., Any]

_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")


class Binding:
    """What the shared implementations are built from: the namespace ``xp``, the backend's overrides
    (which shared code calls too, e.g. the shared ``gelu`` uses the backend's ``erf``), the sequence type
    the framework takes for axes and shapes, and its float dtypes.

    >>> import numpy as np
    >>> Binding(np, {}).pick("erf", None) is None, Binding(np, {}).is_float(np.ones(2))
    (True, True)
    """

    def __init__(
        self,
        xp: Any,
        overrides: Mapping[str, Impl],
        *,
        sequence: type = tuple,
        floats: tuple[Any, ...] | None = None,
    ) -> None:
        self.xp = xp
        self.overrides = overrides
        self.sequence = sequence
        self.floats = floats if floats is not None else tuple(getattr(xp, n) for n in _FLOAT_NAMES if hasattr(xp, n))

        def axes(axis: Any) -> Any:
            """An axis argument in the framework's form: a sequence becomes ``sequence``, else as is."""
            return sequence(axis) if isinstance(axis, (list, tuple)) else axis

        self.axes = axes  # a plain function (no bound-method call on every reduction)

    def pick(self, name: str, default: Any) -> Any:
        """The backend's override of ``name``, else ``default`` (a framework function or ``None``)."""
        return self.overrides.get(name, default)

    def is_float(self, value: Any) -> bool:
        """Whether ``value`` is an array of a float dtype (Python scalars are not)."""
        dtype = getattr(value, "dtype", None)
        return dtype is not None and dtype in self.floats  # MLX dtypes cannot be compared with None
