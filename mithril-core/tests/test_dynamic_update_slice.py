"""``dynamic_update_slice``'s refusals before any backend code runs: shapes that do not fit at compile time,
and a ``start`` given as data that leaves no room for the update (core's index check, on every backend)."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import IndexRangeError, ShapeError
from mithril.models import Primitive


def _compiled(shapes: dict[str, list[int]]) -> ml.PhysicalModel:
    model = Primitive("dynamic_update_slice", axis=1)
    model.set_types(start="int")
    return ml.compile(model, ml.NumpyBackend(), shapes=shapes, data_keys=set(shapes))


@pytest.mark.parametrize(
    ("update", "start", "message"),
    [
        ([2, 7], [1], "update has 7 entries along axis 1, the input only 6"),
        ([2, 2, 1], [1], "update rank 3 != input rank 2"),
        ([3, 2], [1], "2 != 3"),
        ([2, 2], [2], "start must hold one int (shape [] or [1]), got shape [2]"),
    ],
)
def test_shapes_that_do_not_fit_are_refused_at_compile_time(update, start, message):
    with pytest.raises(ShapeError, match="dynamic_update_slice") as caught:
        _compiled({"input": [2, 6], "update": update, "start": start})
    assert message in str(caught.value)


def test_a_start_without_room_for_the_update_is_refused_and_a_good_one_writes():
    pm = _compiled({"input": [2, 6], "update": [2, 2], "start": [1]})
    data = {"input": np.zeros((2, 6)), "update": np.ones((2, 2))}
    out = np.asarray(pm.evaluate({}, {**data, "start": np.array([4])})["output"])
    np.testing.assert_array_equal(out, [[0, 0, 0, 0, 1, 1]] * 2)
    for bad in (5, -1):
        with pytest.raises(IndexRangeError, match=rf"'start' holds index {bad} .* \(valid: 0 <= index < 5\)"):
            pm.evaluate({}, {**data, "start": np.array([bad])})
