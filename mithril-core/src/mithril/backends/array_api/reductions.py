"""Reductions over ``axis`` (``None``, an int or a sequence) with ``keepdim``, and softmax on an axis.

Example:
    >>> import numpy as np
    >>> from mithril.backends.array_api import Binding
    >>> build(Binding(np, {}))["sum"](np.ones((2, 3)), axis=[0], keepdim=False).tolist()
    [2.0, 2.0, 2.0]
"""

from __future__ import annotations

from typing import Any

from ...primitives import uses_backend
from ._binding import Binding, Impl

__all__ = ["build"]


def build(b: Binding) -> dict[str, Impl]:
    """The reduction implementations bound to ``b.xp``."""
    xp, axes = b.xp, b.axes
    sum_, mean_, max_, min_, prod_, var_ = xp.sum, xp.mean, xp.max, xp.min, xp.prod, xp.var
    argmax_, argmin_, exp, log = xp.argmax, xp.argmin, xp.exp, xp.log

    def sum(input: Any, *, axis: Any, keepdim: bool) -> Any:
        """``sum(input, axis, keepdims=keepdim)``"""
        return sum_(input, axis=axes(axis), keepdims=keepdim)

    def mean(input: Any, *, axis: Any, keepdim: bool) -> Any:
        """``mean(input, axis, keepdims=keepdim)``"""
        return mean_(input, axis=axes(axis), keepdims=keepdim)

    def max(input: Any, *, axis: Any, keepdim: bool) -> Any:
        """``max(input, axis, keepdims=keepdim)``"""
        return max_(input, axis=axes(axis), keepdims=keepdim)

    def min(input: Any, *, axis: Any, keepdim: bool) -> Any:
        """``min(input, axis, keepdims=keepdim)``"""
        return min_(input, axis=axes(axis), keepdims=keepdim)

    def prod(input: Any, *, axis: Any, keepdim: bool) -> Any:
        """``prod(input, axis, keepdims=keepdim)``"""
        return prod_(input, axis=axes(axis), keepdims=keepdim)

    def var(input: Any, *, axis: Any, keepdim: bool, correction: int) -> Any:
        """``var(input, axis, keepdims=keepdim, ddof=correction)``"""
        return var_(input, axis=axes(axis), keepdims=keepdim, ddof=correction)

    @uses_backend
    def argmax(backend: Any, input: Any, *, axis: int | None, keepdim: bool) -> Any:
        """``argmax(input, axis, keepdims=keepdim)`` in the backend's int dtype; ``axis=None``: flattened."""
        return argmax_(input, axis=axis, keepdims=keepdim).astype(backend.native_dtype("int"))

    @uses_backend
    def argmin(backend: Any, input: Any, *, axis: int | None, keepdim: bool) -> Any:
        """``argmin(input, axis, keepdims=keepdim)`` in the backend's int dtype; ``axis=None``: flattened."""
        return argmin_(input, axis=axis, keepdims=keepdim).astype(backend.native_dtype("int"))

    def softmax(input: Any, *, axis: int) -> Any:
        """``exp(x - logsumexp(x, axis))``, computed stably (max subtracted first)."""
        shifted = exp(input - max_(input, axis=axis, keepdims=True))
        return shifted / sum_(shifted, axis=axis, keepdims=True)

    def log_softmax(input: Any, *, axis: int) -> Any:
        """``x - logsumexp(x, axis)``, computed stably."""
        shifted = input - max_(input, axis=axis, keepdims=True)
        return shifted - log(sum_(exp(shifted), axis=axis, keepdims=True))

    return {f.__name__: f for f in (sum, mean, max, min, prod, var, argmax, argmin, softmax, log_softmax)}
