"""``ml.compile(..., precision=...)``: bfloat16 compute with float32 parameters and optimizer state (JAX,
PyTorch), float16 with dynamic loss scaling (PyTorch), against hand-written PyTorch AMP loops."""

from __future__ import annotations

import functools
import itertools

import mithril as ml
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mithril import optim
from mithril.errors import ArgumentError

from ._mlp import SHAPES, batches, train_model


def torch_amp_loop(
    initial: dict, data: list, dtype: torch.dtype, scaler: torch.amp.GradScaler | None = None
) -> tuple[list[float], dict, list[float]]:
    """The MLP with torch.autocast (and a GradScaler for float16) and torch.optim.AdamW, as PyTorch's AMP recipe."""
    t = {k: torch.tensor(v, requires_grad=True) for k, v in initial.items()}
    opt = torch.optim.AdamW(list(t.values()), lr=0.01, weight_decay=0.0)
    losses, scales = [], []
    for batch in data:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            hidden = F.relu(F.linear(torch.from_numpy(batch["input"]), t["weight"], t["bias"]))
            out = F.linear(hidden, t["weight_1"], t["bias_1"])
            loss = torch.mean(torch.square(out - torch.from_numpy(batch["target"])))
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scales.append(scaler.get_scale())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().numpy() for k, v in t.items()}, scales


def mithril_run(
    backend: ml.Backend, precision: str | None, data: list, optimizer: object = None
) -> tuple[list[float], ml.TrainState, dict, list[float]]:
    pm = ml.compile(
        train_model(),
        backend,
        shapes=SHAPES,
        optimizer=optimizer or optim.AdamW(lr=0.01, weight_decay=0.0),
        precision=precision,
    )
    params = pm.randomize_params(seed=4)
    initial = {k: np.array(backend.to_numpy(v)) for k, v in params.items()}
    state = pm.init_state(params)
    losses, scales = [], []
    for batch in data:
        if state.loss_scale is not None:
            scales.append(state.loss_scale["scale"])
        state, outputs = pm.train_step(state, batch)
        losses.append(float(np.asarray(backend.to_numpy(outputs["final_cost"]))))
    return losses, state, initial, scales


def test_bf16_mixed_on_torch_follows_pytorch_amp() -> None:
    data = batches(6, np.float32)
    losses, state, initial, _ = mithril_run(ml.TorchBackend(), "bf16-mixed", data)
    expected, final, _ = torch_amp_loop(initial, data, torch.bfloat16)
    full, _, _ = torch_amp_loop(initial, data, torch.float32)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    assert np.abs(np.array(losses) - np.array(full)).max() > 1e-5  # the forward did compute in bfloat16
    for key in final:
        assert state.params[key].dtype == torch.float32 and state.opt_state["m"][key].dtype == torch.float32
        np.testing.assert_allclose(state.params[key].numpy(), final[key], rtol=1e-5, atol=1e-6)


def test_autocast_reaches_every_linear_layer() -> None:
    """Regression: under autocast (precision="bf16-mixed", TorchBackend(use_amp=True)) a linear layer whose
    input is already bfloat16 added its float32 bias in float32, and float32 inference ran oneDNN's kernel,
    which autocast does not cast: the forward silently computed in float32."""
    from mithril.models import Linear, Model, Relu

    model = Model()
    model |= Linear(1024)(input="input")  # a weight big enough for oneDNN's kernel (2**19 elements)
    model += Relu()
    model += Linear(2)(output="output")
    x = np.random.default_rng(0).standard_normal((4, 512)).astype(np.float32)
    for backend, precision in ((ml.TorchBackend(), "bf16-mixed"), (ml.TorchBackend(use_amp=True), None)):
        pm = ml.compile(model, backend, shapes={"input": [4, 512]}, inference=True, precision=precision)
        params = pm.randomize_params(seed=0)
        out = pm.evaluate(params, {"input": x})["output"]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = F.relu(F.linear(torch.from_numpy(x), params["weight"], params["bias"]))
            expected = F.linear(hidden, params["weight_1"], params["bias_1"])
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_bf16_mixed_on_jax_computes_in_bfloat16_and_keeps_float32_state() -> None:
    data = batches(6, np.float32)
    backend = ml.JaxBackend()
    low, state, _, _ = mithril_run(backend, "bf16-mixed", data)
    full, _, _, _ = mithril_run(backend, None, data)
    differences = np.abs(np.array(low) - np.array(full)) / np.array(full)
    assert 1e-5 < differences.max() < 3e-2  # bfloat16 rounding: visible, small
    assert all(str(v.dtype) == "float32" for v in state.params.values())
    assert all(str(v.dtype) == "float32" for slot in state.opt_state.values() for v in slot.values())


@pytest.mark.parametrize("kind", ["mithril", "torch.optim"])
def test_fp16_mixed_scales_the_loss_as_grad_scaler(kind: str) -> None:
    """Large targets overflow float16 gradients at scale 2**16: the first steps are skipped and the scale
    halves, exactly as torch.amp.GradScaler does; then training proceeds with the same numbers."""
    data = [{"input": b["input"], "target": b["target"] * 300.0} for b in batches(8, np.float32)]
    optimizer = (
        optim.AdamW(lr=0.01, weight_decay=0.0)
        if kind == "mithril"
        else functools.partial(torch.optim.AdamW, lr=0.01, weight_decay=0.0)
    )
    losses, state, initial, scales = mithril_run(ml.TorchBackend(), "fp16-mixed", data, optimizer)
    expected, final, expected_scales = torch_amp_loop(initial, data, torch.float16, torch.amp.GradScaler("cpu"))
    assert scales == expected_scales and scales[0] > scales[-1]  # some steps overflowed and were skipped
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    for key in final:
        np.testing.assert_allclose(state.params[key].numpy(), final[key], rtol=1e-4, atol=1e-5)
    assert state.step_count == sum(1 for a, b in itertools.pairwise([*scales, state.loss_scale["scale"]]) if b >= a)


def test_loss_scale_survives_save_and_load(tmp_path) -> None:
    pm = ml.compile(
        train_model(), ml.TorchBackend(), shapes=SHAPES, optimizer=optim.Adam(lr=0.01), precision="fp16-mixed"
    )
    data = [{"input": b["input"], "target": b["target"] * 300.0} for b in batches(3, np.float32)]
    state, _ = ml.fit(pm, pm.init_state(), data)
    ml.save_state(state, tmp_path / "s.safetensors")
    assert (
        ml.load_state(pm, tmp_path / "s.safetensors").loss_scale
        == state.loss_scale
        != {"scale": 65536.0, "good_steps": 0}
    )


def test_precision_is_checked() -> None:
    with pytest.raises(ArgumentError, match="NumpyBackend computes in its dtype"):
        ml.compile(train_model(), ml.NumpyBackend(), shapes=SHAPES, precision="bf16-mixed")
    with pytest.raises(ArgumentError, match="runs on TorchBackend, not JaxBackend"):
        ml.compile(train_model(), ml.JaxBackend(), shapes=SHAPES, precision="fp16-mixed")
    with pytest.raises(ArgumentError, match="keeps float32 parameters"):
        ml.compile(train_model(), ml.TorchBackend(dtype=ml.float64), shapes=SHAPES, precision="bf16-mixed")
    with pytest.raises(ArgumentError, match="accepted are"):
        ml.compile(train_model(), ml.TorchBackend(), shapes=SHAPES, precision="bf16")
