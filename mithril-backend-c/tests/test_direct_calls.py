"""evaluate's direct path (mithril.backends.direct): the C entry point checks its own inputs, reuses the address
of an input passed again as the same array, and hands anything unexpected back to PhysicalModel's checks."""

import mithril as ml
import numpy as np
import pytest
from mithril.errors import DtypeError, IndexRangeError, ModelKeyError, ShapeError
from mithril.extend import InputsNeedChecking
from mithril.models import Add, Embedding


@pytest.fixture
def add16():
    backend = ml.CBackend(dtype=ml.float32, threads=1)
    return ml.compile(Add(), backend, shapes={"left": [16], "right": [16]})


def test_direct_path_is_taken_and_reads_arrays_changed_in_place(add16) -> None:
    assert add16._direct_forward is not None
    left, right = np.arange(16, dtype=np.float32), np.ones(16, np.float32)
    first = add16.evaluate({}, {"left": left, "right": right})["output"]
    left += 10  # same array object, new contents: the held address reads them
    second = add16.evaluate({}, {"left": left, "right": right})["output"]
    np.testing.assert_array_equal(first, np.arange(16) + 1)
    np.testing.assert_array_equal(second, np.arange(16) + 11)
    assert second is not first  # outputs are fresh arrays every call


def test_strict_entry_refuses_what_it_would_convert(add16) -> None:
    strict = add16._direct_forward
    with pytest.raises(InputsNeedChecking):
        strict({}, {"left": [1.0] * 16, "right": np.ones(16, np.float32)})
    with pytest.raises(InputsNeedChecking):
        strict({}, {"left": np.ones(16, np.float64), "right": np.ones(16, np.float32)})
    with pytest.raises(InputsNeedChecking):
        strict({}, {"left": np.ones((2, 16), np.float32)[:, 0], "right": np.ones(16, np.float32)})


def test_unexpected_inputs_get_evaluates_own_errors_and_conversions(add16) -> None:
    ones = np.ones(16, np.float32)
    out = add16.evaluate({}, {"left": [2.0] * 16, "right": np.ones(16, np.float64)})["output"]
    np.testing.assert_array_equal(out, np.full(16, 3.0))
    assert out.dtype == np.float32
    with pytest.raises(ShapeError, match=r"'left' has shape \(3,\), expected \(16,\)"):
        add16.evaluate({}, {"left": np.ones(3, np.float32), "right": ones})
    with pytest.raises(ModelKeyError, match="missing \\['right'\\]"):
        add16.evaluate({}, {"left": ones})
    with pytest.raises(ModelKeyError):
        add16.evaluate({}, {"left": ones, "rigth": ones})
    np.testing.assert_array_equal(add16.evaluate({}, {"left": ones, "right": ones})["output"], np.full(16, 2.0))


def test_models_with_index_checks_keep_the_full_path() -> None:
    pm = ml.compile(Embedding(num_embeddings=5, dim=2), ml.CBackend(threads=1), shapes={"input": [3]})
    assert pm._direct_forward is None
    params = pm.randomize_params(seed=0)
    with pytest.raises(IndexRangeError, match="out of range"):
        pm.evaluate(params, {"input": np.array([0, 7, 1])})


def test_float_data_for_an_int_input_is_still_refused() -> None:
    pm = ml.compile(Embedding(num_embeddings=5, dim=2), ml.CBackend(threads=1), shapes={"input": [3]})
    with pytest.raises(DtypeError):
        pm.evaluate(pm.randomize_params(seed=0), {"input": np.array([0.5, 1.0, 2.0])})


def test_keys_reach_the_generated_caller_only_as_literals() -> None:
    """The caller is generated Python: a key that reads like code stays a string and is looked up as one."""
    from mithril.models import IOKey, Model, Multiply

    hostile = "x'] or __import__('os').system('false') or data['"
    model = Model()
    model |= Multiply()(left=IOKey(hostile), right="w\n", output=IOKey('y"""'))
    pm = ml.compile(model, ml.CBackend(dtype=ml.float64, threads=1), shapes={hostile: [3], "w\n": [3]})
    x, w = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0])
    out = pm.evaluate({}, {hostile: x, "w\n": w})
    np.testing.assert_array_equal(out['y"""'], x * w)
    with pytest.raises(KeyError):
        pm._forward({}, {"x": x, "w\n": w})  # the literal key, not an expression around it, is what is read
