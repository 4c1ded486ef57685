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
from collections.abc import Mapping
from typing import Any

from ... import validation
from ...deprecation import warn_deprecated
from ...errors import ArgumentError, ShapeError
from ...framework.keys import TBD, IOKey
from ...framework.model import Model
from ...lazy_numpy import np
from ._util import op, set_given
from .robust import checked_threshold, robust_power, stable_reciprocal

__all__ = [
    "AvgPool1D",
    "CartesianDifference",
    "Clamp",
    "DistanceMatrix",
    "EncoderDistanceMatrix",
    "Eye",
    "EyeComplement",
    "MaxPool1D",
    "NormModifier",
    "PermuteTensor",
    "PolynomialFeatures",
    "ShiftLeft",
    "ShiftRight",
    "StableReciprocal",
    "TransposedDiagonal",
    "Trapezoid",
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

    def __init__(self, min: float | None = None, max: float | None = None, *, name: str | None = None) -> None:
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

    def __init__(self, N: int, M: int | None = None, *, name: str | None = None) -> None:
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


def _cartesian_difference(model: Model, left: str = "left", right: str = "right") -> Any:
    """``left[i] - right[j]`` for every pair of rows of the keys ``left`` ``[N, d]`` and ``right`` ``[M, d]``."""
    rows = op(model, "unsqueeze", IOKey(left, shape=["N", "d"]), axis=1)
    columns = op(model, "unsqueeze", IOKey(right, shape=["M", "d"]), axis=0)
    return op(model, "subtract", rows, columns)


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
    """Mithril's ``DistanceMatrix``: ``output[i, j] = sum_k |left[i, k] - right[j, k]| ** norm`` for the rows of
    ``left`` ``[N, d]`` and ``right`` ``[M, d]``, ``[N, M]``: the ``norm``-th power of the Minkowski distance,
    ``scipy.spatial.distance.cdist(left, right, "minkowski", p=norm) ** norm`` (``norm=2``: squared Euclidean
    distances, smooth at 0). ``norm`` (one number) is a key unless given a value here; ``left``/``right``
    may be given values too.

    ``squared=`` is this project's earlier form and is deprecated: ``squared=True`` is ``norm=2``,
    ``squared=False`` (Euclidean distances) the square root of that.

    >>> DistanceMatrix().input_keys
    ['left', 'right', 'norm']
    >>> DistanceMatrix(norm=2.0).input_keys
    ['left', 'right']
    """

    def __init__(
        self,
        left: Any = TBD,
        right: Any = TBD,
        norm: Any = TBD,
        *,
        squared: bool | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        if squared is not None:
            squared = validation.boolean("DistanceMatrix", "squared", squared)
            warn_deprecated(
                f"DistanceMatrix(squared={squared})",
                "DistanceMatrix(norm=2.0)" + ("" if squared else " and a square root"),
            )
            if norm is not TBD:
                raise ArgumentError("DistanceMatrix: squared= is deprecated; give norm= alone")
            norm = 2.0
        self._declare_keys("left", "right", *(("norm",) if norm is TBD else ()))
        if isinstance(norm, (int, float)) and not isinstance(norm, bool):
            norm = float(norm)
        order = IOKey("norm") if norm is TBD else IOKey(value=norm)
        total = op(self, "sum", op(self, "power", op(self, "abs", _cartesian_difference(self)), order), axis=-1)
        self._finish(total if squared is not False else op(self, "sqrt", total))
        self.set_shapes(left=["N", "d"], right=["M", "d"], output=["N", "M"])
        set_given(self, left=left, right=right)
        self._cin = self._keys["left"]


def polynomial_terms(in_features: int, degree: int) -> list[list[tuple[int, ...]]]:
    """The monomials of degrees 1..``degree`` over ``in_features`` variables, grouped by degree, each a
    tuple of column indices, in scikit-learn's ``PolynomialFeatures`` order.

    >>> polynomial_terms(2, 2)
    [[(0,), (1,)], [(0, 0), (0, 1), (1, 1)]]
    """
    return [list(itertools.combinations_with_replacement(range(in_features), k)) for k in range(1, degree + 1)]


class PolynomialFeatures(_Block):
    """Every monomial of the columns of ``input`` ``[N, d]`` of degrees 1..``degree``, ``[N, K]`` in
    scikit-learn's ``PolynomialFeatures(degree, include_bias=False)`` column order (Mithril's
    ``PolynomialFeatures(degree)``). The width ``d`` is inferred from the input's shape at compile time;
    ``in_features`` fixes it at construction instead (and the output width with it).

    >>> PolynomialFeatures(degree=2).input_keys
    ['input']
    >>> PolynomialFeatures(degree=2, in_features=3).input_keys
    ['input']
    """

    def __init__(self, degree: int = 2, in_features: int | None = None, *, name: str | None = None) -> None:
        super().__init__(name=name)
        degree = validation.positive_int("PolynomialFeatures", "degree", degree)
        self.attributes = {"degree": degree, "in_features": in_features}
        if in_features is None:  # the `polynomial_features` primitive: spliced in once the width is known
            self._finish(op(self, "polynomial_features", IOKey("input"), degree=degree))
            return
        n = validation.positive_int("PolynomialFeatures", "in_features", in_features)
        columns = op(self, "swapaxes", IOKey("input", shape=["N", n]))  # [n, N]: rows picked by index
        groups = []
        for terms in polynomial_terms(n, degree):
            index = IOKey(value=np.asarray(terms, dtype=np.int64))  # [K_k, k]
            picked = op(self, "embedding", index, columns)  # [K_k, k, N]
            groups.append(op(self, "prod", picked, axis=1))  # [K_k, N]
        stacked = groups[0] if len(groups) == 1 else op(self, "concat", *groups, axis=0, n=len(groups))
        self._finish(op(self, "swapaxes", stacked))


class _RunTimeWidthPolynomialFeatures(_Block):
    """``PolynomialFeatures`` for an input whose width is known only at run time. With a column of ones in
    front (``[1, x]``), the entries of the ``degree``-fold outer product of each row whose indices do not
    decrease are every monomial of degrees 0..``degree``, and in row-major order they come by degree, each
    degree in scikit-learn's order; all but the first (the constant) are picked, by indices computed at run
    time (``unique``: not for jitted JAX/MLX, C or GGML, which need the width when compiling)."""

    def __init__(self, degree: int, *, name: str | None = None) -> None:
        super().__init__(name=name)
        x = IOKey("input", shape=["N", "d"])
        if degree == 1:
            self._finish(op(self, "index", x, key=Ellipsis))
            return
        ones_first = op(self, "pad", x, pad_width=((0, 0), (1, 0)), value=1.0)  # [N, d + 1]
        positions = op(self, "positions", ones_first, axis=1)  # [d + 1]
        factors = [_axis_at(self, ones_first, j, degree, offset=1) for j in range(degree)]  # [N, 1.., d+1, 1..]
        places = [_axis_at(self, positions, j, degree, offset=0) for j in range(degree)]
        product = factors[0]
        for factor in factors[1:]:
            product = op(self, "multiply", product, factor)  # [N, d+1, ..., d+1]
        keep = op(self, "less_equal", places[0], places[1])
        for a, b in itertools.pairwise(places[1:]):
            keep = op(self, "logical_and", keep, op(self, "less_equal", a, b))  # indices that do not decrease
        keep = op(self, "flatten", keep, start_dim=0)
        picked = op(self, "unique", op(self, "where", keep, op(self, "positions", keep, axis=0), 0))
        picked = op(self, "index", picked, key=slice(1, None))  # all but the constant
        table = op(self, "swapaxes", op(self, "flatten", product, start_dim=1))  # [(d+1)**degree, N]
        self._finish(op(self, "swapaxes", op(self, "embedding", picked, table)))


def _axis_at(model: Model, value: Any, j: int, k: int, *, offset: int) -> Any:
    """``value`` with its last axis moved to place ``offset + j`` of ``offset + k`` (new axes of size 1)."""
    for _ in range(j):
        value = op(model, "unsqueeze", value, axis=offset)
    for _ in range(k - 1 - j):
        value = op(model, "unsqueeze", value, axis=-1)
    return value


def polynomial_features_decomposition(attrs: Mapping[str, Any], shapes: Mapping[str, Any]) -> Model:
    """The ``polynomial_features`` primitive as other primitives: the explicit terms when ``shapes`` gives
    the input's width, else the terms picked at run time.

    >>> polynomial_features_decomposition({"degree": 2}, {"input": [None, 3]}).input_keys
    ['input']
    """
    dims = shapes.get("input")
    if dims is not None and len(dims) != 2:
        raise ShapeError(f"PolynomialFeatures: input must be [N, d], got a shape of rank {len(dims)}: {dims!r}")
    if dims is not None and isinstance(dims[1], int):
        return PolynomialFeatures(attrs["degree"], dims[1])
    return _RunTimeWidthPolynomialFeatures(attrs["degree"])


class NormModifier(_Block):
    """Mithril's ``NormModifier``: maps any real ``input`` into ``[1, 5]`` with a triangle wave of period 8,
    ``4 * (1 - 2 * |((input - 1) mod 8) / 8 - 0.5|) + 1`` (1 at 1 + 8k, 5 at 5 + 8k: the identity on ``[1, 5]``,
    slope -1 from 5 to 9).

    >>> NormModifier().input_keys
    ['input']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        shifted = op(self, "subtract", IOKey("input"), 1.0)
        wrapped = op(
            self, "subtract", shifted, op(self, "multiply", op(self, "floor", op(self, "divide", shifted, 8.0)), 8.0)
        )
        inner = op(self, "subtract", op(self, "divide", wrapped, 8.0), 0.5)
        scaled = op(self, "multiply", op(self, "subtract", 1.0, op(self, "multiply", op(self, "abs", inner), 2.0)), 4.0)
        self._finish(op(self, "add", scaled, 1.0))


class EncoderDistanceMatrix(_Block):
    """Mithril's ``EncoderDistanceMatrix``: Minkowski distances between the rows of ``input1`` ``[N, d]`` and
    ``input2`` ``[M, d]`` whose order comes from the input ``norm`` mapped into ``[1, 5]`` by
    :class:`NormModifier`: ``output[i, j] = (sum_k |input1[i, k] - input2[j, k]| ** p) ** (1 / p)``, or the
    sum alone with ``get_final_distance=False``. ``robust`` takes the root as ``Power(robust=True)`` does
    (never NaN, finite gradients at 0). ``input1``/``input2`` may be given values.

    >>> EncoderDistanceMatrix().input_keys
    ['input1', 'input2', 'norm']
    """

    def __init__(
        self,
        get_final_distance: bool = True,
        robust: bool = True,
        input1: Any = TBD,
        input2: Any = TBD,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        get_final_distance = validation.boolean("EncoderDistanceMatrix", "get_final_distance", get_final_distance)
        robust = validation.boolean("EncoderDistanceMatrix", "robust", robust)
        self._declare_keys("input1", "input2", "norm")
        order = NormModifier()
        self |= order(input=IOKey("norm"))  # one number (Mithril's tests also give it as [p])
        powered = DistanceMatrix()
        self |= powered(left=IOKey("input1"), right=IOKey("input2"), norm=order.output)
        total: Any = powered.output
        if get_final_distance:
            root = op(self, "divide", 1.0, order.output)
            total = robust_power(self, total, root) if robust else op(self, "power", total, root)
        self._finish(total)
        set_given(self, input1=input1, input2=input2)
        self._cin = self._keys["input1"]


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

    def __init__(
        self,
        kernel_size: int,
        stride: int | None = None,
        padding: int | tuple[int, int] = 0,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        owner = type(self).__name__
        kernel_size = validation.positive_int(owner, "kernel_size", kernel_size)
        stride = validation.positive_int(owner, "stride", stride, optional=True) or kernel_size
        if isinstance(padding, (tuple, list)):  # Mithril's (left, right)
            if len(padding) != 2:
                raise ArgumentError(f"{owner}: padding takes an int or a (left, right) pair, got {padding!r}")
            pads = tuple(validation.positive_int(owner, "padding", p, minimum=0) for p in padding)
        else:
            pads = (validation.positive_int(owner, "padding", padding, minimum=0),) * 2
        self.attributes = {"kernel_size": kernel_size, "stride": stride, "padding": pads}
        rows = op(self, "unsqueeze", IOKey("input"), axis=-2)  # [N, C, 1, L] or [C, 1, L]
        pooled = op(
            self, self._primitive, rows, kernel_size=(1, kernel_size), stride=(1, stride), padding=((0, 0), pads)
        )
        self._finish(op(self, "squeeze", pooled, axis=-2))


class MaxPool1D(_Pool1D):
    """Max pooling over the last axis of ``[N, C, L]`` or ``[C, L]`` (``torch.nn.functional.max_pool1d``);
    ``stride`` defaults to ``kernel_size``; ``padding`` (an int, or Mithril's ``(left, right)``) pads with ``-inf``.

    >>> MaxPool1D(3, stride=1).output_keys
    ['output']
    >>> MaxPool1D(2, padding=(0, 1)).attributes["padding"]
    (0, 1)
    """

    _primitive = "max_pool2d"


class AvgPool1D(_Pool1D):
    """Average pooling over the last axis of ``[N, C, L]`` (``torch.nn.functional.avg_pool1d``; padding
    counts as zeros).

    >>> AvgPool1D(2).output_keys
    ['output']
    """

    _primitive = "avg_pool2d"


class _Shift(_Block):
    """A bit shift of the integers ``input`` by ``shift``: ``input`` and ``2 ** shift`` combined by
    ``_primitive``."""

    _primitive = ""

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "shift")
        factor = op(self, "power", 2, IOKey("shift", type="int"))
        self._finish(op(self, self._primitive, IOKey("input", type="int"), factor))


class ShiftLeft(_Shift):
    """``input << shift`` for integers (``input * 2 ** shift``).

    >>> ShiftLeft().input_keys
    ['input', 'shift']
    """

    _primitive = "multiply"


class ShiftRight(_Shift):
    """``input >> shift`` for integers (arithmetic shift: ``input // 2 ** shift``).

    >>> ShiftRight().input_keys
    ['input', 'shift']
    """

    _primitive = "floor_divide"


class PermuteTensor(_Block):
    """The rows of ``input`` in the order of ``indices``: ``input[indices]`` along the first axis, for an
    ``input`` of any rank ``[N, ...]`` with ``N`` indices (Mithril's ``PermuteTensor``).

    >>> PermuteTensor().input_keys
    ['input', 'indices']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "indices")
        x = IOKey("input", shape=["N", ("Rest", ...)])
        rows = op(self, "reshape", x, shape=(None, -1))  # [N, prod(rest)]: embedding picks whole rows
        picked = op(self, "embedding", IOKey("indices", type="int", shape=["N"]), rows)
        self._finish(op(self, "reshape_like", picked, self._keys["input"]))


class StableReciprocal(_Block):
    """Mithril's ``StableReciprocal``: ``1 / input`` where ``|input| >= threshold``; inside ``(-threshold,
    threshold)`` the tangent line at ``±threshold``, ``±2 / threshold - input / threshold**2`` (``+`` at 0), so
    values and gradients stay finite (bounded by ``2 / threshold`` and ``1 / threshold**2``) and continuous.
    ``threshold`` defaults to Mithril's constant for the dtype computed in (:mod:`mithril.numerics`: about
    1.5e-153 in float64, 1.1e-19 in float32); ``eps=`` is its deprecated spelling.

    >>> StableReciprocal(threshold=1e-3).input_keys
    ['input']
    """

    def __init__(self, threshold: float | None = None, *, eps: float | None = None, name: str | None = None) -> None:
        super().__init__(name=name)
        threshold = checked_threshold("StableReciprocal", threshold, eps=eps)
        self._finish(stable_reciprocal(self, IOKey("input"), threshold))
