"""The binding of the shared implementations to one framework (:class:`Binding`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Binding", "Impl", "python_scan"]

Impl = Callable[..., Any]

_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")


def python_scan(xp: Any) -> Callable[..., Any]:
    """``jax.lax.scan``'s contract as a Python loop over the first axis of ``xs``, stacking with
    ``xp.stack``: ``scan(step, carry, xs)`` with ``step(carry, x) -> (carry, y)`` returns the last carry
    and every ``y`` stacked along a new first axis (each part of a tuple ``y`` on its own).

    >>> import numpy as np
    >>> python_scan(np)(lambda total, x: (total + x, total), 0, np.arange(4))
    (np.int64(6), array([0, 0, 1, 3]))
    """
    stack = xp.stack

    def scan(step: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any) -> tuple[Any, Any]:
        ys = []
        for t in range(xs.shape[0]):
            carry, y = step(carry, xs[t])
            ys.append(y)
        if ys and isinstance(ys[0], tuple):
            return carry, tuple(stack(part, 0) for part in zip(*ys, strict=True))
        return carry, stack(ys, 0)

    return scan


class Binding:
    """What the shared implementations are built from: the namespace ``xp``, the backend's overrides
    (which shared code calls too, e.g. the shared ``gelu`` uses the backend's ``erf``), the sequence type
    the framework takes for axes and shapes, its float dtypes and its loop construct ``scan`` (with
    ``jax.lax.scan``'s contract; default :func:`python_scan`).

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
        scan: Callable[..., Any] | None = None,
    ) -> None:
        self.xp = xp
        self.scan = scan if scan is not None else python_scan(xp)
        self.overrides = overrides
        self.shared: Mapping[str, Impl] = {}  # the shared implementations built so far (op_table fills it)
        self.sequence = sequence
        self.floats = floats if floats is not None else tuple(getattr(xp, n) for n in _FLOAT_NAMES if hasattr(xp, n))

        def axes(axis: Any) -> Any:
            """An axis argument in the framework's form: a sequence becomes ``sequence``, else as is."""
            return sequence(axis) if isinstance(axis, (list, tuple)) else axis

        self.axes = axes  # a plain function (no bound-method call on every reduction)

    def pick(self, name: str, default: Any) -> Any:
        """The backend's override of ``name``, else the shared implementation built so far, else
        ``default`` (a framework function or ``None``). An implementation that takes the backend instance
        first (``uses_backend``) is used through its ``without_backend`` attribute when it has one (JAX's
        int-to-float ``sigmoid`` -> ``jax.nn.sigmoid``), else passed over: shared code cannot call it."""
        for table in (self.overrides, self.shared):
            fn = table.get(name)
            if fn is not None and getattr(fn, "_mithril_uses_backend", False):
                fn = getattr(fn, "without_backend", None)
            if fn is not None:
                return fn
        return default

    def is_float(self, value: Any) -> bool:
        """Whether ``value`` is an array of a float dtype (Python scalars are not)."""
        dtype = getattr(value, "dtype", None)
        return dtype is not None and dtype in self.floats  # MLX dtypes cannot be compared with None
