"""Mithril's list-valued keys: ``Concat``'s ``input`` takes a list, given with ``set_values`` (its length sizes
the model), as ``evaluate``'s data or parameters, and comes back as a list of gradients; ``Concat`` reads a
``ToList`` of tensors; the concatenation's gradient splits where the sizes add up when the model runs."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError
from mithril.models import Concat, IOKey, Model, ToList


def test_a_list_of_trainable_members_sizes_concat_and_returns_a_list_of_gradients():
    model = Concat(axis=None)
    model.set_values(input=[ml.Tensor[float](differentiable=True) for _ in range(3)])
    assert model.input_keys == ["input_0", "input_1", "input_2"]
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64))
    parts = [np.ones((1, 4)), np.arange(4.0).reshape(4, 1), np.full((2,), 7.0)]
    seed = np.arange(10.0)
    outputs, grads = pm.evaluate({"input": parts}, output_gradients={"output": seed})
    np.testing.assert_array_equal(outputs["output"], np.concatenate([p.reshape(-1) for p in parts]))
    assert [g.shape for g in grads["input"]] == [(1, 4), (4, 1), (2,)]  # sizes known only when it runs
    np.testing.assert_array_equal(np.concatenate([g.reshape(-1) for g in grads["input"]]), seed)


def test_a_list_of_the_wrong_length_is_refused():
    model = Concat(axis=0)
    model.set_values(input=[ml.Tensor[float](differentiable=True) for _ in range(2)])
    pm = ml.compile(model, ml.NumpyBackend())
    with pytest.raises(ArgumentError, match="list of 2 arrays"):
        pm.evaluate({"input": [np.ones(2)]})
    parent = Model()
    parent |= model  # once part of another model, the list's length is fixed
    with pytest.raises(ArgumentError, match="list of 2 values, got 3"):
        model.set_values(input=[1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "backend", [ml.NumpyBackend(dtype=ml.float64), ml.TorchBackend(dtype=ml.float64)], ids=lambda b: type(b).__name__
)
def test_concat_of_a_to_list_of_tensors_matches_numpy_with_gradients(backend):
    model = Model()
    model |= ToList(3).connect(input1="a", input2="b", input3="c")
    model |= Concat(axis=-1).connect(input=model.cout, output=IOKey("output"))
    pm = ml.compile(
        model, backend, trainable_keys={"a", "b", "c"}, shapes={"a": [2, None], "b": [2, None], "c": [2, None]}
    )
    rng = np.random.default_rng(0)
    arrays = {k: rng.normal(size=(2, n)) for k, n in zip("abc", (1, 3, 2), strict=True)}
    seed = rng.normal(size=(2, 6))
    out, grads = pm.evaluate(
        {k: backend.array(v) for k, v in arrays.items()}, output_gradients={"output": backend.array(seed)}
    )
    np.testing.assert_allclose(backend.to_numpy(out["output"]), np.concatenate(list(arrays.values()), axis=-1))
    for key, (lo, hi) in zip("abc", ((0, 1), (1, 4), (4, 6)), strict=True):
        np.testing.assert_allclose(backend.to_numpy(grads[key]), seed[:, lo:hi])
