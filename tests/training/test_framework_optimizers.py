"""``optimizer=`` takes the frameworks' own optimizers too: an ``optax.GradientTransformation`` on JAX and a
``torch.optim`` class on PyTorch, with ``fit`` and ``save_state``/``load_state`` working as for Mithril's."""

from __future__ import annotations

import functools

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.errors import ArgumentError, CheckpointError

from ._mlp import SHAPES, batches, train_model
from .test_optimizers import torch_losses

optax = pytest.importorskip("optax")


def _run(pm: ml.PhysicalModel, params: dict, data: list) -> tuple[list[float], ml.TrainState]:
    state = pm.init_state(params)
    losses = []
    for batch in data:
        state, outputs = pm.train_step(state, batch)
        losses.append(float(np.asarray(pm.backend.to_numpy(outputs["final_cost"]))))
    return losses, state


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_optax_on_jax_matches_torch_adamw(jit: bool) -> None:
    pm = ml.compile(
        train_model(),
        ml.JaxBackend(dtype=ml.float64),
        shapes=SHAPES,
        optimizer=optax.adamw(0.01, weight_decay=0.1),
        jit=jit,
    )
    params = pm.randomize_params(seed=0)
    initial = {k: np.array(v) for k, v in params.items()}
    data = batches(5)
    losses, state = _run(pm, params, data)
    expected, final = torch_losses(
        initial, lambda t: torch.optim.AdamW(list(t.values()), lr=0.01, weight_decay=0.1), data
    )
    np.testing.assert_allclose(losses, expected, rtol=1e-10)
    for key in final:
        np.testing.assert_allclose(np.asarray(state.params[key]), final[key], rtol=1e-9, atol=1e-12)
    assert state.step_count == 5


def test_torch_optim_class_on_torch_matches_a_torch_loop() -> None:
    make = functools.partial(torch.optim.AdamW, lr=0.01, weight_decay=0.1)
    pm = ml.compile(train_model(), ml.TorchBackend(dtype=ml.float64), shapes=SHAPES, optimizer=make)
    params = pm.randomize_params(seed=0)
    initial = {k: v.numpy().copy() for k, v in params.items()}
    data = batches(5)
    losses, state = _run(pm, params, data)
    expected, final = torch_losses(initial, lambda t: make(list(t.values())), data)
    np.testing.assert_allclose(losses, expected, rtol=1e-12)
    assert isinstance(state.opt_state, torch.optim.AdamW)
    for key in final:
        np.testing.assert_allclose(state.params[key].numpy(), final[key], rtol=1e-12)
    np.testing.assert_array_equal(params["weight"].numpy(), initial["weight"])  # the caller's arrays are untouched


@pytest.mark.parametrize("backend_name", ["JaxBackend", "TorchBackend"])
def test_framework_optimizer_states_save_and_resume(tmp_path, backend_name: str) -> None:
    optimizer = optax.adam(0.02) if backend_name == "JaxBackend" else functools.partial(torch.optim.Adam, lr=0.02)
    pm = ml.compile(train_model(), getattr(ml, backend_name)(dtype=ml.float64), shapes=SHAPES, optimizer=optimizer)
    params = pm.randomize_params(seed=1)
    data = batches(4)
    whole, _ = ml.fit(pm, pm.init_state(params), data, epochs=2)
    first, _ = ml.fit(pm, pm.init_state(params), data, epochs=1)
    ml.save_state(first, tmp_path / "state.safetensors")
    resumed, _ = ml.fit(pm, ml.load_state(pm, tmp_path / "state.safetensors"), data, epochs=1)
    assert resumed.step_count == whole.step_count == 8
    for key in whole.params:
        np.testing.assert_allclose(
            pm.backend.to_numpy(resumed.params[key]), pm.backend.to_numpy(whole.params[key]), rtol=1e-12
        )
    mithril_pm = ml.compile(
        train_model(), getattr(ml, backend_name)(dtype=ml.float64), shapes=SHAPES, optimizer=ml.optim.Adam(lr=0.02)
    )
    with pytest.raises(CheckpointError, match="optimizer"):
        ml.load_state(mithril_pm, tmp_path / "state.safetensors")


def test_framework_optimizers_on_other_backends_are_refused() -> None:
    with pytest.raises(ArgumentError, match="optax GradientTransformation runs on JaxBackend, not NumpyBackend"):
        ml.compile(train_model(), ml.NumpyBackend(), shapes=SHAPES, optimizer=optax.sgd(0.1))
    with pytest.raises(ArgumentError, match=r"torch\.optim optimizer runs on TorchBackend, not JaxBackend"):
        ml.compile(train_model(), ml.JaxBackend(), shapes=SHAPES, optimizer=torch.optim.SGD)
    holding = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ArgumentError, match=r"pass the torch\.optim class"):
        ml.compile(train_model(), ml.TorchBackend(), shapes=SHAPES, optimizer=holding)


def test_states_of_another_optimizer_or_a_donated_state_are_refused() -> None:
    data = batches(1)[0]
    optax_pm = ml.compile(
        train_model(), ml.JaxBackend(dtype=ml.float64), shapes=SHAPES, optimizer=optax.adam(0.01), jit=True
    )
    mithril_pm = ml.compile(
        train_model(), ml.JaxBackend(dtype=ml.float64), shapes=SHAPES, optimizer=ml.optim.Adam(lr=0.01), jit=True
    )
    optax_state, mithril_state = optax_pm.init_state(), mithril_pm.init_state()
    with pytest.raises(ArgumentError, match="does not have the structure"):
        optax_pm.train_step(mithril_state, data)
    with pytest.raises(ArgumentError, match="optimizer state is a tuple"):
        mithril_pm.train_step(optax_state, data)
    sgd_state = ml.compile(
        train_model(), ml.JaxBackend(dtype=ml.float64), shapes=SHAPES, optimizer=optax.sgd(0.1)
    ).init_state()
    with pytest.raises(ArgumentError, match="does not have the structure"):
        optax_pm.train_step(sgd_state, data)
    new_state, _ = mithril_pm.train_step(mithril_state, data)  # mithril_state's buffers are donated
    with pytest.raises(ArgumentError, match="was donated to an earlier train_step"):
        mithril_pm.train_step(mithril_state, data)
    mithril_pm.train_step(new_state, data)
    torch_pm = ml.compile(train_model(), ml.TorchBackend(dtype=ml.float64), shapes=SHAPES, optimizer=torch.optim.SGD)
    state = torch_pm.init_state()
    copied = ml.TrainState({k: v.clone() for k, v in state.params.items()}, state.opt_state, state.step)
    with pytest.raises(ArgumentError, match="does not hold this state's parameter tensors"):
        torch_pm.train_step(copied, data)
    with pytest.raises(ArgumentError, match="needs a closure"):
        ml.compile(train_model(), ml.TorchBackend(), shapes=SHAPES, optimizer=torch.optim.LBFGS)


def test_damaged_framework_optimizer_states_are_checkpoint_errors(tmp_path) -> None:
    import json

    for backend, optimizer in (
        (ml.JaxBackend(dtype=ml.float64), optax.adam(0.01)),
        (ml.TorchBackend(dtype=ml.float64), functools.partial(torch.optim.Adam, lr=0.01)),
    ):
        pm = ml.compile(train_model(), backend, shapes=SHAPES, optimizer=optimizer)
        state, _ = pm.train_step(pm.init_state(), batches(1)[0])
        path = ml.save_state(state, tmp_path / "s.safetensors")
        manifest_file = tmp_path / "s.manifest.json"
        good = json.loads(manifest_file.read_text())
        damages = [("step", "abc"), ("step", -1)]
        if backend.backend_type == "jax":
            damages.append(("external", {**good["external"], "arrays": []}))
        else:
            meta = good["external"]["meta"]
            damages += [
                ("external", {**good["external"], "meta": {**meta, "state": {"x": {}}}}),
                ("external", {**good["external"], "meta": {**meta, "state": {"0": {"exp_avg": 3}}}}),
                ("external", {**good["external"], "meta": {**meta, "state": {"0": {"exp_avg": {"tensor": "nope"}}}}}),
            ]
        for key, value in damages:
            manifest_file.write_text(json.dumps({**good, key: value}))
            with pytest.raises(CheckpointError):
                ml.load_state(pm, path)
