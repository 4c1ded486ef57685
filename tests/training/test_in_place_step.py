"""PyTorch's eager training step writes the next state into the state it is given, as ``torch.optim`` does:
the numbers equal the out-of-place step's, the consumed state is refused, and outputs stay this step's."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
import torch
from mithril import optim
from mithril.errors import ArgumentError
from mithril.models import Linear, Mean, Model, Reshape, SquaredError, TrainModel

from ._mlp import SHAPES, batches, train_model


def _run(backend: ml.Backend, steps: int, **options: object) -> tuple[ml.TrainState, list[float]]:
    pm = ml.compile(train_model(), backend, shapes=SHAPES, optimizer=optim.AdamW(lr=0.05, weight_decay=0.1), **options)
    state = pm.init_state(pm.randomize_params(seed=3))
    losses = []
    for batch in batches(steps):
        state, outputs = pm.train_step(state, batch)
        losses.append(float(outputs["final_cost"]))
    return state, losses


def test_in_place_step_equals_the_out_of_place_steps() -> None:
    torch_state, torch_losses = _run(ml.TorchBackend(dtype=ml.float64), 4)
    numpy_state, numpy_losses = _run(ml.NumpyBackend(dtype=ml.float64), 4)
    np.testing.assert_allclose(torch_losses, numpy_losses, rtol=1e-10)
    for key, value in numpy_state.params.items():
        np.testing.assert_allclose(torch_state.params[key].numpy(), value, rtol=1e-10, atol=1e-12)
        for slot in ("m", "v"):
            np.testing.assert_allclose(
                torch_state.opt_state[slot][key].numpy(), numpy_state.opt_state[slot][key], rtol=1e-10, atol=1e-14
            )


def test_the_consumed_state_holds_the_next_one_and_is_refused() -> None:
    backend = ml.TorchBackend(dtype=ml.float64)
    pm = ml.compile(train_model(), backend, shapes=SHAPES, optimizer=optim.Adam(lr=0.05))
    state = pm.init_state(pm.randomize_params(seed=0))
    batch = batches(1)[0]
    new_state, _ = pm.train_step(state, batch)
    assert state.consumed and not new_state.consumed
    for key, tensor in state.params.items():  # updated where it lies: no fresh parameter tensors
        assert new_state.params[key].data_ptr() == tensor.data_ptr()
    with pytest.raises(ArgumentError, match="consumed by an earlier train_step"):
        pm.train_step(state, batch)
    pm.train_step(new_state, batch)  # the returned state goes on


def test_jit_and_numpy_steps_leave_the_given_state_valid() -> None:
    batch = batches(1)[0]
    for backend, options in (
        (ml.NumpyBackend(dtype=ml.float64), {}),
        (ml.TorchBackend(dtype=ml.float64), {"jit": True}),
    ):
        pm = ml.compile(train_model(), backend, shapes=SHAPES, optimizer=optim.AdamW(lr=0.05), **options)
        state = pm.init_state(pm.randomize_params(seed=0))
        before = {k: np.array(backend.to_numpy(v)) for k, v in state.params.items()}
        pm.train_step(state, batch)
        assert not state.consumed
        for key, value in state.params.items():
            np.testing.assert_array_equal(np.asarray(backend.to_numpy(value)), before[key])


def test_an_output_viewing_a_parameter_keeps_this_steps_value() -> None:
    model = Model()
    model |= Linear(2)(input="input", weight="w", output="output")
    model |= Reshape(shape=(4,))(input="w", output="flat_weight")  # a view of the parameter on PyTorch
    train = TrainModel(model)
    train.add_loss(SquaredError(), reduce_steps=[Mean()], input="output", target="target")
    shapes = {"input": [5, 2], "target": [5, 2]}
    rng = np.random.default_rng(0)
    batch = {"input": rng.standard_normal((5, 2)), "target": rng.standard_normal((5, 2))}
    backend = ml.TorchBackend(dtype=ml.float64)
    pm = ml.compile(train, backend, shapes=shapes, optimizer=optim.Adam(lr=0.5))
    state = pm.init_state(pm.randomize_params(seed=1))
    weight = state.params["w"].numpy().copy()
    new_state, outputs = pm.train_step(state, batch)
    np.testing.assert_array_equal(outputs["flat_weight"].numpy(), weight.reshape(4))
    assert not np.allclose(new_state.params["w"].numpy(), weight)
    assert isinstance(outputs["flat_weight"], torch.Tensor)


def _race(pm: ml.PhysicalModel, state: ml.TrainState, batch: dict, callers: int) -> list[str]:
    """``callers`` threads passing the same ``state`` to ``train_step`` at once: what each got."""
    import threading

    start, results = threading.Barrier(callers), []

    def step() -> None:
        start.wait()
        try:
            pm.train_step(state, batch)
            results.append("updated")
        except ArgumentError as error:
            assert "consumed" in str(error)
            results.append("refused")

    threads = [threading.Thread(target=step) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results)


def test_one_state_given_to_several_threads_is_updated_once() -> None:
    backend = ml.TorchBackend(dtype=ml.float64)
    pm = ml.compile(train_model(), backend, shapes=SHAPES, optimizer=optim.Adam(lr=0.05))
    batch = batches(1)[0]
    for _ in range(5):
        assert _race(pm, pm.init_state(pm.randomize_params(seed=0)), batch, 4) == ["refused"] * 3 + ["updated"]
