"""The symbolic shape engine: dims, variadic segments, unification and templates."""

from .symbolic import (
    Dim,
    Shape,
    ShapeMismatch,
    ShapeUndetermined,
    Variadic,
    epoch,
    shape_from_template,
    unify,
    unify_dims,
)

__all__ = ["Dim", "Shape", "ShapeMismatch", "ShapeUndetermined", "Variadic", "epoch", "shape_from_template", "unify", "unify_dims"]
