"""``ml.fit``, ``ml.save_state``/``ml.load_state`` and a killed run resumed from its checkpoint."""

from __future__ import annotations

import json

import mithril as ml
import numpy as np
import pytest
from mithril import optim
from mithril.errors import ArgumentError, CheckpointError, MithrilError, ModelKeyError
from mithril.models import AbsoluteError, Linear, Mean, Model, SquaredError, TrainModel
from mithril.training import Callback, EarlyStopping, LambdaCallback

from ._mlp import SHAPES, batches, train_model


def compiled(backend: ml.Backend, optimizer: optim.Optimizer | None = None) -> ml.PhysicalModel:
    return ml.compile(
        train_model(), backend, shapes=SHAPES, optimizer=optimizer or optim.AdamW(lr=0.01, weight_decay=0.1)
    )


def snapshot(state: ml.TrainState) -> dict[str, np.ndarray]:
    arrays = {f"param:{k}": np.array(v) for k, v in state.params.items()}
    arrays.update({f"{slot}:{k}": np.array(v) for slot, values in state.opt_state.items() for k, v in values.items()})
    arrays["step"] = np.array(state.step)
    return arrays


def test_fit_records_losses_and_epoch_logs() -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend)
    data = batches(6)
    state, history = ml.fit(pm, pm.init_state(pm.randomize_params(seed=0)), data, epochs=3, eval_batches=data[:2])
    assert state.step_count == 18 and len(history.loss) == 18
    assert [sorted(e) for e in history.epochs] == [["eval_loss", "loss"]] * 3
    np.testing.assert_allclose(history.epochs[0]["loss"], np.mean(history.loss[:6]))
    eval_loss = np.mean([float(pm.evaluate(state.params, b)["final_cost"]) for b in data[:2]])
    np.testing.assert_allclose(history.epochs[-1]["eval_loss"], eval_loss)
    assert history.epochs[-1]["loss"] < history.epochs[0]["loss"]


def test_fit_equals_a_loop_of_train_steps() -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend)
    data = batches(5)
    params = pm.randomize_params(seed=1)
    state, _ = ml.fit(pm, pm.init_state(params), data, epochs=2)
    by_hand = pm.init_state(params)
    for batch in data * 2:
        by_hand, _ = pm.train_step(by_hand, batch)
    assert all(np.array_equal(a, b) for a, b in zip(snapshot(state).values(), snapshot(by_hand).values(), strict=True))


def test_fit_reports_metrics_from_train_model() -> None:
    model = Model()
    model |= Linear(3)(input="input", output="output")
    train = TrainModel(model)
    train.add_loss(SquaredError(), reduce_steps=[Mean()], input="output", target="target")
    train.add_metric(AbsoluteError(), reduce_steps=[Mean()], key_name="mae", input="output", target="target")
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(train, backend, shapes={"input": [8, 2], "target": [8, 3]}, optimizer=optim.SGD(lr=0.1))
    rng = np.random.default_rng(0)
    data = [{"input": rng.standard_normal((8, 2)), "target": rng.standard_normal((8, 3))} for _ in range(3)]
    state, history = ml.fit(pm, pm.init_state(), data, epochs=2, eval_batches=data)
    assert {"loss", "mae", "eval_loss", "eval_mae"} == set(history.epochs[0])
    final = [pm.evaluate(state.params, b) for b in data]
    np.testing.assert_allclose(history.epochs[1]["eval_mae"], np.mean([float(o["mae"]) for o in final]))


def test_callbacks_and_early_stopping() -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend, optim.SGD(lr=1e-9))  # no progress: stops after `patience` epochs
    seen: list[tuple[str, int]] = []
    stopper = EarlyStopping(monitor="loss", patience=2, min_delta=1e-3)
    logger = LambdaCallback(
        on_step_end=lambda step, logs: seen.append(("step", step)),
        on_epoch_end=lambda epoch, logs: seen.append(("epoch", epoch)),
    )
    state, history = ml.fit(pm, pm.init_state(), batches(2), epochs=10, callbacks=[stopper, logger])
    assert len(history.epochs) == 3 and state.step_count == 6
    assert seen == [
        ("step", 1),
        ("step", 2),
        ("epoch", 0),
        ("step", 3),
        ("step", 4),
        ("epoch", 1),
        ("step", 5),
        ("step", 6),
        ("epoch", 2),
    ]

    class StopAtThree(Callback):
        def on_step_end(self, step: int, logs: dict) -> None:
            self.stop = step == 3

    state, history = ml.fit(pm, pm.init_state(), batches(5), epochs=2, callbacks=[StopAtThree()])
    assert state.step_count == 3 and len(history.epochs) == 1


class Killed(Exception):
    pass


@pytest.mark.parametrize("backend_name", ["NumpyBackend", "CBackend"])
def test_resumed_run_equals_uninterrupted_bitwise(tmp_path, backend_name: str) -> None:
    backend = getattr(ml, backend_name)(dtype=ml.float64)
    pm = compiled(backend)
    data = batches(4)
    params = pm.randomize_params(seed=2)
    whole, whole_history = ml.fit(pm, pm.init_state(params), data, epochs=3)

    def kill(step: int, logs: dict) -> None:
        if step == 6:  # in the second epoch, after the first epoch's checkpoint
            raise Killed

    with pytest.raises(Killed):
        ml.fit(
            pm,
            pm.init_state(params),
            data,
            epochs=3,
            checkpoint_dir=tmp_path,
            callbacks=[LambdaCallback(on_step_end=kill)],
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-4.history.json",
        "step-4.manifest.json",
        "step-4.safetensors",
    ]
    resumed, history = ml.fit(pm, pm.init_state(params), data, epochs=3, checkpoint_dir=tmp_path, resume=True)
    assert resumed.step_count == 12
    for key, value in snapshot(whole).items():
        assert np.array_equal(value, snapshot(resumed)[key]), key
    assert history.loss == whole_history.loss and history.epochs == whole_history.epochs


def test_state_round_trip_and_transfer_between_backends(tmp_path) -> None:
    """Train on PyTorch, save, continue on JAX: the same numbers as continuing on PyTorch."""
    torch_pm = compiled(ml.TorchBackend(dtype=ml.float64))
    data = batches(4)
    state, _ = ml.fit(torch_pm, torch_pm.init_state(torch_pm.randomize_params(seed=0)), data)
    path = ml.save_state(state, tmp_path / "state.safetensors")
    manifest = json.loads((tmp_path / "state.manifest.json").read_text())
    assert manifest["step"] == 4 and set(manifest["opt_state"]) == {"m", "v"}
    jax_pm = compiled(ml.JaxBackend(dtype=ml.float64))
    loaded = ml.load_state(jax_pm, path)
    assert loaded.step_count == 4 and type(loaded.params["weight"]).__module__.startswith("jax")
    on_jax, _ = jax_pm.train_step(loaded, data[0])
    on_torch, _ = torch_pm.train_step(state, data[0])
    for key in on_jax.params:
        np.testing.assert_allclose(np.asarray(on_jax.params[key]), on_torch.params[key].numpy(), rtol=1e-12)


def test_damaged_or_mismatched_states_are_refused(tmp_path) -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend)
    state = pm.init_state()
    path = ml.save_state(state, tmp_path / "s.safetensors")
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="does not match its manifest"):
        ml.load_state(pm, path)
    ml.save_state(state, path)
    sgd = compiled(backend, optim.SGD(lr=0.1, momentum=0.9))
    with pytest.raises(CheckpointError, match="optimizer slots differ"):
        ml.load_state(sgd, path)
    (tmp_path / "s.manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"manifest .* is missing"):
        ml.load_state(pm, path)
    with pytest.raises(ArgumentError, match=r"end in \.safetensors"):
        ml.save_state(state, tmp_path / "s.pkl")
    other = ml.compile(
        train_model(), backend, shapes={"input": [16, 5], "target": [16, 2]}, optimizer=optim.AdamW(lr=0.01)
    )
    ml.save_state(state, path)
    with pytest.raises(CheckpointError, match="'weight' has shape \\[8, 3\\]"):
        ml.load_state(other, path)


def test_train_step_checks_like_evaluate() -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend)
    state = pm.init_state()
    batch = batches(1)[0]
    with pytest.raises(ModelKeyError, match="missing \\['target'\\]"):
        pm.train_step(state, {"input": batch["input"]})
    with pytest.raises(ml.ShapeError, match="'input' has shape \\(16, 4\\)"):
        pm.train_step(state, {**batch, "input": np.zeros((16, 4))})
    with pytest.raises(ArgumentError, match=r"expected an ml\.TrainState"):
        pm.train_step(dict(state.params), batch)
    broken = ml.TrainState(
        state.params, {"m": state.opt_state["m"], "v": {**state.opt_state["v"], "weight": np.zeros((2, 2))}}, state.step
    )
    with pytest.raises(ArgumentError, match="slot 'v' of 'weight' is shape \\(2, 2\\)"):
        pm.train_step(broken, batch)
    plain = ml.compile(train_model(), backend, shapes=SHAPES)
    with pytest.raises(MithrilError, match="compiled without an optimizer"):
        plain.init_state()
    assert pm.loss_key == "final_cost" and isinstance(pm.optimizer, optim.AdamW)


def test_compile_options_are_checked() -> None:
    backend = ml.NumpyBackend()
    model = Model()
    model |= Linear(2)(input="input", output="output")
    with pytest.raises(ArgumentError, match="name the scalar output to minimise"):
        ml.compile(model, backend, shapes={"input": [4, 3]}, optimizer=optim.SGD())
    with pytest.raises(ArgumentError, match="the loss must be a scalar, got shape \\[4, 2\\]"):
        ml.compile(model, backend, shapes={"input": [4, 3]}, optimizer=optim.SGD(), loss="output")
    with pytest.raises(ModelKeyError, match="not an output"):
        ml.compile(model, backend, shapes={"input": [4, 3]}, optimizer=optim.SGD(), loss="nope")
    with pytest.raises(ArgumentError, match=r"takes a mithril\.optim optimizer"):
        ml.compile(train_model(), backend, shapes=SHAPES, optimizer="adam")
    with pytest.raises(ArgumentError, match="inference=True"):
        ml.compile(train_model(), backend, shapes=SHAPES, optimizer=optim.SGD(), inference=True)
    mean = Model()
    mean |= Linear(1)(input="input", output="output")
    mean |= Mean()(input="output", output="loss")
    pm = ml.compile(mean, backend, shapes={"input": [4, 3]}, optimizer=optim.SGD(lr=0.1), loss="loss")
    state, outputs = pm.train_step(pm.init_state(), {"input": np.ones((4, 3), np.float32)})
    assert set(outputs) == {"output", "loss"} and state.step_count == 1


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: optim.Adam(lr=-1.0), "lr must be a finite number > 0"),
        (lambda: optim.Adam(betas=(0.9, 1.0)), "betas\\[1\\] must be a number in \\[0.0, 1.0\\)"),
        (lambda: optim.SGD(nesterov=True), "nesterov=True needs momentum > 0"),
        (lambda: optim.AdamW(weight_decay=float("inf")), "weight_decay must be a finite number >= 0"),
        (lambda: optim.SGD(clip_norm=0.0), "clip_norm must be a finite number > 0"),
        (lambda: optim.AdamW(decay_mask="("), "not a valid regex"),
        (lambda: optim.schedules.join([optim.schedules.constant(1.0)], [3]), "1 schedules need 0 boundaries"),
    ],
)
def test_optimizer_arguments_are_checked(make, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        make()


def test_decay_masks() -> None:
    info = optim.ParamInfo
    adamw = optim.AdamW(weight_decay=0.1)
    assert adamw.decays(info("weight", "linear_0.weight", 2)) and not adamw.decays(info("bias", "linear_0.bias", 1))
    by_path = optim.AdamW(weight_decay=0.1, decay_mask=r"^linear_1\.")
    assert by_path.decays(info("weight_1", "linear_1.weight", 2)) and not by_path.decays(
        info("weight", "linear_0.weight", 2)
    )
    assert optim.SGD(weight_decay=0.1).decays(info("bias", "b", 1))
    assert not optim.SGD().decays(info("weight", "w", 2))  # no decay coefficient


def _kill_at(step_to_kill: int) -> LambdaCallback:
    def kill(step: int, logs: dict) -> None:
        if step == step_to_kill:
            raise Killed

    return LambdaCallback(on_step_end=kill)


def test_resume_counts_batches_not_updates(tmp_path) -> None:
    """Regressions: resume skipped ``state.step_count`` batches, wrong when the run started from a state that
    already had steps, and under fp16 loss scaling (skipped updates do not count)."""
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend)
    data = batches(4)
    start = pm.init_state(pm.randomize_params(seed=0))
    for batch in data[:3]:  # a state with 3 steps already
        start, _ = pm.train_step(start, batch)
    whole, whole_history = ml.fit(pm, start, data, epochs=2)
    with pytest.raises(Killed):
        ml.fit(pm, start, data, epochs=2, checkpoint_dir=tmp_path, callbacks=[_kill_at(6)])
    resumed, history = ml.fit(pm, start, data, epochs=2, checkpoint_dir=tmp_path, resume=True)
    assert resumed.step_count == whole.step_count == 11 and history.loss == whole_history.loss
    assert all(np.array_equal(a, b) for a, b in zip(snapshot(whole).values(), snapshot(resumed).values(), strict=True))


def test_resume_replays_finished_epochs_into_callbacks(tmp_path) -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend, optim.SGD(lr=1e-9))
    data = batches(2)
    whole, history = ml.fit(
        pm, pm.init_state(), data, epochs=10, callbacks=[EarlyStopping(monitor="loss", patience=2, min_delta=1e-3)]
    )
    with pytest.raises(Killed):
        ml.fit(
            pm,
            pm.init_state(),
            data,
            epochs=10,
            checkpoint_dir=tmp_path,
            callbacks=[EarlyStopping(monitor="loss", patience=2, min_delta=1e-3), _kill_at(5)],
        )
    stopper = EarlyStopping(monitor="loss", patience=2, min_delta=1e-3)
    resumed, resumed_history = ml.fit(
        pm, pm.init_state(), data, epochs=10, checkpoint_dir=tmp_path, resume=True, callbacks=[stopper]
    )
    assert len(resumed_history.epochs) == len(history.epochs) == 3 and resumed.step_count == whole.step_count == 6


def test_an_interrupted_checkpoint_is_passed_over(tmp_path) -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend)
    data = batches(2)
    ml.fit(pm, pm.init_state(), data, epochs=2, checkpoint_dir=tmp_path)
    (tmp_path / "step-4.history.json").unlink()  # killed while saving the second checkpoint
    assert ml.training.latest_checkpoint(tmp_path).name == "step-2.safetensors"
    (tmp_path / "step-2.history.json").write_text('{"loss": "abc", "epochs": [5], "batches": 2}')
    with pytest.raises(CheckpointError, match="is not a training history"):
        ml.fit(pm, pm.init_state(), data, epochs=2, checkpoint_dir=tmp_path, resume=True)


def test_fit_averages_per_sample_metrics() -> None:
    model = Model()
    model |= Linear(3)(input="input", output="output")
    train = TrainModel(model)
    train.add_loss(SquaredError(), input="output", target="target")
    train.add_metric(AbsoluteError(), key_name="mae", input="output", target="target")  # per element, unreduced
    pm = ml.compile(
        train,
        ml.NumpyBackend(dtype=ml.float64),
        shapes={"input": [8, 2], "target": [8, 3]},
        optimizer=optim.SGD(lr=1e-12),
    )
    rng = np.random.default_rng(0)
    batch = {"input": rng.standard_normal((8, 2)), "target": rng.standard_normal((8, 3))}
    state = pm.init_state()
    _, history = ml.fit(pm, state, [batch])
    np.testing.assert_allclose(history.epochs[0]["mae"], np.mean(pm.evaluate(state.params, batch)["mae"]), rtol=1e-9)


def test_fit_and_train_step_refuse_bad_input() -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = compiled(backend)
    state = pm.init_state()
    for kwargs, message in (
        ({"batches": lambda epoch: None}, "batches function returned NoneType"),
        ({"batches": batches(1), "callbacks": 3}, "expected a list of mithril.training.Callback"),
        ({"batches": batches(1), "checkpoint_dir": 5}, "expected a folder path"),
    ):
        with pytest.raises(ArgumentError, match=message):
            ml.fit(pm, state, **kwargs)
    assert ml.fit(pm, state, batches(1), callbacks=None)[0].step_count == 1
    for step, message in (
        (np.asarray(0.0), "step is shape \\(\\), dtype float64; expected a 0-d float32"),
        (np.zeros(3, np.float32), "step is shape \\(3,\\)"),
        ("0", "step is str"),
    ):
        float32 = compiled(ml.NumpyBackend())
        good = float32.init_state()
        with pytest.raises(ArgumentError, match=message):
            float32.train_step(ml.TrainState(good.params, good.opt_state, step), batches(1, np.float32)[0])
    with pytest.raises(ArgumentError, match="optimizer state is a tuple"):
        pm.train_step(ml.TrainState(state.params, ("m", "v"), state.step), batches(1)[0])
    with pytest.raises(ArgumentError, match="trains float32 or float64 parameters"):
        ml.compile(train_model(), ml.NumpyBackend(dtype=ml.float16), shapes=SHAPES, optimizer=optim.SGD())
