"""Python's operators as primitives: the methods behind ``a + b``, ``-a`` or ``a.exp()`` on the two kinds
of symbolic values, model expressions (:class:`mithril.framework.keys.Operators`) and the compiler's
values in gradient rules (:class:`mithril.compiler.graph.Value`). A method made here calls its object's
``_emit(primitive, *operands, **attributes)``, which adds the primitive where that kind of value lives.

Example:
    >>> class Traced:
    ...     def _emit(self, primitive, *operands, **attributes):
    ...         return primitive, operands, attributes
    ...     __rsub__ = reflected("subtract")
    ...     sum = reduction("sum")
    >>> t = Traced()
    >>> 1 - t == ("subtract", (1, t), {})
    True
    >>> t.sum(axis=0)[2]
    {'axis': 0, 'keepdim': False}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["binary", "reduction", "reflected", "unary"]


def binary(primitive: str) -> Callable[[Any, Any], Any]:
    """``self <op> other`` (``__add__``, ``x.ne(y)``...): ``primitive(self, other)``."""

    def method(self: Any, other: Any) -> Any:
        return self._emit(primitive, self, other)

    return method


def reflected(primitive: str) -> Callable[[Any, Any], Any]:
    """Python's reflected operator (``__radd__`` for ``other + self``...): ``primitive(other, self)``."""

    def method(self: Any, other: Any) -> Any:
        return self._emit(primitive, other, self)

    return method


def unary(primitive: str) -> Callable[[Any], Any]:
    """``-self``, ``self.exp()``...: ``primitive(self)``."""

    def method(self: Any) -> Any:
        return self._emit(primitive, self)

    return method


def reduction(primitive: str) -> Callable[..., Any]:
    """``self.sum(axis=None, keepdim=False)`` and the like: ``primitive(self, axis=axis, keepdim=keepdim)``."""

    def method(self: Any, axis: Any = None, keepdim: bool = False) -> Any:
        return self._emit(primitive, self, axis=axis, keepdim=keepdim)

    return method
