"""Running a primitive's shape and type rules with error context. Shared by the logical layer (connect
time) and the compiler (flat graph, backward graph), so both report conflicts the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import DtypeError, ShapeError
from ..shapes import Shape, ShapeMismatch, ShapeUndetermined
from ..types import Kind
from .spec import PrimitiveSpec, ShapeIO

__all__ = ["describe_shapes", "run_shape_rule", "run_type_rule"]


def describe_shapes(io: Mapping[str, Shape]) -> str:
    return ", ".join(f"{key}: {shape!r}" for key, shape in io.items())


def run_shape_rule(spec: PrimitiveSpec, attrs: Mapping[str, Any], io: ShapeIO, where: str) -> bool:
    """Apply ``spec.shape_rule``; a conflict becomes a :class:`ShapeError` naming ``where`` and the keys.

    The shapes are shown with the dims they had before the rule ran, so both sides of the conflict are visible.
    """
    before = [(key, shape.parts()) for key, shape in io.items()]  # formatted only if the rule fails
    try:
        return bool(spec.shape_rule(io, attrs))
    except ShapeUndetermined:
        return False  # ambiguous for now; the solver re-runs the rule when shapes are refined
    except ShapeMismatch as exc:
        shown = describe_shapes({key: Shape(*parts) for key, parts in before})
        raise ShapeError(
            f"{where}: shapes of primitive {spec.name!r} do not fit ({exc}). "
            f"Shapes were {shown}; attributes {dict(attrs)}"
        ) from None


def run_type_rule(
    spec: PrimitiveSpec, attrs: Mapping[str, Any], kinds: dict[str, Kind | None], where: str
) -> Mapping[str, Kind] | None:
    """Check accepted input kinds (and infer required ones), then apply ``spec.type_rule``.

    ``kinds`` is updated in place with inferred input kinds (``Embedding`` indices become ``int``).
    """
    for key, accepted in spec.input_kinds.items():
        if key not in kinds:
            continue
        kind = kinds[key]
        if kind is None:
            if len(accepted) == 1:  # only one kind fits: it is known now (Embedding indices are int)
                kinds[key] = accepted[0]
        elif kind not in accepted:
            raise DtypeError(
                f"{where}: input {key!r} of primitive {spec.name!r} must be {' or '.join(accepted)}, got {kind}"
            )
    return spec.type_rule(kinds, attrs)
