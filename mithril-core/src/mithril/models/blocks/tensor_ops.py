"""Tensor blocks of Mithril's model library composed from core primitives, so every backend (C and GGML
included) runs them forward and backward with no kernel of its own: ``Clamp``, ``Eye``, ``EyeComplement``,
``TransposedDiagonal``, ``CartesianDifference``, ``DistanceMatrix``, ``PolynomialFeatures``, ``Trapezoid``,
``MaxPool1D``/``AvgPool1D``, ``ShiftLeft``/``ShiftRight``, ``PermuteTensor`` and ``StableReciprocal``.

Example:
    >>> from mithril.models import CartesianDifference, MaxPool1D
    >>> CartesianDifference().input_keys, MaxPool1D(2).input_keys
    (['left', 'right'], ['input'])
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ... import validation
from ...framework.keys import IOKey
from ...framework.model import Model
from ._util import op

__all__ = [
    "Clamp", "Eye", "EyeComplement", "TransposedDiagonal", "CartesianDifference", "DistanceMatrix",
    "PolynomialFeatures", "Trapezoid", "MaxPool1D", "AvgPool1D", "ShiftLeft", "ShiftRight", "PermuteTensor",
    "StableReciprocal",
]  # fmt: skip


class _Block(Model):
    """A block whose inputs are declared in order (``.connect(*keys)``) and whose one output is ``output``."""

    def _finish(self, result: Any) -> None:
        self.expose(result, "output")
        if "input" in self._keys:
            self._cin = self._keys["input"]


class Clamp(_Block):
    """``minimum(maximum(input, min), max)`` (``torch.clamp``); a bound left ``None`` is not applied.

    >>> Clamp(min=0.0, max=1.0).input_keys
    ['input']
    """

    def __init__(self, min: float | None = None, max: float | None = None, *, name: str | None = None) -> None:  # noqa: A002 - torch's names
        super().__init__(name=name)
        low = validation.number("Clamp", "min", min, optional=True)
        high = validation.number("Clamp", "max", max, optional=True)
        result: Any = IOKey("input")
        if low is None and high is None:
            result = op(self, "maximum", result, -np.inf)
        if low is not None:
            result = op(self, "maximum", result, low)
        if high is not None:
            result = op(self, "minimum", result, high)
        self._finish(result)


def _identity_mask(model: Model, rows: Any, cols: Any) -> Any:
    """``rows[:, None] == cols[None, :]`` for two int position vectors."""
    return op(model, "equal", op(model, "unsqueeze", rows, axis=1), cols)


class Eye(_Block):
    """The ``[N, M]`` identity matrix (``np.eye(N, M)``) in the backend's float dtype; no inputs.

    >>> Eye(3).output_keys
    ['output']
    """

    _on, _off = 1.0, 0.0

    def __init__(self, N: int, M: int | None = None, *, name: str | None = None) -> None:  # noqa: N803 - np.eye's names
        super().__init__(name=name)
        n = validation.positive_int(type(self).__name__, "N", N)
        m = validation.positive_int(type(self).__name__, "M", M, optional=True) or n
        mask = _identity_mask(self, op(self, "arange", stop=n), op(self, "arange", stop=m))
        self._finish(op(self, "where", mask, self._on, self._off))


class EyeComplement(Eye):
    """``1 - np.eye(N, M)``: ones off the diagonal (masks self-pairs in ``TSNE``/``MDS``).

    >>> EyeComplement(2, 3).output_keys
    ['output']
    """

    _on, _off = 0.0, 1.0


class TransposedDiagonal(_Block):
    """The diagonal of a square ``input`` ``[N, N]`` as a column ``[N, 1]``.

    >>> TransposedDiagonal().input_keys
    ['input']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        x = IOKey("input", shape=["N", "N"])
        mask = _identity_mask(self, op(self, "positions", x, axis=0), op(self, "positions", IOKey("input"), axis=1))
        self._finish(op(self, "sum", op(self, "where", mask, IOKey("input"), 0.0), axis=1, keepdim=True))


def _cartesian_difference(model: Model) -> Any:
    left = op(model, "unsqueeze", IOKey("left", shape=["N", "d"]), axis=1)
    right = op(model, "unsqueeze", IOKey("right", shape=["M", "d"]), axis=0)
    return op(model, "subtract", left, right)


class CartesianDifference(_Block):
    """Every pairwise difference of the rows: ``output[i, j] = left[i] - right[j]``, ``[N, d]`` and
    ``[M, d]`` to ``[N, M, d]``.

    >>> CartesianDifference().output_keys
    ['output']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("left", "right")
        self._finish(_cartesian_difference(self))


class DistanceMatrix(_Block):
    """Pairwise Euclidean distances of rows, ``[N, d]`` x ``[M, d]`` -> ``[N, M]``
    (``scipy.spatial.distance.cdist``); ``squared=True`` gives the squared distances (smooth at 0, what
    ``MDS``, ``TSNE`` and the RBF kernel use).

    >>> DistanceMatrix(squared=True).input_keys
    ['left', 'right']
    """

    def __init__(self, squared: bool = False, *, name: str | None = None) -> None:
        super().__init__(name=name)
        squared = validation.boolean("DistanceMatrix", "squared", squared)
        self._declare_keys("left", "right")
        total = op(self, "sum", op(self, "square", _cartesian_difference(self)), axis=-1)
        self._finish(total if squared else op(self, "sqrt", total))


def polynomial_terms(in_features: int, degree: int) -> list[list[tuple[int, ...]]]:
    """The monomials of degrees 1..``degree`` over ``in_features`` variables, grouped by degree, each a
    tuple of column indices, in scikit-learn's ``PolynomialFeatures`` order.

    >>> polynomial_terms(2, 2)
    [[(0,), (1,)], [(0, 0), (0, 1), (1, 1)]]
    """
    return [list(itertools.combinations_with_replacement(range(in_features), k)) for k in range(1, degree + 1)]


class PolynomialFeatures(_Block):
    """Every monomial of the ``in_features`` columns of ``input`` ``[N, in_features]`` up to ``degree``,
    ``[N, K]`` in scikit-learn's ``PolynomialFeatures(degree, include_bias=False)`` column order.

    >>> PolynomialFeatures(degree=2, in_features=2).input_keys
    ['input']
    """

    def __init__(self, degree: int = 2, in_features: int | None = None, *, name: str | None = None) -> None:
        super().__init__(name=name)
        degree = validation.positive_int("PolynomialFeatures", "degree", degree)
        n = validation.positive_int("PolynomialFeatures", "in_features", in_features)
        columns = op(self, "swapaxes", IOKey("input", shape=["N", n]))  # [n, N]: rows picked by index
        groups = []
        for terms in polynomial_terms(n, degree):
            index = IOKey(value=np.asarray(terms, dtype=np.int64))  # [K_k, k]
            picked = op(self, "embedding", index, columns)  # [K_k, k, N]
            groups.append(op(self, "prod", picked, axis=1))  # [K_k, N]
        stacked = groups[0] if len(groups) == 1 else op(self, "concat", *groups, axis=0, n=len(groups))
        self._finish(op(self, "swapaxes", stacked))


class Trapezoid(_Block):
    """The trapezoidal rule over the last axis, ``np.trapezoid(input, x, axis=-1)``: samples ``input``
    ``[..., L]`` at points ``x`` ``[..., L]``.

    >>> Trapezoid().input_keys
    ['input', 'x']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "x")
        upper, lower = (Ellipsis, slice(1, None)), (Ellipsis, slice(None, -1))
        y, x = IOKey("input"), IOKey("x")
        heights = op(self, "add", op(self, "index", y, key=upper), op(self, "index", y, key=lower))
        widths = op(self, "subtract", op(self, "index", x, key=upper), op(self, "index", x, key=lower))
        self._finish(op(self, "multiply", op(self, "sum", op(self, "multiply", heights, widths), axis=-1), 0.5))


class _Pool1D(_Block):
    _primitive = ""

    def __init__(self, kernel_size: int, stride: int | None = None, padding: int = 0, *, name: str | None = None) -> None:
        super().__init__(name=name)
        owner = type(self).__name__
        kernel_size = validation.positive_int(owner, "kernel_size", kernel_size)
        stride = validation.positive_int(owner, "stride", stride, optional=True) or kernel_size
        padding = validation.positive_int(owner, "padding", padding, minimum=0)
        rows = op(self, "unsqueeze", IOKey("input", shape=["N", "C", "L"]), axis=2)  # [N, C, 1, L]
        pooled = op(self, self._primitive, rows, kernel_size=(1, kernel_size), stride=(1, stride), padding=((0, 0), (padding, padding)))
        self._finish(op(self, "squeeze", pooled, axis=2))


class MaxPool1D(_Pool1D):
    """Max pooling over the last axis of ``[N, C, L]`` (``torch.nn.functional.max_pool1d``); ``stride``
    defaults to ``kernel_size``, padding pads with ``-inf``.

    >>> MaxPool1D(3, stride=1).output_keys
    ['output']
    """

    _primitive = "max_pool2d"


class AvgPool1D(_Pool1D):
    """Average pooling over the last axis of ``[N, C, L]`` (``torch.nn.functional.avg_pool1d``; padding
    counts as zeros).

    >>> AvgPool1D(2).output_keys
    ['output']
    """

    _primitive = "avg_pool2d"


class ShiftLeft(_Block):
    """``input << shift`` for integers (``input * 2 ** shift``).

    >>> ShiftLeft().input_keys
    ['input', 'shift']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "shift")
        factor = op(self, "power", 2, IOKey("shift", type="int"))
        self._finish(op(self, "multiply", IOKey("input", type="int"), factor))


class ShiftRight(_Block):
    """``input >> shift`` for integers (arithmetic shift: ``input // 2 ** shift``).

    >>> ShiftRight().input_keys
    ['input', 'shift']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "shift")
        factor = op(self, "power", 2, IOKey("shift", type="int"))
        self._finish(op(self, "floor_divide", IOKey("input", type="int"), factor))


class PermuteTensor(_Block):
    """The rows of ``input`` in the order of ``indices``: ``input[indices]`` (first axis).

    >>> PermuteTensor().input_keys
    ['input', 'indices']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "indices")
        self._finish(op(self, "embedding", IOKey("indices", type="int"), IOKey("input")))


class StableReciprocal(_Block):
    """``1 / input`` where ``|input| >= eps``; inside ``(-eps, eps)`` the tangent line at ``±eps``,
    ``±(2 / eps - |input| / eps**2)``, so values and gradients stay finite (bounded by ``2 / eps`` and
    ``1 / eps**2``) and continuous at ``±eps``.

    >>> StableReciprocal(eps=1e-3).input_keys
    ['input']
    """

    def __init__(self, eps: float = 1e-6, *, name: str | None = None) -> None:
        super().__init__(name=name)
        eps = validation.number("StableReciprocal", "eps", eps, low=0.0)
        if eps == 0:
            raise validation.fail("StableReciprocal", "eps", "a number > 0", eps)
        x = IOKey("input")
        magnitude = op(self, "abs", x)
        small = op(self, "less", magnitude, eps)
        sign = op(self, "where", op(self, "less", x, 0.0), -1.0, 1.0)
        tangent = op(self, "multiply", sign, op(self, "subtract", 2.0 / eps, op(self, "multiply", magnitude, 1.0 / eps**2)))
        safe = op(self, "where", small, eps, x)  # no division by (nearly) 0 on the branch not taken
        # safe ** -1 rather than 1.0 / safe: the shared divide cannot take a Python number on the left on MLX
        self._finish(op(self, "where", small, tangent, op(self, "power", safe, -1.0)))
