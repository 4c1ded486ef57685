"""Recurrent cells with PyTorch's parameter layout (``nn.RNNCell``/``nn.LSTMCell``/``nn.LSTM`` weights load
as they are) and the sequence models built from them by unrolling a fixed number of steps: ``ManyToOne``,
``ManyToMany``, ``OneToMany`` and ``EncoderDecoder``. Every step shares one set of parameters
(``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``); sequences are ``[batch, time, features]``.

Example:
    >>> from mithril.models import LSTMCell, ManyToOne
    >>> ManyToOne(LSTMCell, hidden_size=8, length=5).input_keys[:3]
    ['input', 'initial_hidden', 'initial_cell']
"""

from __future__ import annotations

from typing import Any

from ... import validation
from ...errors import ArgumentError
from ...framework.keys import IOKey
from ...framework.model import Model
from ._util import op, param

__all__ = ["RNNCell", "LSTMCell", "ManyToOne", "ManyToMany", "OneToMany", "EncoderDecoder"]

PARAMS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


class _Cell(Model):
    """One step: ``input`` ``[B, D]`` and the previous state (``prev_hidden``...) to the new state
    (``hidden``, the canonical output...)."""

    gates = 1
    state_keys: tuple[str, ...] = ("hidden",)

    def __init__(self, hidden_size: int, *, name: str | None = None) -> None:
        super().__init__(name=name)
        h = validation.positive_int(type(self).__name__, "hidden_size", hidden_size)
        self.__dict__["hidden_size"] = h
        x = IOKey("input", shape=["B", "D"])
        for key in ("input", *(f"prev_{s}" for s in self.state_keys)):  # declared first, in this order
            self._keys[key] = self._graph.new_value()
        weights = {
            "weight_ih": param("weight_ih", shape=[self.gates * h, "D"]), "weight_hh": param("weight_hh", shape=[self.gates * h, h]),
            "bias_ih": param("bias_ih", shape=[self.gates * h]), "bias_hh": param("bias_hh", shape=[self.gates * h]),
        }  # fmt: skip
        prev = IOKey("prev_hidden", shape=["B", h])
        pre = op(self, "add", op(self, "linear", x, weights["weight_ih"], weights["bias_ih"]), op(self, "linear", prev, weights["weight_hh"], weights["bias_hh"]))
        state = self._step(pre, h)
        for key in reversed(self.state_keys):  # hidden last: the canonical output
            self.expose(state[key], key)
        self._cin = self._keys["input"]

    def _step(self, pre: Any, h: int) -> dict[str, Any]:
        raise NotImplementedError


class RNNCell(_Cell):
    """Elman cell (``torch.nn.RNNCell`` with tanh): ``hidden = tanh(input @ weight_ih.T + bias_ih +
    prev_hidden @ weight_hh.T + bias_hh)``; ``weight_ih`` is ``[H, D]``, ``weight_hh`` ``[H, H]``.

    >>> RNNCell(4).output_keys
    ['hidden']
    """

    def _step(self, pre: Any, h: int) -> dict[str, Any]:
        return {"hidden": op(self, "tanh", pre)}


class LSTMCell(_Cell):
    """LSTM cell with PyTorch's gate order (input, forget, cell, output) and layout: ``weight_ih``
    ``[4H, D]``, ``weight_hh`` ``[4H, H]``, ``bias_ih``/``bias_hh`` ``[4H]``, so ``nn.LSTMCell`` (and layer
    0 of ``nn.LSTM``: ``weight_ih_l0``...) weights load unchanged.

    >>> LSTMCell(4).input_keys
    ['input', 'prev_hidden', 'prev_cell', 'weight_ih', 'bias_ih', 'weight_hh', 'bias_hh']
    """

    gates = 4
    state_keys = ("hidden", "cell")

    def _step(self, pre: Any, h: int) -> dict[str, Any]:
        i, f, g, o = (op(self, "index", pre, key=(Ellipsis, slice(k * h, (k + 1) * h))) for k in range(4))
        prev_cell = IOKey("prev_cell", shape=["B", h])
        cell = op(self, "add", op(self, "multiply", op(self, "sigmoid", f), prev_cell), op(self, "multiply", op(self, "sigmoid", i), op(self, "tanh", g)))
        hidden = op(self, "multiply", op(self, "sigmoid", o), op(self, "tanh", cell))
        return {"hidden": hidden, "cell": cell}


def _cell_class(owner: str, cell_type: Any) -> type[_Cell]:
    if isinstance(cell_type, _Cell):
        return type(cell_type)
    if isinstance(cell_type, type) and issubclass(cell_type, _Cell):
        return cell_type
    raise ArgumentError(f"{owner}: cell_type must be RNNCell or LSTMCell (the class or an instance), got {cell_type!r}")


class _Unrolled(Model):
    """``length`` copies of one cell sharing their parameters (named ``<prefix>weight_ih``...)."""

    def __init__(self, cell_type: Any, hidden_size: int, length: int, *, name: str | None = None) -> None:
        super().__init__(name=name)
        owner = type(self).__name__
        self.__dict__["cell_class"] = _cell_class(owner, cell_type)
        self.__dict__["hidden_size"] = validation.positive_int(owner, "hidden_size", hidden_size)
        self.__dict__["length"] = validation.positive_int(owner, "length", length)

    def _run(self, inputs: list[Any], state: dict[str, Any], prefix: str = "") -> tuple[list[Any], dict[str, Any]]:
        """Run the cell over ``inputs`` (one ``[B, D]`` connection per step) from ``state``; returns each
        step's hidden and the final state."""
        hiddens = []
        for x in inputs:
            cell = self.cell_class(self.hidden_size)
            self |= cell(input=x, **{f"prev_{s}": state[s] for s in cell.state_keys}, **{p: IOKey(prefix + p) for p in PARAMS})
            state = {s: getattr(cell, s) for s in cell.state_keys}
            hiddens.append(state["hidden"])
        return hiddens, state

    def _initial_state(self, prefix: str = "initial_") -> dict[str, Any]:
        return {s: IOKey(f"{prefix}{s}", shape=["B", self.hidden_size]) for s in self.cell_class.state_keys}

    def _steps(self, key: str) -> list[Any]:
        """``key`` ``[B, T, D]`` split into its ``T = length`` steps."""
        sequence = IOKey(key, shape=["B", self.length, "D"])
        return [op(self, "index", sequence, key=(slice(None), t)) for t in range(self.length)]

    def _stack(self, steps: list[Any]) -> Any:
        """``[B, D]`` per step to ``[B, T, D]``."""
        rows = [op(self, "unsqueeze", s, axis=1) for s in steps]
        return rows[0] if len(rows) == 1 else op(self, "concat", *rows, axis=1, n=len(rows))


class ManyToOne(_Unrolled):
    """Read a sequence ``input`` ``[B, length, D]`` from ``initial_hidden`` (and ``initial_cell``);
    ``output`` is the last hidden state ``[B, H]`` (and ``cell`` the last cell state of an LSTM).

    >>> ManyToOne(RNNCell, hidden_size=4, length=3).output_keys
    ['output']
    """

    def __init__(self, cell_type: Any, hidden_size: int, length: int, *, name: str | None = None) -> None:
        super().__init__(cell_type, hidden_size, length, name=name)
        self._keys["input"] = self._graph.new_value()
        _, state = self._run(self._steps("input"), self._initial_state())
        if "cell" in state:
            self.expose(state["cell"], "cell", canonical=False)
        self.expose(state["hidden"], "output")
        self._cin = self._keys["input"]


class ManyToMany(_Unrolled):
    """Like ``torch.nn.LSTM(batch_first=True)`` with one layer: ``output`` ``[B, length, H]`` is every
    step's hidden state; ``hidden``/``cell`` the final state.

    >>> ManyToMany(LSTMCell, hidden_size=4, length=3).output_keys
    ['hidden', 'cell', 'output']
    """

    def __init__(self, cell_type: Any, hidden_size: int, length: int, *, name: str | None = None) -> None:
        super().__init__(cell_type, hidden_size, length, name=name)
        self._keys["input"] = self._graph.new_value()
        hiddens, state = self._run(self._steps("input"), self._initial_state())
        for key, value in state.items():
            self.expose(value, key, canonical=False)
        self.expose(self._stack(hiddens), "output")
        self._cin = self._keys["input"]


class OneToMany(_Unrolled):
    """Generate ``length`` steps from one ``input`` ``[B, D]``: each step's prediction
    ``hidden @ weight_out.T + bias_out`` (``[B, D]``) is the next step's input; ``output`` ``[B, length, D]``
    holds the predictions.

    >>> OneToMany(RNNCell, hidden_size=4, length=3).output_keys
    ['output']
    """

    def __init__(self, cell_type: Any, hidden_size: int, length: int, *, name: str | None = None) -> None:
        super().__init__(cell_type, hidden_size, length, name=name)
        self._keys["input"] = self._graph.new_value()
        x: Any = IOKey("input", shape=["B", "D"])
        state = self._initial_state()
        predictions = []
        for _ in range(self.length):
            _, state = self._run([x], state)
            x = op(self, "linear", state["hidden"], param("weight_out", shape=["D", self.hidden_size]), param("bias_out", shape=["D"]))
            predictions.append(x)
        self.expose(self._stack(predictions), "output")
        self._cin = self._keys["input"]


class EncoderDecoder(_Unrolled):
    """Sequence to sequence with teacher forcing: an encoder (parameters ``encoder_*``) reads ``input``
    ``[B, length, D]``; its final state starts a decoder (``decoder_*``) that reads ``decoder_input``
    ``[B, decoder_length, E]``; ``output`` ``[B, decoder_length, O]`` projects each decoder step with
    ``weight_out`` ``[O, H]`` and ``bias_out``.

    >>> EncoderDecoder(LSTMCell, hidden_size=4, length=3, decoder_length=2).input_keys[:2]
    ['input', 'decoder_input']
    """

    def __init__(self, cell_type: Any, hidden_size: int, length: int, decoder_length: int, *, name: str | None = None) -> None:
        super().__init__(cell_type, hidden_size, length, name=name)
        decoder_length = validation.positive_int("EncoderDecoder", "decoder_length", decoder_length)
        for key in ("input", "decoder_input"):
            self._keys[key] = self._graph.new_value()
        _, state = self._run(self._steps("input"), self._initial_state(), prefix="encoder_")
        self.__dict__["length"] = decoder_length
        hiddens, _ = self._run(self._steps("decoder_input"), state, prefix="decoder_")
        weight_out, bias_out = param("weight_out", shape=["O", self.hidden_size]), param("bias_out", shape=["O"])
        self.expose(self._stack([op(self, "linear", h, weight_out, bias_out) for h in hiddens]), "output")
        self._cin = self._keys["input"]
