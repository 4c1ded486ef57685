"""``dynamic_update_slice`` in generated C (the KV-cache write of a chunk step): the values against NumPy,
a ``start`` out of range refused by the native code itself (computed, so core's data checks cannot see
it), and one check for every write of the same ``start``."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import IndexRangeError
from mithril.models import Add, IOKey, Model, Primitive

CACHE, CHUNK = [2, 3, 8, 4], [2, 3, 3, 4]  # [batch, heads, slots, head_dim], a chunk of 3 slots


def _writes(count: int) -> Model:
    """``count`` caches written at the same computed start (``first + shift``)."""
    model = Model()
    model |= Add()(left="first", right="shift", output="start")
    for i in range(count):
        write = Primitive("dynamic_update_slice", axis=2)
        model |= write(input=f"cache_{i}", update=f"new_{i}", start="start", output=IOKey(f"out_{i}"))
    model.set_types(first="int", shift="int")
    return model


def _compiled(count: int) -> tuple[ml.PhysicalModel, dict[str, np.ndarray]]:
    shapes = {"first": [1], "shift": [1]}
    for i in range(count):
        shapes.update({f"cache_{i}": CACHE, f"new_{i}": CHUNK})
    pm = ml.compile(_writes(count), ml.CBackend(dtype=ml.float32), shapes=shapes, data_keys=set(shapes))
    rng = np.random.default_rng(0)
    data = {"first": np.array([2]), "shift": np.array([0])}
    for i in range(count):
        data[f"cache_{i}"] = rng.standard_normal(CACHE).astype(np.float32)
        data[f"new_{i}"] = rng.standard_normal(CHUNK).astype(np.float32)
    return pm, data


@pytest.mark.parametrize("first", [0, 2, 5])
def test_writes_only_the_chunk_slots(first):
    pm, data = _compiled(2)
    data["first"] = np.array([first])
    out = pm.evaluate({}, data)
    for i in range(2):
        want = data[f"cache_{i}"].copy()
        want[:, :, first : first + 3] = data[f"new_{i}"]
        np.testing.assert_array_equal(np.asarray(out[f"out_{i}"]), want)


@pytest.mark.parametrize("shift", [4, -3, 1 << 40])
def test_a_start_out_of_range_is_an_error_naming_the_write(shift):
    """``start`` must leave room for the 3 slots of the chunk: ``0 <= start < 8 - 3 + 1``."""
    pm, data = _compiled(2)
    with pytest.raises(IndexRangeError, match=r"dynamic_update_slice.*0 <= index < 6") as caught:
        pm.evaluate({}, {**data, "shift": np.array([shift])})
    assert f"index {2 + shift}" in str(caught.value)


def test_the_same_start_is_checked_once():
    """The second write's check is implied by the first's (same value, same bound): the C source holds
    one check site for the two writes, and the error names the first."""
    source = ml.compile(
        _writes(2),
        ml.CBackend(dtype=ml.float32),
        shapes={"first": [1], "shift": [1], "cache_0": CACHE, "new_0": CHUNK, "cache_1": CACHE, "new_1": CHUNK},
        data_keys={"first", "shift", "cache_0", "new_0", "cache_1", "new_1"},
    ).source
    assert source.count("/* index check */") == 1, source
    assert source.count("dynamic_update_slice at") == 1
