"""The two number systems optimizers and schedules are written against, with the same method names:
:class:`FloatMath` computes Python floats (a schedule's value at a step, shown by ``fit``), and
:class:`GraphMath` emits Mithril primitives into a compiled graph (the update inside ``train_step``).

An update or schedule is written once over ``math`` (``math.sqrt(v)``, ``math.minimum(a, b)``; ``+ - * /``
work on both kinds of value), so the value ``fit`` reports and the value the compiled step uses come from
the same formula.

Example:
    >>> FloatMath().minimum(FloatMath().sqrt(16.0), 3.0)
    3.0
"""

from __future__ import annotations

import math as _m
from typing import Any

__all__ = ["FloatMath", "GraphMath"]


class FloatMath:
    """Python floats."""

    def sqrt(self, x: float) -> float:
        return _m.sqrt(x)

    def cos(self, x: float) -> float:
        return _m.cos(x)

    def tanh(self, x: float) -> float:
        return _m.tanh(x)

    def floor(self, x: float) -> float:
        return float(_m.floor(x))

    def minimum(self, a: float, b: float) -> float:
        return min(a, b)

    def maximum(self, a: float, b: float) -> float:
        return max(a, b)

    def power(self, base: float, exponent: float) -> float:
        return float(float(base) ** exponent)

    def sign(self, x: float) -> float:
        return float((x > 0) - (x < 0))

    def where(self, condition: Any, a: float, b: float) -> float:
        return a if condition else b

    def less(self, a: float, b: float) -> bool:
        return a < b


class GraphMath:
    """Primitives emitted into ``graph`` (under ``path``, shown in generated code and errors)."""

    def __init__(self, graph: Any, path: str = "optimizer", *, in_place: bool = False) -> None:
        self.graph, self.path, self.in_place = graph, path, in_place  # in_place: the step consumes its state

    def _emit(self, primitive: str, *args: Any, **attrs: Any) -> Any:
        return self.graph.emit(primitive, *args, path=self.path, **attrs)

    def sqrt(self, x: Any) -> Any:
        return self._emit("sqrt", x)

    def cos(self, x: Any) -> Any:
        return self._emit("cos", x)

    def tanh(self, x: Any) -> Any:
        return self._emit("tanh", x)

    def floor(self, x: Any) -> Any:
        return self._emit("floor", x)

    def minimum(self, a: Any, b: Any) -> Any:
        return self._emit("minimum", a, b)

    def maximum(self, a: Any, b: Any) -> Any:
        return self._emit("maximum", a, b)

    def power(self, base: Any, exponent: Any) -> Any:
        return self._emit("power", base, exponent)

    def sign(self, x: Any) -> Any:
        return self._emit("sign", x)

    def where(self, condition: Any, a: Any, b: Any) -> Any:
        return self._emit("where", condition, a, b)

    def less(self, a: Any, b: Any) -> Any:
        return self._emit("less", a, b)

    def adam_update(
        self, param: Any, grad: Any, m: Any, v: Any, step_size: Any, eps_hat: Any, shrink: Any = None, **attrs: Any
    ) -> tuple[Any, Any, Any]:
        """One ``adam_update`` call: ``(param', m', v')`` (see :func:`mithril.optim.optimizers.adam_step`)."""
        return self._emit("adam_update", param, grad, m, v, step_size, eps_hat, shrink, in_place=self.in_place, **attrs)  # type: ignore[no-any-return]

    def square_sum(self, x: Any) -> Any:
        """``sum(x ** 2)`` over every axis (a scalar): the gradient-norm clipping's term."""
        return self._emit("sum", self._emit("square", x))
