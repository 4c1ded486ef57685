"""Issue 16: the sequence models' variable-length and generation variants against PyTorch. Padded batches
with per-sample ``lengths`` equal ``nn.LSTM``/``nn.RNN`` on ``pack_padded_sequence`` (outputs, final states,
gradients; what lies past a sample's length is ignored); TorchOneToMany and TorchEncoderDecoderInference generate by
feeding their predictions back, like a hand-written torch loop. Every installed backend."""

from __future__ import annotations

import numpy as np
import pytest
from _sequence_helpers import nn, seeded_lstm, sequence_data, torch, torch_grads, torch_initial_state, torch_params
from mithril.models import (
    IOKey,
    ManyToMany,
    Model,
    TorchEncoderDecoderInference,
    TorchLSTMCell,
    TorchManyToOne,
    TorchOneToMany,
    TorchRNNCell,
)
from mithril_testing.blocks import DTYPES, backends, evaluate_model, tolerance

pack = nn.utils.rnn.pack_padded_sequence
unpack = nn.utils.rnn.pad_packed_sequence
B, T, D, H = 3, 5, 4, 6
LENGTHS = np.array([5, 2, 3])


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    return sequence_data(17, B, T, D, H)


def _close(actual: np.ndarray, expected: torch.Tensor | np.ndarray, dtype: str, where: str, scale: float = 1.0) -> None:
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    rtol = tolerance(dtype) * scale
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol, err_msg=where)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_many_to_many_equals_packed_lstm(backend: str, dtype: str, data: dict) -> None:
    lstm, x = seeded_lstm(data, D, H)
    packed_out, (hn, cn) = lstm(
        pack(x, torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False),
        torch_initial_state(data),
    )
    out, _ = unpack(packed_out, batch_first=True, total_length=T)
    out.backward(torch.tensor(data["cot"]))
    model = Model()
    model |= ManyToMany(TorchLSTMCell, hidden_size=H, length=T, variable_length=True)(
        input="input",
        lengths="lengths",
        initial_hidden="h0",
        initial_cell="c0",
        output=IOKey("output"),
        hidden=IOKey("hidden"),
        cell=IOKey("cell"),
    )
    feed = {"lengths": LENGTHS, "h0": data["h0"], "c0": data["c0"]}
    outs, grads = evaluate_model(
        backend, model, {**torch_params(lstm), "input": data["x"]}, feed, dtype=dtype, cotangent=data["cot"]
    )
    where = f"packed LSTM on {backend}/{dtype}"
    _close(outs["output"], out, dtype, f"{where}: output")
    _close(outs["hidden"], hn[0], dtype, f"{where}: h_n")
    _close(outs["cell"], cn[0], dtype, f"{where}: c_n", scale=10)
    for key, value in {**torch_grads(lstm), "input": x.grad.numpy()}.items():
        _close(grads[key], value, dtype, f"{where}: d/d{key}", scale=10)
    assert np.all(grads["input"][1, 2:] == 0) and np.all(grads["input"][2, 3:] == 0)  # padding ignored


@pytest.mark.parametrize("backend", backends())
def test_many_to_one_gives_each_samples_last_state(backend: str, data: dict) -> None:
    torch.manual_seed(1)
    rnn = nn.RNN(D, H, batch_first=True).double()
    _, hn = rnn(
        pack(torch.tensor(data["x"]), torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False),
        torch.tensor(data["h0"])[None],
    )
    model = Model()
    model |= TorchManyToOne(TorchRNNCell, hidden_size=H, length=T, variable_length=True)(
        input="input", lengths="lengths", initial_hidden="h0", output=IOKey("output")
    )
    outs, grads = evaluate_model(
        backend,
        model,
        torch_params(rnn),
        {"input": data["x"], "lengths": LENGTHS, "h0": data["h0"]},
        cotangent=data["cot"][:, 0],
    )
    _close(outs["output"], hn[0], "float32", f"TorchManyToOne(lengths) on {backend}")
    for b, n in enumerate(LENGTHS):  # each sample alone, unpadded: the same state
        _, alone = rnn(torch.tensor(data["x"][b : b + 1, :n]), torch.tensor(data["h0"][b : b + 1])[None])
        _close(outs["output"][b], alone[0, 0], "float32", f"sample {b} on {backend}")
    assert set(grads) == {"weight_ih", "weight_hh", "bias_ih", "bias_hh"}


def _generate(cell: torch.nn.Module, head: torch.nn.Module, x: torch.Tensor, state: tuple, steps: int) -> torch.Tensor:
    """A hand-written generation loop: each prediction is the next input."""
    outputs = []
    for _ in range(steps):
        state = cell(x, state)
        x = head(state[0])
        outputs.append(x)
    return torch.stack(outputs, dim=1)


@pytest.mark.parametrize("backend", backends())
def test_one_to_many_generates_per_sample_lengths(backend: str, data: dict) -> None:
    torch.manual_seed(2)
    cell, head = nn.LSTMCell(D, H).double(), nn.Linear(H, D).double()
    expected = _generate(
        cell, head, torch.tensor(data["x"][:, 0]), (torch.tensor(data["h0"]), torch.tensor(data["c0"])), T
    )
    mask = torch.tensor(np.arange(T)[None, :, None] < LENGTHS[:, None, None])
    expected = torch.where(mask, expected, 0.0)
    cot = data["cot"][..., :D]
    expected.backward(torch.tensor(cot))
    model = Model()
    model |= TorchOneToMany(TorchLSTMCell, hidden_size=H, length=T, variable_length=True)(
        input="input", lengths="lengths", initial_hidden="h0", initial_cell="c0", output=IOKey("output")
    )
    feed = {"input": data["x"][:, 0], "lengths": LENGTHS, "h0": data["h0"], "c0": data["c0"]}
    outs, grads = evaluate_model(backend, model, {**torch_params(cell), **torch_params(head)}, feed, cotangent=cot)
    _close(outs["output"], expected, "float32", f"TorchOneToMany(lengths) on {backend}")
    for key, value in {**torch_grads(cell), **torch_grads(head)}.items():
        _close(grads[key], value, "float32", f"TorchOneToMany(lengths) on {backend}: d/d{key}", scale=10)


@pytest.mark.parametrize("backend", backends())
def test_encoder_decoder_inference(backend: str, data: dict) -> None:
    """Packed encoder, then a decoder generating 6 steps (more than the encoder's) from a start token."""
    torch.manual_seed(3)
    encoder, decoder, head = (
        nn.LSTM(D, H, batch_first=True).double(),
        nn.LSTMCell(2, H).double(),
        nn.Linear(H, 2).double(),
    )
    start = np.random.default_rng(4).normal(size=(B, 2))
    packed = pack(torch.tensor(data["x"]), torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False)
    _, (hn, cn) = encoder(packed, torch_initial_state(data))
    expected = _generate(decoder, head, torch.tensor(start), (hn[0], cn[0]), 6)
    cot = np.random.default_rng(5).normal(size=(B, 6, 2))
    expected.backward(torch.tensor(cot))
    model = Model()
    model |= TorchEncoderDecoderInference(TorchLSTMCell, hidden_size=H, length=T, decoder_length=6)(
        input="input",
        decoder_input="decoder_input",
        lengths="lengths",
        initial_hidden="h0",
        initial_cell="c0",
        output=IOKey("output"),
    )
    params = {**torch_params(encoder, "encoder_"), **torch_params(decoder, "decoder_"), **torch_params(head)}
    feed = {"input": data["x"], "decoder_input": start, "lengths": LENGTHS, "h0": data["h0"], "c0": data["c0"]}
    outs, grads = evaluate_model(backend, model, params, feed, cotangent=cot)
    _close(outs["output"], expected, "float32", f"TorchEncoderDecoderInference on {backend}")
    expected_grads = {**torch_grads(encoder, "encoder_"), **torch_grads(decoder, "decoder_"), **torch_grads(head)}
    for key, value in expected_grads.items():
        _close(grads[key], value, "float32", f"TorchEncoderDecoderInference on {backend}: d/d{key}", scale=10)


@pytest.mark.parametrize("backend", backends())
def test_fixed_length_models_unchanged_by_full_lengths(backend: str, data: dict) -> None:
    """lengths == length everywhere gives the fixed-length model's numbers."""
    torch.manual_seed(4)
    params = torch_params(nn.LSTMCell(D, H).double())
    outs = {}
    for variable in (False, True):
        model = Model()
        extra = {"lengths": "lengths"} if variable else {}
        model |= TorchManyToOne(TorchLSTMCell, hidden_size=H, length=T, variable_length=variable)(
            input="input", initial_hidden="h0", initial_cell="c0", output=IOKey("output"), **extra
        )
        feed = {
            "input": data["x"],
            "h0": data["h0"],
            "c0": data["c0"],
            **({"lengths": np.full(B, T)} if variable else {}),
        }
        outs[variable], _ = evaluate_model(backend, model, params, feed, cotangent=data["cot"][:, 0])
    np.testing.assert_allclose(outs[True]["output"], outs[False]["output"], rtol=1e-6, atol=1e-6)
