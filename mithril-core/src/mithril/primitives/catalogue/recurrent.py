"""Recurrent primitives: a whole LSTM layer (``lstm_layer``: the input projection and the time loop), the
time loop alone (``lstm_recurrence``) and its backpropagation through time (the gradient helper
``lstm_recurrence_grad``).

A backend without one of them runs its *decomposition* (``PrimitiveSpec.decomposition``, spliced in at
compile time from ``mithril.models.blocks.sequence``): ``lstm_layer`` is one ``linear`` and one
``lstm_recurrence`` everywhere but PyTorch (which runs ``torch.lstm``, the kernel behind ``nn.LSTM``), and
``lstm_recurrence`` is the unrolled cells on C and GGML.

Example:
    >>> from mithril.plugins import registry
    >>> registry().primitive("lstm_recurrence").output_keys({})
    ('output', 'hidden', 'cell')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...shapes import Dim, Shape, ShapeMismatch, unify
from ..shape_rules import float_results
from ..spec import PrimitiveSpec

__all__ = ["LSTM_INPUTS", "LSTM_LAYER_INPUTS", "LSTM_OUTPUTS", "SPECS"]

LSTM_INPUTS = ("input", "weight_hh", "initial_hidden", "initial_cell")
LSTM_LAYER_INPUTS = ("input", "weight_ih", "weight_hh", "bias_ih", "bias_hh", "initial_hidden", "initial_cell")
LSTM_OUTPUTS = ("output", "hidden", "cell")
_GRAD_INPUTS = ("output_grad", "hidden_grad", "cell_grad", *LSTM_INPUTS, "output")


def _lstm_dims(io: Mapping[str, Shape]) -> tuple[Dim, Dim, Dim]:
    """Unify the forward inputs and the outputs (``output`` ``[B, T, H]``, ``hidden``/``cell`` ``[B, H]``);
    returns ``(B, T, H)`` and checks ``input``'s last dim is ``4 H`` once both are known."""
    batch, steps, gates, hidden = Dim(), Dim(), Dim(), Dim()
    unify(io["input"], Shape([batch, steps, gates]))
    unify(io["weight_hh"], Shape([gates, hidden]))
    for key in ("initial_hidden", "initial_cell", "hidden", "cell"):
        if key in io:
            unify(io[key], Shape([batch, hidden]))
    if "output" in io:
        unify(io["output"], Shape([batch, steps, hidden]))
    if gates.value is not None and hidden.value is not None and gates.value != 4 * hidden.value:
        raise ShapeMismatch(f"input's last dim (the gates) must be 4 * hidden = {4 * hidden.value}, got {gates.value}")
    return batch, steps, hidden


def _lstm_rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    _lstm_dims(io)
    return True


def _lstm_layer_rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """``input`` ``[B, T, D]``, ``weight_ih`` ``[4H, D]``, biases ``[4H]``; the loop's rule for the rest."""
    batch, steps, features, gates = Dim(), Dim(), Dim(), Dim()
    unify(io["input"], Shape([batch, steps, features]))
    unify(io["weight_ih"], Shape([gates, features]))
    for key in ("bias_ih", "bias_hh"):
        unify(io[key], Shape([gates]))
    loop = {k: v for k, v in io.items() if k in LSTM_INPUTS[1:] or k in LSTM_OUTPUTS}
    _lstm_dims({**loop, "input": Shape([batch, steps, gates])})
    return True


def _lstm_grad_rule(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """Cotangents shaped like the forward outputs; one gradient shaped like each forward input."""
    batch, steps, hidden = _lstm_dims(io)
    unify(io["output_grad"], Shape([batch, steps, hidden]))
    for key in ("hidden_grad", "cell_grad"):
        unify(io[key], Shape([batch, hidden]))
    for key in LSTM_INPUTS:
        unify(io[f"{key}_grad"], io[key])
    return True


SPECS = (
    PrimitiveSpec(
        "lstm_layer",
        LSTM_LAYER_INPUTS,
        _lstm_layer_rule,
        float_results(*LSTM_OUTPUTS),
        outputs=LSTM_OUTPUTS,
        doc="one LSTM layer, torch.nn.LSTM(batch_first=True) with its weights as inputs: input [B, T, D], "
        "weight_ih [4H, D], weight_hh [4H, H], bias_ih/bias_hh [4H] (gate order i, f, g, o); output [B, T, H] "
        "every h, hidden/cell [B, H] the final state; elsewhere than PyTorch: linear + lstm_recurrence",
        decomposition="mithril.models.blocks.sequence:lstm_layer_decomposition",
    ),
    PrimitiveSpec(
        "lstm_recurrence",
        LSTM_INPUTS,
        _lstm_rule,
        float_results(*LSTM_OUTPUTS),
        outputs=LSTM_OUTPUTS,
        doc="an LSTM layer's time loop (PyTorch gate order i, f, g, o): input [B, T, 4H] holds x_t @ W_ih^T + "
        "b_ih + b_hh; per step gates = input[:, t] + h @ weight_hh^T, c = sig(f) c + sig(i) tanh(g), "
        "h = sig(o) tanh(c); output [B, T, H] every h, hidden/cell [B, H] the final state",
        decomposition="mithril.models.blocks.sequence:lstm_recurrence_decomposition",
    ),
    PrimitiveSpec(
        "lstm_recurrence_grad",
        _GRAD_INPUTS,
        _lstm_grad_rule,
        float_results(*(f"{k}_grad" for k in LSTM_INPUTS)),
        outputs=tuple(f"{k}_grad" for k in LSTM_INPUTS),
        differentiable=(),
        doc="backpropagation through time of lstm_recurrence: the cotangents of output, hidden and cell pulled "
        "back to input, weight_hh, initial_hidden and initial_cell (output: the forward's, to recompute gates)",
    ),
)
