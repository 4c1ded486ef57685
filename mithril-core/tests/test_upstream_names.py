"""Names of Mithril's published API that its example training scripts use: ``backend.rand_uniform`` and its
siblings (``randn``/``rand``/``randint`` with ``key=``), ``backend.linspace``/``stack``/``pi``, the array type
``backend.DataType`` and the type variable ``mithril.types.DataType`` (``ml.Backend[DataType]``), the time-slot
helpers of ``mithril.utils.utils``, and ``TrainModel``'s ``final_cost`` under Mithril's exposure rule."""

from __future__ import annotations

import math

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, DtypeError
from mithril.models import Linear, Mean, Model, SquaredError, TrainModel
from mithril.types import DataType
from mithril.utils.utils import pack_data_into_time_slots, unpack_time_slot_data


def _backends() -> list:
    found = []
    for name in ("NumpyBackend", "TorchBackend"):
        try:
            found.append(getattr(ml, name)())
        except Exception:  # plugin not installed here
            continue
    return found


BACKENDS = pytest.mark.parametrize("backend", _backends(), ids=lambda b: type(b).__name__)


# -- random draws -------------------------------------------------------------------------------------
@BACKENDS
def test_rand_uniform_range_shape_dtype(backend):
    draws = backend.rand_uniform(-2.0, 3.0, 4000)
    values = backend.to_numpy(draws)
    assert values.shape == (4000,) and values.dtype == np.float32
    assert values.min() >= -2.0 and values.max() < 3.0
    assert values.min() < -1.9 and values.max() > 2.9  # covers the interval
    assert abs(values.mean() - 0.5) < 0.1  # the middle of [-2, 3)
    assert backend.to_numpy(backend.rand_uniform(0, 1, 2, 3, dtype=ml.float64)).dtype == np.float64
    assert backend.shape_of(backend.rand_uniform(0, 1, (2, 3))) == (2, 3)
    scalar = backend.rand_uniform(0, 2 * backend.pi)  # no shape: one number, as the sine example draws it
    assert backend.shape_of(scalar) == () and 0 <= float(scalar) < 2 * math.pi


@BACKENDS
def test_rand_uniform_broadcasts_array_bounds(backend):
    low, high = backend.array([0.0, 10.0, 100.0]), backend.array([1.0, 11.0, 101.0])
    values = backend.to_numpy(backend.rand_uniform(low, high, 500, 3))
    assert values.shape == (500, 3)
    assert (values >= [0, 10, 100]).all() and (values <= [1, 11, 101]).all()  # high by rounding, as in NumPy
    assert (values < [1, 11, 101]).mean() > 0.99 and np.allclose(values.mean(axis=0), [0.5, 10.5, 100.5], atol=0.1)


@BACKENDS
def test_key_seeds_one_draw_and_leaves_the_generator_alone(backend):
    make = type(backend)
    first, second = make(seed=3), make(seed=3)
    for draw in ("randn", "rand"):
        a = backend.to_numpy(getattr(first, draw)(5, key=11))
        b = backend.to_numpy(getattr(second, draw)(5, key=11))
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, backend.to_numpy(getattr(first, draw)(5, key=12)))
    np.testing.assert_array_equal(
        backend.to_numpy(first.rand_uniform(1.0, 2.0, 6, key=4)),
        backend.to_numpy(second.rand_uniform(1.0, 2.0, 6, key=4)),
    )
    np.testing.assert_array_equal(
        backend.to_numpy(first.randint(0, 100, 6, key=4)), backend.to_numpy(second.randint(0, 100, 6, key=4))
    )
    # keyed draws did not advance the backend's generator: both continue as a fresh backend seeded 3 does
    fresh = make(seed=3)
    np.testing.assert_array_equal(backend.to_numpy(first.randn(4)), backend.to_numpy(fresh.randn(4)))
    np.testing.assert_array_equal(backend.to_numpy(second.randn(4)), backend.to_numpy(make(seed=3).randn(4)))
    with pytest.raises(ArgumentError, match="key must be a non-negative int"):
        backend.rand(2, key=-1)


@BACKENDS
def test_randint_takes_mithrils_signature(backend):
    spread = backend.to_numpy(backend.randint(-3, 4, 3000))  # shape as positional ints
    assert spread.dtype == np.int64 and spread.shape == (3000,)
    assert sorted(set(spread.tolist())) == list(range(-3, 4))
    assert backend.shape_of(backend.randint(0, 5, (2, 3))) == (2, 3)  # ... or as one tuple (the manual's form)
    assert backend.shape_of(backend.randint(0, 5, 2, 3)) == (2, 3)
    assert backend.to_numpy(backend.randint(0, 5, 4, dtype=ml.int32)).dtype == np.int32
    with pytest.raises(ArgumentError, match=r"high .* must be greater than low"):
        backend.randint(5, 5, 3)
    with pytest.raises(DtypeError, match="integer dtype"):
        backend.randint(0, 5, 3, dtype=ml.float32)


# -- creation, constants, array type -----------------------------------------------------------------
@BACKENDS
def test_linspace_stack_and_constants(backend):
    np.testing.assert_allclose(backend.to_numpy(backend.linspace(0, 1, 5)), [0.0, 0.25, 0.5, 0.75, 1.0])
    assert backend.to_numpy(backend.linspace(0, 1, 5)).dtype == np.float32  # the backend float dtype, ints given
    start = backend.array(1.0)  # a 0-d array as start, as the sine example gives it
    np.testing.assert_allclose(backend.to_numpy(backend.linspace(start, start + 2, 3)), [1.0, 2.0, 3.0])
    rows = [backend.array([1.0, 2.0]), backend.array([3.0, 4.0]), backend.array([5.0, 6.0])]
    np.testing.assert_array_equal(backend.to_numpy(backend.stack(rows)), [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(backend.to_numpy(backend.stack(rows, axis=-1)), [[1, 3, 5], [2, 4, 6]])
    scalars = [backend.array(float(i)) for i in range(4)]
    np.testing.assert_array_equal(backend.to_numpy(backend.stack(scalars, axis=0)), [0, 1, 2, 3])
    with pytest.raises(ArgumentError, match="different shapes"):
        backend.stack([backend.zeros(2), backend.zeros(3)])
    with pytest.raises(ArgumentError, match="non-empty"):
        backend.stack([])
    assert (backend.pi, backend.e, backend.inf) == (math.pi, math.e, math.inf)


def test_data_type_names():
    numpy_backend = ml.NumpyBackend()
    assert numpy_backend.DataType is np.ndarray is numpy_backend.get_backend_array_type()
    assert isinstance(numpy_backend.randn(2), numpy_backend.DataType)
    torch = pytest.importorskip("torch")
    assert ml.TorchBackend().DataType is torch.Tensor
    # the type variable: one object under all its names, and Backend is generic over it
    from mithril.framework import tensor_types

    assert DataType is ml.DataType is tensor_types.DataType
    assert ml.Backend[DataType].__origin__ is ml.Backend
    assert dict[str, numpy_backend.DataType] == dict[str, np.ndarray]


# -- time slots ---------------------------------------------------------------------------------------
def _sequences(backend):
    """Three samples (sequence, target) of lengths 2, 3, 1 (feature width 1), values telling them apart."""
    return [
        (backend.array([[1.0], [2.0]]), backend.array([[10.0]])),
        (backend.array([[3.0], [4.0], [5.0]]), backend.array([[20.0], [21.0]])),
        (backend.array([[6.0]]), backend.array([[30.0], [31.0], [32.0]])),
    ]


@BACKENDS
def test_pack_sorts_longest_first_and_slots_each_step(backend):
    data = _sequences(backend)
    slots, data_sorted = pack_data_into_time_slots(backend=backend, data=data, key=("input",), index=0)
    expected = {"input0": [[[3.0]], [[1.0]], [[6.0]]], "input1": [[[4.0]], [[2.0]]], "input2": [[[5.0]]]}
    assert {k: backend.to_numpy(v).tolist() for k, v in slots.items()} == expected
    assert [backend.to_numpy(d[0]).tolist() for d in data_sorted] == [[[3.0], [4.0], [5.0]], [[1.0], [2.0]], [[6.0]]]

    # the targets of the input-sorted samples, sorted by their own lengths, with the permutation
    indices, targets, by_target = pack_data_into_time_slots(
        backend=backend, data=data_sorted, key=("target",), index=1, return_indices=True
    )
    assert indices == (2, 0, 1)  # data_sorted's samples 2 (3 steps), 0 (2 steps), 1 (1 step)
    assert {k: backend.to_numpy(v).tolist() for k, v in targets.items()} == {
        "target0": [[[30.0]], [[20.0]], [[10.0]]], "target1": [[[31.0]], [[21.0]]], "target2": [[[32.0]]],
    }  # fmt: skip
    assert [backend.to_numpy(d[1]).shape[0] for d in by_target] == [3, 2, 1]


@BACKENDS
def test_pack_keeps_ties_in_order_and_takes_given_lengths(backend):
    data = [(backend.array([[float(i)], [float(i) + 0.5]]),) for i in range(3)]  # all of length 2
    slots, _ = pack_data_into_time_slots(data, backend, key="x")
    assert backend.to_numpy(slots["x0"])[:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    slots, _ = pack_data_into_time_slots(data, backend, lengths=[1, 2, 2], key="x")  # sample 0: only its first step
    assert backend.to_numpy(slots["x0"])[:, 0, 0].tolist() == [1.0, 2.0, 0.0]
    assert backend.to_numpy(slots["x1"])[:, 0, 0].tolist() == [1.5, 2.5]
    with pytest.raises(ArgumentError, match="not in decreasing order"):
        pack_data_into_time_slots(_sequences(backend), backend, sorted_data=True)
    with pytest.raises(ArgumentError, match="lengths\\[0\\] = 3, but sample 0 has 2 steps"):
        pack_data_into_time_slots(data, backend, lengths=[3, 2, 2])


@BACKENDS
def test_unpack_round_trip_restores_the_original_order(backend):
    data = _sequences(backend)
    indices, slots, _ = pack_data_into_time_slots(data, backend, key=("out",), return_indices=True)
    assert indices == (1, 0, 2)
    joined = unpack_time_slot_data(backend, slots, max_length=3, max_size=3, output_dim=1, key="out")
    assert backend.to_numpy(joined)[:, :, 0].tolist() == [[3.0, 4.0, 5.0], [1.0, 2.0, 0.0], [6.0, 0.0, 0.0]]
    restored = unpack_time_slot_data(
        backend, slots, max_length=3, max_size=3, output_dim=1, key="out", indices=list(indices)
    )
    assert backend.to_numpy(restored)[:, :, 0].tolist() == [[1.0, 2.0, 0.0], [3.0, 4.0, 5.0], [6.0, 0.0, 0.0]]
    with pytest.raises(ArgumentError, match=r"none of out0 \.\.\. out2"):
        unpack_time_slot_data(backend, {}, max_length=3, max_size=3, output_dim=1, key="out")


# -- TrainModel under Mithril's exposure rule ------------------------------------------------------------
@pytest.mark.parametrize("expose_first", [True, False])
def test_final_cost_stays_an_output_next_to_exposed_keys(expose_first):
    model = Model()
    model |= Linear(1)
    train = TrainModel(model)
    if expose_first:
        train.expose_keys(predictions=model.cout)
    train.add_loss(SquaredError(), input=model.cout, target="target", reduce_steps=[Mean()])
    if not expose_first:
        train.expose_keys(predictions=model.cout)
    assert sorted(train.output_keys) == ["final_cost", "predictions"]


def test_train_model_outputs_are_the_exposed_keys_of_the_wrapped_model():
    model = Model()
    model |= Linear(1)(input="input", output="age")
    model |= Linear(1)(input="input", output="score")
    model.expose_keys("age")
    train = TrainModel(model)
    train.add_loss(SquaredError(), input="age", target="target", reduce_steps=[Mean()], key_name="age_loss")
    assert sorted(train.output_keys) == ["age", "age_loss", "final_cost"]  # no loss result as a stray "output"
