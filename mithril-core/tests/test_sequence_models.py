"""Issue 16 sequence models against PyTorch: TorchRNNCell/TorchLSTMCell with ``nn.RNNCell``/``nn.LSTM`` weights
loaded as they are, the unrolled TorchManyToOne/ManyToMany/TorchOneToMany/TorchEncoderDecoder against loops of torch
cells, on every installed backend (outputs and gradients), and a character-level LSTM trained step by step."""

from __future__ import annotations

import numpy as np
import pytest
from _sequence_helpers import nn, seeded_lstm, sequence_data, torch, torch_grads, torch_initial_state, torch_params
from mithril.models import (
    CrossEntropy,
    IOKey,
    Linear,
    ManyToMany,
    Model,
    SwapAxes,
    TorchEncoderDecoder,
    TorchLSTMCell,
    TorchManyToOne,
    TorchOneToMany,
    TorchRNNCell,
    TrainModel,
)
from mithril_testing.blocks import DTYPES, backends, evaluate_model, tolerance

B, T, D, H = 3, 4, 5, 6


def _check(out: np.ndarray, grads: dict, expected: torch.Tensor, expected_grads: dict, dtype: str, where: str) -> None:
    rtol = tolerance(dtype)
    np.testing.assert_allclose(out, expected.detach().numpy(), rtol=rtol, atol=rtol, err_msg=f"{where} output")
    for key, value in expected_grads.items():
        np.testing.assert_allclose(grads[key], value, rtol=rtol * 10, atol=rtol * 10, err_msg=f"{where} d/d{key}")


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    return sequence_data(7, B, T, D, H)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_lstm_layer_loads_nn_lstm_weights(backend: str, dtype: str, data: dict) -> None:
    """ManyToMany(TorchLSTMCell) = nn.LSTM(batch_first=True) with its own weight_ih_l0..., outputs and gradients."""
    lstm, x = seeded_lstm(data, D, H)
    out, (_hn, cn) = lstm(x, torch_initial_state(data))
    out.backward(torch.tensor(data["cot"]))
    model = Model()
    model |= ManyToMany(TorchLSTMCell, hidden_size=H, length=T)(
        input="input", initial_hidden="h0", initial_cell="c0", output=IOKey("output"), cell=IOKey("cell")
    )
    params = {**torch_params(lstm), "input": data["x"]}
    outs, grads = evaluate_model(
        backend, model, params, {"h0": data["h0"], "c0": data["c0"]}, dtype=dtype, cotangent=data["cot"]
    )
    _check(
        outs["output"], grads, out, {**torch_grads(lstm), "input": x.grad.numpy()}, dtype, f"LSTM on {backend}"
    )
    np.testing.assert_allclose(outs["cell"], cn[0].detach().numpy(), rtol=tolerance(dtype) * 10, atol=tolerance(dtype))


@pytest.mark.parametrize("backend", backends())
def test_rnn_cell_and_many_to_one(backend: str, data: dict) -> None:
    torch.manual_seed(1)
    cell = nn.RNNCell(D, H).double()
    h = torch.tensor(data["h0"])
    for t in range(T):
        h = cell(torch.tensor(data["x"][:, t]), h)
    cot = data["cot"][:, 0]
    h.backward(torch.tensor(cot))
    model = Model()
    model |= TorchManyToOne(TorchRNNCell(H), hidden_size=H, length=T)(
        input="input", initial_hidden="h0", output=IOKey("output")
    )
    feed = {"input": data["x"], "h0": data["h0"]}
    outs, grads = evaluate_model(backend, model, torch_params(cell), feed, cotangent=cot)
    _check(outs["output"], grads, h, torch_grads(cell), "float32", f"TorchManyToOne(TorchRNNCell) on {backend}")


@pytest.mark.parametrize("backend", backends())
def test_one_to_many(backend: str, data: dict) -> None:
    torch.manual_seed(2)
    cell, head = nn.LSTMCell(D, H).double(), nn.Linear(H, D).double()
    x, h, c, outputs = torch.tensor(data["x"][:, 0]), torch.tensor(data["h0"]), torch.tensor(data["c0"]), []
    for _ in range(T):
        h, c = cell(x, (h, c))
        x = head(h)
        outputs.append(x)
    expected = torch.stack(outputs, dim=1)
    cot = data["cot"][..., :D]
    expected.backward(torch.tensor(cot))
    model = Model()
    model |= TorchOneToMany(TorchLSTMCell, hidden_size=H, length=T)(
        input="input", initial_hidden="h0", initial_cell="c0", output=IOKey("output")
    )
    params = {**torch_params(cell), **torch_params(head)}  # the head's weight_out, bias_out
    expected_grads = {**torch_grads(cell), **torch_grads(head)}
    outs, grads = evaluate_model(
        backend, model, params, {"input": data["x"][:, 0], "h0": data["h0"], "c0": data["c0"]}, cotangent=cot
    )
    _check(outs["output"], grads, expected, expected_grads, "float32", f"TorchOneToMany on {backend}")


@pytest.mark.parametrize("backend", backends())
def test_encoder_decoder(backend: str, data: dict) -> None:
    torch.manual_seed(3)
    encoder, decoder, head = (
        nn.LSTM(D, H, batch_first=True).double(),
        nn.LSTM(2, H, batch_first=True).double(),
        nn.Linear(H, 3).double(),
    )
    dec_in = np.random.default_rng(4).normal(size=(B, 2, 2))
    _, state = encoder(torch.tensor(data["x"]), torch_initial_state(data))
    hidden, _ = decoder(torch.tensor(dec_in), state)
    expected = head(hidden)
    cot = np.random.default_rng(5).normal(size=(B, 2, 3))
    expected.backward(torch.tensor(cot))
    model = Model()
    model |= TorchEncoderDecoder(TorchLSTMCell, hidden_size=H, length=T, decoder_length=2)(
        input="input", decoder_input="decoder_input", initial_hidden="h0", initial_cell="c0", output=IOKey("output")
    )
    params = {**torch_params(encoder, "encoder_"), **torch_params(decoder, "decoder_"), **torch_params(head)}
    expected_grads = {
        **torch_grads(encoder, "encoder_"),
        **torch_grads(decoder, "decoder_"),
        "weight_out": head.weight.grad.numpy(),
    }
    feed = {"input": data["x"], "decoder_input": dec_in, "h0": data["h0"], "c0": data["c0"]}
    outs, grads = evaluate_model(backend, model, params, feed, cotangent=cot)
    _check(outs["output"], grads, expected, expected_grads, "float32", f"TorchEncoderDecoder on {backend}")


TEXT = "hello mithril, hello lstm"


@pytest.mark.slow
@pytest.mark.parametrize("backend", [b for b in ("numpy", "torch", "jax") if b in backends()])
def test_char_lstm_trains_like_torch_step_by_step(backend: str) -> None:
    """Next-character prediction: ManyToMany(TorchLSTMCell) + Linear + CrossEntropy, 8 steps of SGD from
    nn.LSTM's initial weights; the loss of every step and the final weights match torch's."""
    import mithril as ml
    from mithril.plugins.lookup import backend_class

    vocab = sorted(set(TEXT))
    ids = np.array([vocab.index(ch) for ch in TEXT])
    length, hidden, lr = len(ids) - 1, 16, 1.0
    onehot = np.eye(len(vocab))[ids[:-1]][None]  # [1, L, V]
    targets = ids[1:][None]  # [1, L]
    torch.manual_seed(0)
    lstm, head = nn.LSTM(len(vocab), hidden, batch_first=True).double(), nn.Linear(hidden, len(vocab)).double()
    params = {
        **torch_params(lstm),
        "weight": head.weight.detach().numpy().copy(),
        "bias": head.bias.detach().numpy().copy(),
    }
    optimizer = torch.optim.SGD([*lstm.parameters(), *head.parameters()], lr=lr)
    torch_losses = []
    for _ in range(8):
        optimizer.zero_grad()
        out, _ = lstm(torch.tensor(onehot))
        loss = nn.functional.cross_entropy(head(out)[0], torch.tensor(targets[0]))
        loss.backward()
        optimizer.step()
        torch_losses.append(float(loss))

    model = Model()
    model |= ManyToMany(TorchLSTMCell, hidden_size=hidden, length=length)(
        input="input", initial_hidden="h0", initial_cell="c0", output="states"
    )
    model |= Linear(len(vocab))(input="states", weight="weight", bias="bias", output="logits")
    model |= SwapAxes(1, 2)(input="logits", output=IOKey("class_logits"))  # classes on axis 1: [1, V, L]
    train = TrainModel(model)
    train.add_loss(CrossEntropy(), input="class_logits", target="target")
    backend_obj = backend_class(backend)(dtype=ml.float64)
    zeros = np.zeros((1, hidden))
    pm = ml.compile(
        train, backend_obj, shapes={"input": list(onehot.shape), "target": list(targets.shape)},
        data_keys={"input", "target"}, constant_keys={"h0": backend_obj.array(zeros), "c0": backend_obj.array(zeros)},
    )  # fmt: skip
    values = {k: backend_obj.array(v) for k, v in params.items()}
    feed = {"input": backend_obj.array(onehot), "target": backend_obj.array(targets, "int")}
    losses = []
    for _ in range(8):
        outputs, grads = pm.evaluate(values, feed, output_gradients=True)
        losses.append(float(backend_obj.to_numpy(outputs["final_cost"])))
        to_numpy = backend_obj.to_numpy
        values = {k: backend_obj.array(to_numpy(values[k]) - lr * to_numpy(grads[k])) for k in values}
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-9)
    assert np.all(np.diff(losses) < 0) and losses[-1] < losses[0] - 0.15  # it learns
    np.testing.assert_allclose(
        backend_obj.to_numpy(values["weight_hh"]), lstm.weight_hh_l0.detach().numpy(), rtol=1e-8, atol=1e-10
    )
