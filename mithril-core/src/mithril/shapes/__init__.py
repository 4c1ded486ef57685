"""The symbolic shape engine: dims, variadic segments, unification and templates."""

from .symbolic import (
    Dim,
    Shape,
    ShapeMismatch,
    ShapeUndetermined,
    Variadic,
    changes_since,
    describe_shape,
    epoch,
    note_change,
    reset_change_log,
    shape_from_template,
    unify,
    unify_dims,
)

__all__ = [
    "Dim", "Shape", "ShapeMismatch", "ShapeUndetermined", "Variadic", "changes_since", "describe_shape", "epoch",
    "note_change", "reset_change_log", "shape_from_template", "unify", "unify_dims",
]  # fmt: skip
