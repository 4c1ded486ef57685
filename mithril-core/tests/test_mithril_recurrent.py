"""Mithril's recurrent family (``RNNCell()``, ``LSTMCell()``, ``ManyToOne``, ``OneToMany``, ``EncoderDecoder``)
against hand-written torch references, outputs and gradients, on every installed Python backend; and the old
calls of those names, which build this project's PyTorch-layout models (``TorchRNNCell``...) with a warning.

The references are written independently of the models: the cells from their formulas (the LSTM's gates from
the two halves of each weight instead of a concatenation), the sequence models one sequence at a time (row
``b`` of every time slot it appears in) instead of on shrinking batches, so ``hidden_compl``/``hidden_concat``
are checked against each sequence's own final state."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError
from mithril.models import (
    EncoderDecoder,
    EncoderDecoderInference,
    LSTMCell,
    ManyToMany,
    ManyToOne,
    Mean,
    OneToMany,
    OneToManyInference,
    RNNCell,
    SquaredError,
    TorchEncoderDecoder,
    TorchEncoderDecoderInference,
    TorchLSTMCell,
    TorchManyToOne,
    TorchOneToMany,
    TorchRNNCell,
    TrainModel,
)
from mithril.plugins.lookup import backend_class
from mithril_testing.blocks import backends

torch = pytest.importorskip("torch", reason="the references are torch programs (autograd gives their gradients)")
BACKENDS = [name for name in ("numpy", "torch", "jax", "mlx") if name in backends()]
Tensors = dict[str, Any]


# -- references -----------------------------------------------------------------------------------------------
def rnn_step(x: Any, state: Tensors, p: Tensors, prefix: str = "") -> Tensors:
    n = x.shape[0]
    h = state["hidden"]
    hidden = torch.tanh(h[:n] @ p[prefix + "w_hh"].T + x @ p[prefix + "w_ih"].T + p[prefix + "bias_h"])
    return {"hidden": hidden, "hidden_compl": h[n:], "output": hidden @ p[prefix + "w_ho"].T + p[prefix + "bias_o"]}


def lstm_step(x: Any, state: Tensors, p: Tensors, prefix: str = "") -> Tensors:
    n, d = x.shape[0], x.shape[-1]
    h, c = state["hidden"], state["cell"]

    def gate(g: str) -> Any:  # [x, h] @ w.T as x @ w[:, :d].T + h @ w[:, d:].T
        w = p[f"{prefix}w_{g}"]
        return x @ w[:, :d].T + h[:n] @ w[:, d:].T + p[f"{prefix}bias_{g}"]

    cell = torch.sigmoid(gate("f")) * c[:n] + torch.sigmoid(gate("i")) * torch.tanh(gate("c"))
    hidden = torch.sigmoid(gate("o")) * torch.tanh(cell)
    out = hidden @ p[prefix + "w_out"].T + p[prefix + "bias_out"]
    return {"hidden": hidden, "cell": cell, "hidden_compl": h[n:], "output": out}


STEPS = {"rnn": (rnn_step, ("hidden",)), "lstm": (lstm_step, ("hidden", "cell"))}


def encode(
    step: Callable[..., Tensors], states: tuple[str, ...], slots: list[Any], initial: Tensors, p: Tensors
) -> tuple[list[Any], Any]:
    """``ManyToOne`` one sequence at a time: the outputs per slot and ``hidden_concat`` (the final states grouped
    by sequence length in Mithril's order: lengths 1, 2, ..., L - 2, then L, then L - 1)."""
    length, count = len(slots), slots[0].shape[0]
    lengths = [sum(b < slot.shape[0] for slot in slots) for b in range(count)]
    outputs: list[list[Any]] = [[] for _ in slots]
    finals = []
    for b in range(count):
        state = {key: initial[f"initial_{key}"][b : b + 1] for key in states}
        for t in range(lengths[b]):
            result = step(slots[t][b : b + 1], state, p)
            state = {key: result[key] for key in states}
            outputs[t].append(result["output"])
        finals.append(state["hidden"])
    order = [*range(1, length - 1), length, length - 1] if length > 1 else [1]
    concat = torch.cat([finals[b] for size in order for b in range(count) if lengths[b] == size])
    return [torch.cat(rows) for rows in outputs], concat


def generate(
    step: Callable[..., Tensors],
    states: tuple[str, ...],
    x: Any,
    initial: Tensors,
    targets: list[Any],
    p: Tensors,
    forcing: bool,
    prefix: str = "",
) -> list[Any]:
    """``OneToMany`` one sequence at a time: sequence ``b`` runs while ``target<t>`` has a row ``b``; its input
    is its previous output (or ``target<t-1>``'s row with teacher forcing)."""
    rows = [x.shape[0]] + [target.shape[0] for target in targets[1:]]
    outputs: list[list[Any]] = [[] for _ in rows]
    for b in range(x.shape[0]):
        state = {key: initial[key][b : b + 1] for key in states}
        current = x[b : b + 1]
        for t in range(len(rows)):
            if b >= rows[t]:
                break
            if t > 0:
                current = targets[t - 1][b : b + 1] if forcing else outputs[t - 1][-1]
            result = step(current, state, p, prefix)
            state = {key: result[key] for key in states}
            outputs[t].append(result["output"])
    return [torch.cat(out) for out in outputs]


# -- running a model ------------------------------------------------------------------------------------------
def run(
    name: str, model: Any, params: dict[str, np.ndarray], data: dict[str, np.ndarray], cotangents: dict[str, np.ndarray]
) -> tuple[dict, dict, float]:
    """Compile for backend ``name`` (float64, or float32 where it has no float64) with every shape given,
    evaluate and differentiate the outputs against ``cotangents``; NumPy results and the tolerance."""
    try:
        backend, tolerance = backend_class(name)(dtype=ml.float64), 1e-9
    except TypeError:
        backend, tolerance = backend_class(name)(dtype=ml.float32), 2e-4
    shapes = {key: list(value.shape) for key, value in {**params, **data}.items()}
    pm = ml.compile(model, backend, shapes=shapes, trainable_keys=set(params), data_keys=set(data))

    def array(value: np.ndarray) -> Any:
        return backend.array(value, "int") if value.dtype.kind in "iu" else backend.array(value)

    outputs, grads = pm.evaluate(
        {k: array(v) for k, v in params.items()}, {k: array(v) for k, v in data.items()},
        output_gradients={k: array(v) for k, v in cotangents.items()},
    )  # fmt: skip
    numpy = backend.to_numpy
    return (
        {k: np.asarray(numpy(v)) for k, v in outputs.items()},
        {k: np.asarray(numpy(v)) for k, v in grads.items()},
        tolerance,
    )


def torch_leaves(values: dict[str, np.ndarray]) -> Tensors:
    return {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in values.items()}


def check(outputs: dict, grads: dict, expected: Tensors, leaves: Tensors, tolerance: float, where: str) -> None:
    assert set(outputs) == set(expected), where
    for key, value in expected.items():
        np.testing.assert_allclose(
            outputs[key], value.detach().numpy(), rtol=tolerance, atol=tolerance, err_msg=f"{where}: {key}"
        )
    for key, leaf in leaves.items():
        if leaf.grad is not None:  # a parameter nothing returned reads has no gradient
            np.testing.assert_allclose(
                grads[key], leaf.grad.numpy(), rtol=tolerance, atol=tolerance, err_msg=f"{where}: d/d{key}"
            )


def backward(expected: Tensors, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random cotangents for ``expected`` (torch results), back-propagated through the reference."""
    cotangents = {key: rng.normal(size=tuple(value.shape)) for key, value in expected.items()}
    total = sum((value * torch.tensor(cotangents[key])).sum() for key, value in expected.items())
    total.backward()
    return cotangents


def cell_params(
    kind: str, rng: np.random.Generator, d_in: int, d_hid: int, d_out: int, prefix: str = ""
) -> dict[str, np.ndarray]:
    if kind == "rnn":
        shapes = {
            "w_ih": (d_hid, d_in),
            "w_hh": (d_hid, d_hid),
            "w_ho": (d_out, d_hid),
            "bias_h": (d_hid,),
            "bias_o": (d_out,),
        }
    else:
        shapes = {f"w_{g}": (d_hid, d_in + d_hid) for g in "ifco"} | {f"bias_{g}": (d_hid,) for g in "ifco"}
        shapes |= {"w_out": (d_out, d_hid), "bias_out": (d_out,)}
    return {prefix + key: rng.normal(scale=0.5, size=shape) for key, shape in shapes.items()}


def new_cell(kind: str) -> RNNCell | LSTMCell:
    return RNNCell() if kind == "rnn" else LSTMCell()


# -- cells ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_cell_continues_the_first_rows_and_passes_the_rest_on(backend: str, kind: str) -> None:
    """input [3, 1, 2], previous state [5, 1, 4]: hidden/output for the first 3 rows, hidden_compl the other 2."""
    rng = np.random.default_rng(11)
    step, states = STEPS[kind]
    params = cell_params(kind, rng, 2, 4, 3) | {"input": rng.normal(size=(3, 1, 2))}
    params |= {f"prev_{key}": rng.normal(size=(5, 1, 4)) for key in states}
    leaves = torch_leaves(params)
    expected = step(leaves["input"], {key: leaves[f"prev_{key}"] for key in states}, leaves)
    cotangents = backward(expected, rng)
    outputs, grads, tolerance = run(backend, new_cell(kind), params, {}, cotangents)
    assert outputs["hidden_compl"].shape == (2, 1, 4)
    check(outputs, grads, expected, leaves, tolerance, f"{kind} cell on {backend}")


# -- sequence models ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_many_to_one_equals_each_sequence_alone(backend: str, kind: str) -> None:
    """Slots of 6, 4, 4 and 1 sequences (lengths 4, 3, 3, 3, 1, 1; none of length 2: an empty piece): each
    output, each sequence's final state in hidden_concat and every gradient as when each sequence runs alone."""
    rng = np.random.default_rng(12)
    step, states = STEPS[kind]
    sizes = [6, 4, 4, 1]
    slots = {f"input{t}": rng.normal(size=(n, 1, 3)) for t, n in enumerate(sizes)}
    initial = {f"initial_{key}": rng.normal(size=(6, 1, 5)) for key in states}
    params = cell_params(kind, rng, 3, 5, 2) | slots | initial
    leaves = torch_leaves(params)
    outs, concat = encode(step, states, [leaves[k] for k in slots], leaves, leaves)
    expected = {f"output{t}": out for t, out in enumerate(outs)} | {"hidden_concat": concat}
    cotangents = backward(expected, rng)
    outputs, grads, tolerance = run(backend, ManyToOne(new_cell(kind), len(sizes)), params, {}, cotangents)
    check(outputs, grads, expected, leaves, tolerance, f"ManyToOne({kind}) on {backend}")


@pytest.mark.parametrize("forcing", [False, True])
@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_to_many_equals_each_sequence_alone(backend: str, kind: str, forcing: bool) -> None:
    rng = np.random.default_rng(13)
    step, states = STEPS[kind]
    sizes = [5, 5, 3, 2]
    targets = {f"target{t}": rng.normal(size=(n, 1, 3)) for t, n in enumerate(sizes) if forcing or t > 0}
    initial = {f"initial_{key}": rng.normal(size=(5, 1, 4)) for key in states}
    params = cell_params(kind, rng, 3, 4, 3) | initial | {"input": rng.normal(size=(5, 1, 3))}
    leaves = torch_leaves(params)
    target_list = [torch.tensor(targets.get(f"target{t}", np.zeros((n, 1, 3)))) for t, n in enumerate(sizes)]
    states_in = {key: leaves[f"initial_{key}"] for key in states}
    outs = generate(step, states, leaves["input"], states_in, target_list, leaves, forcing)
    expected = {f"output{t}": out for t, out in enumerate(outs)}
    cotangents = backward(expected, rng)
    model = OneToMany(new_cell(kind), len(sizes), teacher_forcing=forcing)
    outputs, grads, tolerance = run(backend, model, params, targets, cotangents)
    check(outputs, grads, expected, leaves, tolerance, f"OneToMany({kind}, teacher_forcing={forcing}) on {backend}")


@pytest.mark.parametrize(("kind", "forcing"), [("rnn", False), ("lstm", True)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_encoder_decoder_starts_the_decoder_from_the_permuted_final_states(
    backend: str, kind: str, forcing: bool
) -> None:
    rng = np.random.default_rng(14)
    step, states = STEPS[kind]
    slots = {f"input{t}": rng.normal(size=(n, 1, 2)) for t, n in enumerate([5, 3, 1])}
    sizes = [5, 4, 2]
    targets = {f"target{t}": rng.normal(size=(n, 1, 2)) for t, n in enumerate(sizes) if forcing or t > 0}
    indices = rng.permutation(5)
    params = cell_params(kind, rng, 2, 4, 2) | cell_params(kind, rng, 2, 4, 2, "decoder_") | slots
    params |= {f"initial_{key}": rng.normal(size=(5, 1, 4)) for key in states} | {
        "decoder_input": rng.normal(size=(5, 1, 2))
    }
    if kind == "lstm":
        params["decoder_initial_cell"] = rng.normal(size=(5, 1, 4))
    leaves = torch_leaves(params)
    _, concat = encode(step, states, [leaves[k] for k in slots], leaves, leaves)
    start = {"hidden": concat[torch.tensor(indices)]} | (
        {"cell": leaves["decoder_initial_cell"]} if kind == "lstm" else {}
    )
    target_list = [torch.tensor(targets.get(f"target{t}", np.zeros((n, 1, 2)))) for t, n in enumerate(sizes)]
    outs = generate(step, states, leaves["decoder_input"], start, target_list, leaves, forcing, "decoder_")
    expected = {f"output{t}": out for t, out in enumerate(outs)}
    cotangents = backward(expected, rng)
    model = EncoderDecoder(
        new_cell(kind), max_input_sequence_length=3, max_target_sequence_length=3, teacher_forcing=forcing
    )
    outputs, grads, tolerance = run(backend, model, params, {**targets, "indices": indices}, cotangents)
    check(outputs, grads, expected, leaves, tolerance, f"EncoderDecoder({kind}) on {backend}")
    assert not np.any(grads["w_out" if kind == "lstm" else "w_ho"])  # the encoder's outputs are not returned


def test_encoder_decoder_inference_generates_with_the_trained_parameters() -> None:
    """``EncoderDecoderInference`` takes ``EncoderDecoder``'s parameters; its initial cell state may have more
    rows than the batch (Mithril's script gives the training batch's); its outputs feed back uncut."""
    rng = np.random.default_rng(15)
    params = cell_params("lstm", rng, 1, 4, 1) | cell_params("lstm", rng, 1, 4, 1, "decoder_")
    data = {
        "input0": rng.normal(size=(2, 1, 1)),
        "input1": rng.normal(size=(2, 1, 1)),
        "initial_hidden": np.zeros((2, 1, 4)),
    }
    data |= {
        "initial_cell": np.zeros((7, 1, 4)),
        "decoder_initial_cell": np.zeros((7, 1, 4)),
        "decoder_input": np.zeros((2, 1, 1)),
    }
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(EncoderDecoderInference(LSTMCell(), 2, 3), backend, data_keys=set(data), jit=False)
    outputs = pm.evaluate(
        {k: backend.array(v) for k, v in params.items()}, {k: backend.array(v) for k, v in data.items()}
    )
    leaves = {k: torch.tensor(v) for k, v in {**params, **data}.items()}
    _, concat = encode(lstm_step, ("hidden", "cell"), [leaves["input0"], leaves["input1"]], leaves, leaves)
    state, x = {"hidden": concat, "cell": leaves["decoder_initial_cell"]}, leaves["decoder_input"]
    for t in range(3):
        result = lstm_step(x, state, leaves, "decoder_")
        state, x = {"hidden": result["hidden"], "cell": result["cell"]}, result["output"]
        np.testing.assert_allclose(outputs[f"output{t}"], x.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"output{t}")
    assert OneToManyInference(LSTMCell(), 3).output_keys == ["output0", "output1", "output2"]


def test_many_to_one_trains() -> None:
    """Mithril's ``many_to_one_any_backend_training.py`` setup (a loss on the last output), a few steps of
    gradient descent: the loss goes down."""
    rng = np.random.default_rng(16)
    train = TrainModel(ManyToOne(RNNCell(), 3))
    train.add_loss(SquaredError(), input="output2", target="target", reduce_steps=[Mean()])
    backend = ml.NumpyBackend(dtype=ml.float64)
    data = {f"input{t}": rng.normal(size=(8, 1, 3)) for t in range(3)} | {"initial_hidden": rng.normal(size=(8, 1, 6))}
    data |= {"target": rng.normal(size=(8, 1, 2))}
    pm = ml.compile(train, backend, constant_keys={k: backend.array(v) for k, v in data.items()}, jit=False)
    params = pm.randomize_params(seed=0)
    losses = []
    for _ in range(60):
        outputs, grads = pm.evaluate(params, output_gradients=True)
        losses.append(float(outputs["final_cost"]))
        params = {k: v - 0.2 * grads[k] for k, v in params.items()}
    assert losses[-1] < 0.5 * losses[0], losses


# -- model structure and arguments ----------------------------------------------------------------------------
def test_keys_are_mithrils() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # Mithril's calls warn about nothing
        assert ManyToOne(RNNCell(), 2).input_keys == [
            "input0",
            "input1",
            "initial_hidden",
            "w_ih",
            "w_hh",
            "w_ho",
            "bias_h",
            "bias_o",
        ]
        assert ManyToOne(LSTMCell, 2).output_keys == ["output0", "output1", "hidden_concat"]
        assert OneToMany(RNNCell(), 3).input_keys[:4] == ["input", "initial_hidden", "target1", "target2"]
        model = EncoderDecoder(
            cell_type=LSTMCell(), max_input_sequence_length=2, max_target_sequence_length=2, teacher_forcing=True
        )
        assert {"indices", "decoder_input", "decoder_initial_cell", "decoder_w_out", "target0", "target1"} <= set(
            model.input_keys
        )
        assert model.output_keys == ["output0", "output1"]
        assert ManyToMany(TorchLSTMCell, hidden_size=4, length=3).output_keys == ["hidden", "cell", "output"]


def test_given_values_and_errors() -> None:
    cell = RNNCell(bias_h=np.zeros(4), name="rnn")
    model = ManyToOne(cell, 2, initial_hidden=np.zeros((3, 1, 4)))
    pm = ml.compile(
        model, ml.NumpyBackend(), shapes={"input0": [3, 1, 2], "input1": [3, 1, 2], "w_ho": [1, 4]}, jit=False
    )
    assert "bias_h" not in pm.randomize_params() and "initial_hidden" not in pm.randomize_params()
    with pytest.raises(ArgumentError, match="cell_type must be a recurrent cell"):
        ManyToOne("RNNCell", 2)
    with pytest.raises(ArgumentError, match="max_sequence_length"):
        ManyToOne(RNNCell(), 0)
    with pytest.raises(ArgumentError, match="hidden_concat is the model's output"):
        ManyToOne(RNNCell(), 2, np.zeros((1, 1, 1)))
    with pytest.raises(ArgumentError, match="teacher_forcing must be True or False"):
        EncoderDecoder(RNNCell(), 2, 3, 1)  # an instance of Mithril's cell: Mithril's call, not the old one


# -- the old calls --------------------------------------------------------------------------------------------
OLD_CALLS = [
    ("RNNCell(8)", lambda: RNNCell(8), TorchRNNCell, lambda: TorchRNNCell(8)),
    ("LSTMCell(hidden_size=8)", lambda: LSTMCell(hidden_size=8), TorchLSTMCell, lambda: TorchLSTMCell(8)),
    (
        "ManyToOne(cell, hidden_size=, length=)", lambda: ManyToOne(TorchRNNCell, hidden_size=4, length=3),
        TorchManyToOne, lambda: TorchManyToOne(TorchRNNCell, hidden_size=4, length=3),
    ),
    (
        "ManyToOne(cell, 4, 3)", lambda: ManyToOne(TorchLSTMCell, 4, 3), TorchManyToOne,
        lambda: TorchManyToOne(TorchLSTMCell, 4, 3),
    ),
    (
        "OneToMany(cell, hidden_size=, length=, variable_length=)",
        lambda: OneToMany(TorchLSTMCell, hidden_size=4, length=3, variable_length=True), TorchOneToMany,
        lambda: TorchOneToMany(TorchLSTMCell, hidden_size=4, length=3, variable_length=True),
    ),
    (
        "EncoderDecoder(cell, 4, 3, 2)", lambda: EncoderDecoder(TorchLSTMCell, 4, 3, 2), TorchEncoderDecoder,
        lambda: TorchEncoderDecoder(TorchLSTMCell, 4, 3, 2),
    ),
    (
        "EncoderDecoderInference(cell, hidden_size=, length=, decoder_length=)",
        lambda: EncoderDecoderInference(TorchRNNCell, hidden_size=4, length=3, decoder_length=5),
        TorchEncoderDecoderInference,
        lambda: TorchEncoderDecoderInference(TorchRNNCell, hidden_size=4, length=3, decoder_length=5),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("call", "old", "twin", "new"), OLD_CALLS, ids=[c[0] for c in OLD_CALLS])
def test_old_calls_build_the_pytorch_layout_model_with_a_warning(
    call: str, old: Callable[[], Any], twin: type, new: Callable[[], Any]
) -> None:
    with pytest.warns(DeprecationWarning, match=rf"is deprecated; use {twin.__name__}\(") as caught:
        model = old()
    assert type(model) is twin
    assert caught[0].filename == __file__  # the warning names the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        same = new()
    assert (model.input_keys, model.output_keys) == (same.input_keys, same.output_keys)


def test_old_cell_names_in_pytorch_layout_models_warn_and_compute_the_same() -> None:
    """``ManyToOne(RNNCell, hidden_size=, length=)``, this project's call before: the same numbers as
    ``TorchManyToOne(TorchRNNCell, ...)``, with a warning for the model and one for the cell."""
    with pytest.warns(DeprecationWarning) as caught:
        old = ManyToOne(RNNCell, hidden_size=4, length=3)
    messages = [str(w.message) for w in caught]
    assert any("use TorchManyToOne(" in m for m in messages) and any(
        "use cell_type=TorchRNNCell" in m for m in messages
    ), messages
    with pytest.warns(DeprecationWarning, match="use cell_type=TorchLSTMCell"):
        ManyToMany(LSTMCell, hidden_size=4, length=3)
    new = TorchManyToOne(TorchRNNCell, hidden_size=4, length=3)
    rng = np.random.default_rng(17)
    params = {
        "weight_ih": rng.normal(size=(4, 2)),
        "weight_hh": rng.normal(size=(4, 4)),
        "bias_ih": rng.normal(size=4),
        "bias_hh": rng.normal(size=4),
    }
    data = {"input": rng.normal(size=(2, 3, 2)), "initial_hidden": rng.normal(size=(2, 4))}
    results = []
    for model in (old, new):
        backend = ml.NumpyBackend(dtype=ml.float64)
        pm = ml.compile(model, backend, data_keys=set(data), jit=False)
        results.append(
            pm.evaluate(
                {k: backend.array(v) for k, v in params.items()}, {k: backend.array(v) for k, v in data.items()}
            )["output"]
        )
    np.testing.assert_array_equal(results[0], results[1])
