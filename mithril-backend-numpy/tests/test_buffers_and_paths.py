"""Buffers (non-trainable state passed with the parameters), state updates, logical input paths and the
``positions`` primitive with run-time lengths, on the NumPy backend."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ModelConnectionError, ModelKeyError, ShapeError
from mithril.models import Add, BatchNorm2d, Embedding, IOKey, Linear, Model, Positions, Relu


def _counter() -> Model:
    """``next = count + input.sum()`` with ``count`` a buffer updated to ``next``."""
    model = Model()
    model |= Linear(2, name="fc")(input="input", output=IOKey("output"))
    model |= Add()(
        left=IOKey("count", buffer=True, shape=[1, 2], init="zeros"), right=model.output, output=IOKey("next")
    )
    model.set_buffer_update("count", "next")
    return model


def test_buffers_travel_with_params_and_get_no_gradient():
    pm = ml.compile(_counter(), ml.NumpyBackend(dtype=ml.float64), shapes={"input": [1, 3]})
    assert pm.param_keys == ["weight", "bias"]
    assert pm.buffer_keys == ["count"]
    assert pm.data_keys == ["input"]
    params = pm.randomize_params(seed=0)
    np.testing.assert_array_equal(params["count"], np.zeros((1, 2)))
    outputs, grads = pm.evaluate(params, {"input": np.ones((1, 3))}, output_gradients={"output": np.ones((1, 2))})
    assert set(grads) == {"weight", "bias"}
    np.testing.assert_allclose(outputs["next"], params["count"] + outputs["output"])


def test_state_update_names_the_output_and_update_buffers_applies_it():
    pm = ml.compile(_counter(), ml.NumpyBackend(dtype=ml.float64), shapes={"input": [1, 3]})
    assert pm.buffer_updates == {"count": "next"}  # already exposed: its name is kept
    params = pm.randomize_params(seed=0)
    x = {"input": np.ones((1, 3))}
    for _ in range(3):
        params = pm.update_buffers(params, pm.evaluate(params, x))
    out = pm.evaluate(params, x)["output"]
    np.testing.assert_allclose(params["count"], 3 * out)
    with pytest.raises(ModelKeyError, match="next"):
        pm.update_buffers(params, {"output": out})


def test_unexposed_state_update_becomes_a_named_output():
    pm = ml.compile(BatchNorm2d(3), ml.NumpyBackend(), shapes={"input": [2, 3, 4, 4]})
    assert pm.buffer_updates == {"running_mean": "running_mean_new", "running_var": "running_var_new"}
    assert "running_mean_new" in pm.output_keys
    discarded = ml.compile(
        BatchNorm2d(3),
        ml.NumpyBackend(),
        shapes={"input": [2, 3, 4, 4]},
        discard_keys={"running_mean_new", "running_var_new"},
    )
    assert discarded.output_keys == ["output"] and discarded.buffer_updates == {}


def test_a_buffer_named_in_data_keys_is_runtime_data():
    pm = ml.compile(
        BatchNorm2d(3, use_batch_stats=False),
        ml.NumpyBackend(),
        shapes={"input": [2, 3, 4, 4]},
        data_keys={"running_mean"},
    )
    assert pm.buffer_keys == ["running_var"] and "running_mean" in pm.data_keys


def test_missing_buffer_is_named_in_the_error():
    pm = ml.compile(_counter(), ml.NumpyBackend(), shapes={"input": [1, 3]})
    params = pm.randomize_params(seed=0)
    del params["count"]
    with pytest.raises(ModelKeyError, match=r"missing \['count'\]"):
        pm.evaluate(params, {"input": np.ones((1, 3))})


def test_buffers_are_saved_and_loaded_with_the_parameters(tmp_path):
    pm = ml.compile(_counter(), ml.NumpyBackend(dtype=ml.float64), shapes={"input": [1, 3]})
    params = pm.randomize_params(seed=0)
    params["count"] = np.array([[1.5, -2.0]])
    pm.save_params(tmp_path / "p.npz", params)
    loaded = pm.load_params(tmp_path / "p.npz")
    np.testing.assert_array_equal(loaded["count"], params["count"])


def test_set_buffer_update_rejects_non_buffers_and_inputs():
    model = Model()
    model |= Add()(left="a", right=IOKey("b", buffer=True, shape=[2]), output="c")
    with pytest.raises(ModelConnectionError, match="not a buffer"):
        model.set_buffer_update("a", "c")
    with pytest.raises(ModelConnectionError, match="computed by the model"):
        model.set_buffer_update("b", "a")
    mismatch = Model()
    mismatch |= Add()(left=IOKey("s", buffer=True, shape=[2]), right=IOKey("x", shape=[3, 2]), output="y")
    with pytest.raises(ShapeError, match="set_buffer_update"):
        mismatch.set_buffer_update("s", "y")
    with pytest.raises(ValueError, match="never differentiated"):
        IOKey("x", buffer=True, differentiable=True)


@pytest.mark.parametrize("short", [True, False])
def test_input_paths_are_the_logical_paths_in_both_naming_modes(short):
    model = Model()
    model |= Linear(4, name="h.0")(input="input")
    model += Relu()
    model += Linear(2, name="h.1")(output=IOKey("output"))
    pm = ml.compile(model, ml.NumpyBackend(), shapes={"input": [1, 3]}, use_short_namings=short)
    paths = pm.input_paths
    assert sorted(paths.values()) == ["h.0.bias", "h.0.weight", "h.1.bias", "h.1.weight", "input"]
    assert (set(paths) == set(paths.values())) is (not short)


def test_positions_follow_the_run_time_length():
    model = Model()
    model |= Positions(axis=1)(input="input", output="pos")
    model |= Embedding(16, 3, name="wpe")(input="pos", output=IOKey("output"))
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), data_keys={"input"})
    params = pm.randomize_params(seed=0)
    for length in (2, 5):
        out = pm.evaluate(params, {"input": np.zeros((1, length), dtype=np.int64)})["output"]
        np.testing.assert_array_equal(out, params["weight"][:length])
