"""Reusable shape and type rules of primitive specs (what a primitive's output shape and kind are; the gradient
rules are :mod:`mithril.gradients.vjp_rules`). A primitive's own rule is one of these or a few lines built on
them. Plugin authors reach this module as ``mithril.extend.rules``.

Shape rules follow :data:`~mithril.primitives.spec.ShapeRule`: refine with ``unify``, return ``True``
when done. Helpers here normalise axes, broadcast, reduce and compute convolution sizes.

Example:
    >>> from mithril.shapes import Shape
    >>> from mithril.primitives.spec import ShapeIO
    >>> io = ShapeIO(left=Shape.of([4, 1]), right=Shape.of([3]), output=Shape.unknown())
    >>> broadcast(io, {})
    True
    >>> io.out.ints()
    (4, 3)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..shapes import Dim, Shape, ShapeMismatch, Variadic, shape_from_template, unify, unify_dims
from ..types import Dtype, Kind, kind_of_python_value, promote_kinds

if TYPE_CHECKING:
    from .spec import ShapeRule, TypeRule

__all__ = [
    "bool_result",
    "broadcast",
    "broadcast_dims",
    "broadcast_sum_axes",
    "creation_kind",
    "fixed",
    "float_result",
    "int_result",
    "kind_of",
    "normalize_axes",
    "normalize_axis",
    "pair",
    "promote",
    "rank_from_host_shape",
    "reduction",
    "same_kind",
    "same_shape",
    "scalar_output",
]


# -- axes ------------------------------------------------------------------------------------------
def normalize_axis(axis: int, rank: int) -> int:
    """``-1`` -> ``rank - 1``; raises :class:`ShapeMismatch` when out of range."""
    if not -rank <= axis < rank:
        raise ShapeMismatch(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(axis: int | Sequence[int] | None, rank: int) -> tuple[int, ...]:
    """All axes for ``None``, else the sorted normalised axes."""
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(normalize_axis(a, rank) for a in axes))


def pair(value: int | Sequence[int]) -> tuple[int, int]:
    """``3`` -> ``(3, 3)``; a pair is returned as a tuple."""
    if isinstance(value, int):
        return (value, value)
    first, second = value
    return (int(first), int(second))


def fixed(dims: Sequence[Dim | int | None]) -> Shape:
    """A fixed-rank shape from dims, ints or ``None`` (fresh unknown)."""
    return Shape([d if isinstance(d, Dim) else Dim(d) for d in dims])


# -- generic shape rules ---------------------------------------------------------------------------
def same_shape(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """Every input and output has one shape (elementwise unary ops, ``cast``)."""
    shapes = list(io.values())
    for other in shapes[1:]:
        unify(shapes[0], other)
    return True


def scalar_output(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    unify(io["output"], Shape())
    return True


def broadcast_dims(dims: Sequence[Sequence[Dim]], *, partial: bool = False) -> list[Dim] | None:
    """NumPy broadcasting over known-rank dim lists; ``None`` when a symbolic pair is ambiguous (with
    ``partial``, that column is ``None`` and the others are still given)."""
    rank = max(len(d) for d in dims)
    result: list[Any] = []
    for i in range(rank, 0, -1):
        column = [d[-i] for d in dims if len(d) >= i]
        chosen: Dim | None = None
        for dim in column:
            if chosen is None or chosen.find() is dim.find():
                chosen = chosen or dim
                continue
            a, b = chosen.value, dim.value
            if b == 1:
                continue
            if a == 1 or (a is None and b is not None):
                chosen = dim  # an unknown partner must be 1 or equal, so the known size wins
            elif a is not None and b is not None and a != b:
                shown = [[x.value for x in d] for d in dims]
                raise ShapeMismatch(f"shapes {shown} do not broadcast: {a} vs {b}")
            elif a is None and b is None:
                chosen = None
                break
        if chosen is None and not partial:
            return None
        result.append(chosen)
    return result


def broadcast_sum_axes(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...] | None:
    """The axes of ``shape`` to sum (keeping dims) so that it reshapes to ``target`` (``sum_to_like``):
    its extra leading axes and those where ``target`` has size 1. ``None`` when ``shape`` has fewer axes
    than ``target`` (it broadcasts up instead).

    >>> broadcast_sum_axes((2, 3, 4), (3, 1))
    (0, 2)
    >>> broadcast_sum_axes((4,), (3, 4)) is None
    True
    """
    extra = len(shape) - len(target)
    if extra < 0:
        return None
    return tuple(range(extra)) + tuple(
        extra + i for i, size in enumerate(target) if size == 1 and shape[extra + i] != 1
    )


def broadcast(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """Output is the NumPy broadcast of every input."""
    inputs = [s for k, s in io.items() if k != "output"]
    all_dims = [s.dims() for s in inputs]
    if any(d is None for d in all_dims):
        # same variadic on all sides (x + x) still fixes the output
        if len(inputs) == 2 and inputs[0].parts()[1] is not None and inputs[0].parts() == inputs[1].parts():
            unify(io["output"], inputs[0])
            return True
        return False
    dims = broadcast_dims(all_dims, partial=True)  # type: ignore[arg-type]
    # an ambiguous column (two unknown sizes, either may be 1) stays unknown until one is known
    unify(io["output"], Shape([Dim() if d is None else d for d in dims]))  # type: ignore[union-attr]
    return None not in dims  # type: ignore[operator]


def reduction(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """Reduce ``input`` over ``attrs["axis"]`` (``None`` = all), keeping dims when ``attrs["keepdim"]``."""
    axis, keepdim = attrs.get("axis"), attrs.get("keepdim", False)
    source, out = io["input"], io["output"]
    dims = source.dims()
    if dims is None:
        if axis is None and not keepdim:
            unify(out, Shape())
            return True
        if keepdim:  # rank is preserved; unify ranks through a fresh template
            out_dims = out.dims()
            if out_dims is not None:
                unify(source, Shape([Dim() for _ in out_dims]))
                return reduction(io, attrs)
        return False
    axes = normalize_axes(axis, len(dims))
    if keepdim:
        result = [Dim(1) if i in axes else d for i, d in enumerate(dims)]
    else:
        result = [d for i, d in enumerate(dims) if i not in axes]
    unify(out, Shape(result))
    return True


# -- type rules ------------------------------------------------------------------------------------
def creation_kind(dtype: Dtype | Kind | None, *values: Any, counting: bool = False) -> Dtype | Kind:
    """The dtype a creation op (``ones``, ``full``, ``arange``...) makes: an explicit ``dtype`` wins, else
    the widest kind among the Python ``values`` (float, then int, then bool; ``None`` values are skipped),
    else ``"float"``. ``counting`` (``arange``) counts in ints where the values are bools.

    Backends pass the result to their ``native_dtype``.

    >>> creation_kind(None, 0, 2.5), creation_kind(None, True), creation_kind("int32", 1.0)
    ('float', 'bool', 'int32')
    >>> creation_kind(None, True, None, counting=True), creation_kind(None)
    ('int', 'float')
    """
    if dtype is not None:
        return dtype
    kinds = {kind_of_python_value(v) for v in values if v is not None}
    for kind in ("float", "int", "bool"):
        if kind in kinds:
            return "int" if counting and kind == "bool" else kind
    return "float"


def kind_of(key: str) -> TypeRule:
    """Type rule: every output has the kind of input ``key``."""

    def rule(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> Mapping[str, Kind] | None:
        kind = kinds.get(key)
        return None if kind is None else {"output": kind}

    return rule


same_kind = kind_of("input")


def promote(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> Mapping[str, Kind] | None:
    """Arithmetic promotion over all given inputs (bool < int < float)."""
    present = [k for k in kinds.values() if k is not None]
    if len(present) < len(kinds):
        return None
    return {"output": promote_kinds(*present)} if present else None


def float_result(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> Mapping[str, Kind]:
    return {"output": "float"}


def float_results(*keys: str) -> TypeRule:
    """Type rule of a primitive with several outputs: every key of ``keys`` is float."""

    def rule(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> Mapping[str, Kind]:
        return dict.fromkeys(keys, "float")

    return rule


def bool_result(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> Mapping[str, Kind]:
    return {"output": "bool"}


def int_result(kinds: Mapping[str, Kind | None], attrs: Mapping[str, Any]) -> Mapping[str, Kind]:
    return {"output": "int"}


def rank_from_host_shape(key: str, result: str = "output") -> ShapeRule:
    """Shape rule of a primitive whose output shape is the run-time tuple ``key`` (``reshape_to``,
    ``randn_of``): its length is the output's rank; the dims themselves are known only when it runs (the
    model that builds the call unifies those it knows, e.g. ``x.shape[0]`` with ``x``'s dim)."""

    def rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
        dims = io[key].dims()
        if dims is None or len(dims) != 1 or dims[0].value is None:
            return False
        unify(io[result], Shape([Dim() for _ in range(dims[0].value)]))
        return True

    return rule


def template(**templates: Sequence[object]) -> ShapeRule:
    """A shape rule from templates sharing symbols: ``template(input=[("B", ...), "k"], output=[("B", ...), "d"])``.

    Absent optional keys are skipped. The rule is done after one application.
    """
    def rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
        symbols: dict[str, object] = {}
        for key, spec in templates.items():
            if key in io:
                unify(io[key], shape_from_template(spec, symbols))
        return True

    return rule


__all__ += ["Variadic", "template", "unify_dims"]
