"""The symbolic shape engine: unification, variadic segments, templates, ambiguity."""

import pytest
from mithril.shapes import Dim, Shape, ShapeMismatch, ShapeUndetermined, Variadic, shape_from_template, unify


def test_fixed_shapes_unify_dimwise():
    a, b = Shape.of([2, None]), Shape.of([None, 3])
    unify(a, b)
    assert a.ints() == b.ints() == (2, 3)


def test_conflicting_dims_raise():
    with pytest.raises(ShapeMismatch, match="4 != 5"):
        unify(Shape.of([4]), Shape.of([5]))


def test_rank_mismatch_raises():
    with pytest.raises(ShapeMismatch, match="rank"):
        unify(Shape.of([1, 2]), Shape.of([1, 2, 3]))


def test_variadic_binds_to_middle_dims():
    batch = Variadic()
    x = Shape([Dim(1)], batch, [Dim(4)])
    unify(x, Shape.of([1, 7, 8, 4]))
    assert x.ints() == (1, 7, 8, 4)
    assert Shape([], batch, []).ints() == (7, 8)


def test_shared_symbols_propagate_later_refinements():
    symbols: dict = {}
    left = shape_from_template([("B", ...), "k"], symbols)
    right = shape_from_template(["k", "n"], symbols)
    unify(right, Shape.of([5, 6]))
    assert left.min_rank() == 1 and left.parts()[2][0].value == 5


def test_two_variadics_with_same_side_extras_unify():
    a = Shape([Dim(1)], Variadic(), [Dim(3)])
    b = Shape([], Variadic(), [])
    unify(a, b)
    unify(b, Shape.of([1, 2, 3]))
    assert a.ints() == (1, 2, 3)


def test_crossed_variadics_are_undetermined_not_guessed():
    logits = Shape([], Variadic(), [Dim(3)])  # [..., 3]
    ce_input = Shape([Dim(), Dim()], Variadic(), [])  # [N, C, ...]
    with pytest.raises(ShapeUndetermined):
        unify(logits, ce_input)


def test_template_rejects_two_variadics():
    with pytest.raises(ShapeMismatch, match="one variadic"):
        shape_from_template([("A", ...), ("B", ...)], {})
