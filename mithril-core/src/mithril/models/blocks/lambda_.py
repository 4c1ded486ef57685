"""``Lambda``: wrap a Python function of backend arrays as a model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import validation
from ...framework.keys import IOKey
from ...framework.model import Model
from ..primitive import Primitive

__all__ = ["Lambda"]


class Lambda(Model):
    """``output = fn(input)``, with ``fn`` written against the backend's array API.

    The output has the input's shape unless ``same_shape=False``. Python backends (NumPy, JAX, PyTorch,
    MLX) run it; gradients come from the autograd backends' own differentiation. The C/GGML backends
    and NumPy gradients refuse it with a clear error, because there is no rule to differentiate ``fn``.

    >>> import numpy as np
    >>> leaky = Lambda(lambda x: np.maximum(0.01 * x, x))
    """

    def __init__(self, fn: Callable[[Any], Any], *, same_shape: bool = True, name: str | None = None) -> None:
        if not callable(fn):
            raise validation.fail("Lambda", "fn", "a callable", fn)
        same_shape = validation.boolean("Lambda", "same_shape", same_shape)
        super().__init__(name=name)
        self |= Primitive("lambda", fn=fn, same_shape=same_shape)(input=IOKey("input"), output=IOKey("output"))
