"""The ``lstm_recurrence`` primitive (an LSTM layer's whole time loop) on every installed backend: outputs and
gradients against its decomposition (the unrolled cells the sequence models compiled before it existed) and
against ``torch.nn.LSTM``; the decomposition mechanism that runs it on C and GGML; ``lstm_layer`` (projection
and loop: ``torch.lstm`` on PyTorch, decomposed elsewhere) against ``nn.LSTM``; the sequence blocks using it."""

from __future__ import annotations

from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.errors import UnsupportedPrimitiveError
from mithril.models import IOKey, ManyToMany, Model, Primitive, TorchLSTMCell, TorchManyToOne
from mithril.models.blocks.sequence import lstm_layer_decomposition, lstm_recurrence_decomposition
from mithril.plugins.lookup import backend_class
from mithril_testing.blocks import DTYPES, backends, tolerance

B, T, H = 3, 5, 4
INPUTS = ("input", "weight_hh", "initial_hidden", "initial_cell")
OUTPUTS = ("output", "hidden", "cell")


@pytest.fixture(scope="module")
def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(16)
    return {
        "input": rng.normal(size=(B, T, 4 * H)), "weight_hh": rng.normal(size=(4 * H, H)) * 0.5,
        "initial_hidden": rng.normal(size=(B, H)), "initial_cell": rng.normal(size=(B, H)),
        "output_cot": rng.normal(size=(B, T, H)), "hidden_cot": rng.normal(size=(B, H)),
        "cell_cot": rng.normal(size=(B, H)),
    }  # fmt: skip


def _run(
    backend_name: str, model: Any, arrays: dict, dtype: str, inputs: tuple[str, ...] = INPUTS
) -> tuple[dict, dict, Any]:
    """Outputs and the gradients of every input for the cotangents of all three outputs."""
    try:
        backend = backend_class(backend_name)(dtype=ml.Dtype(dtype))
    except TypeError as exc:  # MLX and GGML have no float64
        pytest.skip(f"{backend_name} does not compute in {dtype}: {exc}")
    pm = ml.compile(model, backend, shapes={k: list(arrays[k].shape) for k in inputs}, trainable_keys=set(inputs))
    params = {k: backend.array(arrays[k]) for k in inputs}
    cotangents = {k: backend.array(arrays[f"{k}_cot"]) for k in OUTPUTS}
    outs, grads = pm.evaluate(params, {}, output_gradients=cotangents)
    numpy = backend.to_numpy
    return {k: np.asarray(numpy(v)) for k, v in outs.items()}, {k: np.asarray(numpy(v)) for k, v in grads.items()}, pm


def _close(got: dict, expected: dict, rtol: float, where: str) -> None:
    assert set(got) == set(expected), f"{where}: keys {sorted(got)}, expected {sorted(expected)}"
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=rtol, atol=rtol, err_msg=f"{where}: {key}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_primitive_equals_its_decomposition_and_nn_lstm(backend: str, dtype: str, arrays: dict) -> None:
    torch = pytest.importorskip("torch")
    outs, grads, _ = _run(backend, Primitive("lstm_recurrence"), arrays, dtype)
    unrolled = lstm_recurrence_decomposition({}, {"input": (B, T, 4 * H), "weight_hh": (4 * H, H)})
    ref_outs, ref_grads, _ = _run(backend, unrolled, arrays, dtype)
    rtol = tolerance(dtype)
    _close(outs, ref_outs, rtol, f"{backend} primitive vs unrolled cells, outputs")
    _close(grads, ref_grads, rtol * 10, f"{backend} primitive vs unrolled cells, gradients")

    # nn.LSTM whose input projection is the identity (zero biases) reads the projected gates as they are
    lstm = torch.nn.LSTM(4 * H, H, batch_first=True).double()
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.eye(4 * H))
        lstm.weight_hh_l0.copy_(torch.from_numpy(arrays["weight_hh"]))
        lstm.bias_ih_l0.zero_()
        lstm.bias_hh_l0.zero_()
    leaves = {k: torch.tensor(arrays[k], requires_grad=True) for k in ("input", "initial_hidden", "initial_cell")}
    out, (hn, cn) = lstm(leaves["input"], (leaves["initial_hidden"][None], leaves["initial_cell"][None]))
    outputs = zip(OUTPUTS, (out, hn[0], cn[0]), strict=True)
    loss = sum((v * torch.from_numpy(arrays[f"{k}_cot"])).sum() for k, v in outputs)
    loss.backward()
    expected = {"output": out.detach().numpy(), "hidden": hn[0].detach().numpy(), "cell": cn[0].detach().numpy()}
    _close(outs, expected, rtol, f"{backend} primitive vs nn.LSTM, outputs")
    expected_grads = {k: v.grad.numpy() for k, v in leaves.items()} | {"weight_hh": lstm.weight_hh_l0.grad.numpy()}
    _close(grads, expected_grads, rtol * 10, f"{backend} primitive vs nn.LSTM, gradients")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_lstm_layer_equals_nn_lstm(backend: str, dtype: str, arrays: dict) -> None:
    torch = pytest.importorskip("torch")
    lstm = torch.nn.LSTM(6, H, batch_first=True).double()
    rng = np.random.default_rng(3)
    layer = {
        f"{k}": getattr(lstm, f"{k}_l0").detach().numpy() for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    }
    layer |= {
        "input": rng.normal(size=(B, T, 6)),
        "initial_hidden": arrays["initial_hidden"],
        "initial_cell": arrays["initial_cell"],
    }
    inputs = tuple(layer)
    outs, grads, pm = _run(backend, Primitive("lstm_layer"), arrays | layer, dtype, inputs)
    leaves = {k: torch.tensor(layer[k], requires_grad=True) for k in ("input", "initial_hidden", "initial_cell")}
    out, (hn, cn) = lstm(leaves["input"], (leaves["initial_hidden"][None], leaves["initial_cell"][None]))
    outputs = zip(OUTPUTS, (out, hn[0], cn[0]), strict=True)
    loss = sum((v * torch.from_numpy(arrays[f"{k}_cot"])).sum() for k, v in outputs)
    loss.backward()
    rtol = tolerance(dtype)
    expected = {"output": out.detach().numpy(), "hidden": hn[0].detach().numpy(), "cell": cn[0].detach().numpy()}
    _close(outs, expected, rtol, f"{backend} lstm_layer vs nn.LSTM, outputs")
    expected_grads = {k: v.grad.numpy() for k, v in leaves.items()}
    expected_grads |= {
        k: getattr(lstm, f"{k}_l0").grad.numpy() for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    }
    _close(grads, expected_grads, rtol * 10, f"{backend} lstm_layer vs nn.LSTM, gradients")
    # PyTorch runs nn.LSTM's kernel; every other backend the decomposition (projection, then the loop)
    assert ("lstm_recurrence" in pm.source) == (backend != "torch"), pm.source


def test_lstm_layer_decomposition_is_a_projection_and_the_loop() -> None:
    model = lstm_layer_decomposition({}, {})
    assert model.output_keys == list(OUTPUTS)
    assert set(model.input_keys) == {
        "input",
        "weight_ih",
        "weight_hh",
        "bias_ih",
        "bias_hh",
        "initial_hidden",
        "initial_cell",
    }
    source = ml.compile(
        model, ml.NumpyBackend(), shapes={"input": [2, 3, 5], "weight_hh": [8, 2]}, inference=True
    ).source
    assert source.count("lstm_recurrence(") == 1 and source.count("linear(") == 1, source


@pytest.mark.parametrize("backend", [b for b in ("c", "ggml") if b in backends()])
def test_backends_without_the_primitive_compile_its_decomposition(backend: str, arrays: dict) -> None:
    instance = backend_class(backend)()
    assert not instance.has_implementation("lstm_recurrence")
    *_, native = _run("numpy", Primitive("lstm_recurrence"), arrays, "float32")
    outs, grads, decomposed = _run(backend, Primitive("lstm_recurrence"), arrays, "float32")
    # NumPy: the primitive and its helper (plus zeros for no cotangent); C/GGML: one cell per step
    counts = native.primitive_count, decomposed.primitive_count
    assert counts[0] < 5 < T * 10 < counts[1], counts
    ref_outs, ref_grads, _ = _run("numpy", Primitive("lstm_recurrence"), arrays, "float64")
    _close(outs, ref_outs, tolerance("float32"), f"{backend} decomposition, outputs")
    _close(grads, ref_grads, tolerance("float32") * 10, f"{backend} decomposition, gradients")


def test_a_primitive_without_implementation_or_decomposition_is_refused_by_name() -> None:
    if "c" not in backends():
        pytest.skip("the C backend is not installed")
    model = Model()
    model |= Primitive("cholesky")(input="a", output=IOKey("l"))
    with pytest.raises(UnsupportedPrimitiveError, match=r"CBackend does not implement 'cholesky'.*no decomposition"):
        ml.compile(model, ml.CBackend(), shapes={"a": [3, 3]})


def test_the_decomposition_needs_the_sequence_length() -> None:
    with pytest.raises(UnsupportedPrimitiveError, match=r"expected input \[B, T, 4H\].*given \(None, None, 16\)"):
        lstm_recurrence_decomposition({}, {"input": (None, None, 16), "weight_hh": (None, None)})


def test_lstm_blocks_run_one_recurrence_and_rnn_or_variable_length_stay_unrolled() -> None:
    shapes = {"input": [2, 6, 3]}
    source = ml.compile(ManyToMany(TorchLSTMCell, hidden_size=4, length=6), ml.NumpyBackend(), shapes=shapes).source
    calls = source.count("lstm_recurrence("), source.count("lstm_recurrence_grad(")
    assert calls == (2, 1), source  # forward (in evaluate and evaluate_gradients), backward
    assert "sigmoid" not in source, source
    # one primitive, the same keys in the same order as the unrolled variable-length model
    fixed = ManyToMany(TorchLSTMCell, hidden_size=4, length=6).input_keys
    assert fixed == [
        k for k in ManyToMany(TorchLSTMCell, hidden_size=4, length=6, variable_length=True).input_keys if k != "lengths"
    ]
    variable = TorchManyToOne(TorchLSTMCell, hidden_size=4, length=6, variable_length=True)
    source = ml.compile(variable, ml.NumpyBackend(), shapes=shapes, inference=True).source
    assert "lstm_recurrence" not in source and source.count("sigmoid(") == 3 * 6, source
