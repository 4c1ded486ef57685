"""Recurrent models with PyTorch's parameter layout (``nn.RNNCell``/``nn.LSTMCell``/``nn.LSTM`` weights load
as they are) and the sequence models built from them by unrolling a fixed number of steps: ``TorchManyToOne``,
``ManyToMany``, ``TorchOneToMany``, ``TorchEncoderDecoder`` and ``TorchEncoderDecoderInference``. Every step
shares one set of parameters (``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``); sequences are
``[batch, time, features]``. They run on every backend ("Torch" names the layout, not the backend).

Mithril's own recurrent family (``RNNCell()``, ``LSTMCell()``, ``ManyToOne(cell, max_sequence_length)``... with
one input per time slot) is :mod:`mithril.models.blocks.recurrent`. These models had those names here before;
the old calls (``RNNCell(hidden_size)``, ``ManyToOne(cell, hidden_size=, length=)``...) still build the models
of this module, with a ``DeprecationWarning`` naming the ``Torch*`` name.

With ``TorchLSTMCell`` a fixed-length sequence runs as one ``lstm_layer`` primitive: ``torch.lstm``
(``nn.LSTM``'s kernel) on PyTorch; elsewhere its decomposition, :func:`lstm_layer_decomposition`: one input
projection (the recurrent bias ``bias_hh`` added to ``bias_ih`` once) and one ``lstm_recurrence`` (the whole
time loop: ``jax.lax.scan`` on JAX; its gradient is one backpropagation-through-time call). Backends without
that primitive (C, GGML) run its decomposition in turn, :func:`lstm_recurrence_decomposition`: the cells
unrolled. RNN cells, variable-length sequences and generation (``TorchOneToMany``, the decoders of
``TorchEncoderDecoderInference``, whose every input is the previous step's prediction) stay unrolled.

Variable-length batches (``variable_length=True``): an int input ``lengths`` ``[B]`` gives each sample's
number of valid steps; past it the state stops changing (what ``torch.nn.utils.rnn.pack_padded_sequence``
computes), so the final state is each sample's state at its own last step, and per-step outputs past it
are 0 (``pad_packed_sequence``'s padding). ``TorchEncoderDecoderInference`` generates: its decoder feeds each
step's prediction back as the next step's input.

Example:
    >>> from mithril.models import TorchLSTMCell, TorchManyToOne
    >>> TorchManyToOne(TorchLSTMCell, hidden_size=8, length=5).input_keys[:3]
    ['input', 'initial_hidden', 'initial_cell']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ... import validation
from ...deprecation import warn_deprecated
from ...errors import ArgumentError, UnsupportedPrimitiveError
from ...framework.keys import IOKey
from ...framework.model import Model
from ..primitive import Primitive
from ._util import op, param

__all__ = [
    "ManyToMany",
    "TorchEncoderDecoder",
    "TorchEncoderDecoderInference",
    "TorchLSTMCell",
    "TorchManyToOne",
    "TorchOneToMany",
    "TorchRNNCell",
    "lstm_layer_decomposition",
    "lstm_recurrence_decomposition",
    "lstm_update",
]  # fmt: skip

PARAMS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _split(model: Model, x: Any, sections: int, axis: int) -> list[Any]:
    """``np.split(x, sections, axis)`` as one ``split`` (its gradient is one ``concat``, where per-part
    ``index`` gradients would each materialise a zero tensor of ``x``'s size)."""
    child = Primitive("split", sections=sections, axis=axis)
    model |= child(input=x)
    return [getattr(child, key) for key in child.output_keys]


def _input_projection(model: Model, x: Any, gates: int, h: int, prefix: str = "") -> Any:
    """``x @ weight_ih.T + bias_ih`` (``[..., D]`` to ``[..., gates * H]``)."""
    weight, bias = param(prefix + "weight_ih", shape=[gates * h, "D"]), param(prefix + "bias_ih", shape=[gates * h])
    return op(model, "linear", x, weight, bias)


def lstm_update(model: Model, gates: Sequence[Any], prev_cell: Any) -> tuple[Any, Any]:
    """The LSTM state update built into ``model`` from the pre-activations of the gates ``(input, forget,
    cell, output)``: ``cell = sigmoid(f) * prev_cell + sigmoid(i) * tanh(g)``, ``hidden = sigmoid(o) *
    tanh(cell)``; returns ``(hidden, cell)``. Every LSTM cell of the library (this module's and Mithril's
    ``LSTMCell``) updates its state with it.

    >>> from mithril.models import IOKey, Model
    >>> model = Model()
    >>> hidden, cell = lstm_update(model, [IOKey(k) for k in "ifgo"], IOKey("c"))
    >>> model.input_keys
    ['f', 'c', 'i', 'g', 'o']
    """
    i, f, g, o = gates
    forget = op(model, "multiply", op(model, "sigmoid", f), prev_cell)
    cell = op(model, "add", forget, op(model, "multiply", op(model, "sigmoid", i), op(model, "tanh", g)))
    hidden = op(model, "multiply", op(model, "sigmoid", o), op(model, "tanh", cell))
    return hidden, cell


class _Cell(Model):
    """One step: ``input`` ``[B, D]`` and the previous state (``prev_hidden``...) to the new state
    (``hidden``, the canonical output...). ``projected=True``: ``input`` is already ``input @ weight_ih.T +
    bias_ih`` (``[B, gates * H]``; no ``weight_ih``/``bias_ih`` here), what the sequence models use to
    project a whole sequence in one product. ``recurrent_bias=False``: no ``bias_hh`` (it was added to the
    projection, as ``lstm_recurrence`` expects)."""

    gates = 1
    state_keys: tuple[str, ...] = ("hidden",)
    hidden_size: int  # set through ``__dict__`` (a Model's attributes are otherwise its connections)

    def __init__(
        self, hidden_size: int, *, projected: bool = False, recurrent_bias: bool = True, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        h = validation.positive_int(type(self).__name__, "hidden_size", hidden_size)
        self.__dict__["hidden_size"] = h
        projected = validation.boolean(type(self).__name__, "projected", projected)
        self._declare_keys("input", *(f"prev_{s}" for s in self.state_keys))
        if projected:
            x = IOKey("input", shape=["B", self.gates * h])
        else:
            x = _input_projection(self, IOKey("input", shape=["B", "D"]), self.gates, h)
        prev = IOKey("prev_hidden", shape=["B", h])
        bias = (
            param("bias_hh", shape=[self.gates * h])
            if validation.boolean(type(self).__name__, "recurrent_bias", recurrent_bias)
            else None
        )
        recurrent = op(self, "linear", prev, param("weight_hh", shape=[self.gates * h, h]), bias)
        pre = op(self, "add", x, recurrent)
        state = self._step(pre, h)
        for key in reversed(self.state_keys):  # hidden last: the canonical output
            self.expose(state[key], key)
        self._cin = self._keys["input"]

    def _step(self, pre: Any, h: int) -> dict[str, Any]:
        raise NotImplementedError


class TorchRNNCell(_Cell):
    """Elman cell (``torch.nn.RNNCell`` with tanh): ``hidden = tanh(input @ weight_ih.T + bias_ih +
    prev_hidden @ weight_hh.T + bias_hh)``; ``weight_ih`` is ``[H, D]``, ``weight_hh`` ``[H, H]``. This
    project's ``RNNCell(hidden_size)`` before ``RNNCell`` became Mithril's cell.

    >>> TorchRNNCell(4).output_keys
    ['hidden']
    """

    def _step(self, pre: Any, h: int) -> dict[str, Any]:
        return {"hidden": op(self, "tanh", pre)}


class TorchLSTMCell(_Cell):
    """LSTM cell with PyTorch's gate order (input, forget, cell, output) and layout: ``weight_ih``
    ``[4H, D]``, ``weight_hh`` ``[4H, H]``, ``bias_ih``/``bias_hh`` ``[4H]``, so ``nn.LSTMCell`` (and layer
    0 of ``nn.LSTM``: ``weight_ih_l0``...) weights load unchanged. This project's ``LSTMCell(hidden_size)``
    before ``LSTMCell`` became Mithril's cell.

    >>> TorchLSTMCell(4).input_keys
    ['input', 'prev_hidden', 'prev_cell', 'weight_ih', 'bias_ih', 'weight_hh', 'bias_hh']
    """

    gates = 4
    state_keys = ("hidden", "cell")

    def _step(self, pre: Any, h: int) -> dict[str, Any]:
        hidden, cell = lstm_update(self, _split(self, pre, 4, axis=-1), IOKey("prev_cell", shape=["B", h]))
        return {"hidden": hidden, "cell": cell}


def _cell_class(owner: str, cell_type: Any) -> type[_Cell]:
    """The PyTorch-layout cell class ``cell_type`` names: ``TorchRNNCell``/``TorchLSTMCell`` (the class or an
    instance); Mithril's ``RNNCell``/``LSTMCell``, what these models took before those names became Mithril's
    cells, are taken for them with a ``DeprecationWarning``."""
    if isinstance(cell_type, _Cell):
        return type(cell_type)
    if isinstance(cell_type, type) and issubclass(cell_type, _Cell):
        return cell_type
    # Mithril's cells (mithril.models.blocks.recurrent, which builds on this module) name their twin here
    mithril_cell = cell_type if isinstance(cell_type, type) else type(cell_type)
    torch_cell = {"TorchRNNCell": TorchRNNCell, "TorchLSTMCell": TorchLSTMCell}.get(getattr(mithril_cell, "_twin", ""))
    if torch_cell is not None:
        name, twin = mithril_cell.__name__, torch_cell.__name__
        warn_deprecated(
            f"{owner}(cell_type={name})",
            f"cell_type={twin}; {name} is now Mithril's cell",
            stacklevel=5,
            mithrils=False,
        )
        return torch_cell
    raise ArgumentError(
        f"{owner}: cell_type must be TorchRNNCell or TorchLSTMCell (the class or an instance), got {cell_type!r}"
    )


class _Unrolled(Model):
    """``length`` copies of one cell sharing their parameters (named ``<prefix>weight_ih``...)."""

    # set through ``__dict__`` (a Model's attributes are otherwise its connections)
    cell_class: type[_Cell]
    hidden_size: int
    length: int
    variable_length: bool

    def __init__(
        self, cell_type: Any, hidden_size: int, length: int, *, variable_length: bool = False, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        owner = type(self).__name__
        self.__dict__["cell_class"] = _cell_class(owner, cell_type)
        self.__dict__["hidden_size"] = validation.positive_int(owner, "hidden_size", hidden_size)
        self.__dict__["length"] = validation.positive_int(owner, "length", length)
        self.__dict__["variable_length"] = validation.boolean(owner, "variable_length", variable_length)
        self._build()

    def _build(self) -> None:
        """Build the graph from the checked arguments; called once by ``__init__`` (the default builds
        nothing: a subclass with more arguments builds in its own ``__init__``)."""

    def _declare(self, *keys: str) -> None:
        """Declare the inputs ``keys`` first, in this order, then ``lengths`` (when ``variable_length``) and
        the initial state (``initial_hidden``...)."""
        lengths = ("lengths",) if self.variable_length else ()
        self._declare_keys(*keys, *lengths, *(f"initial_{s}" for s in self.cell_class.state_keys))

    def _lengths(self) -> IOKey | None:
        """The per-sample step counts ``lengths`` ``[B]`` (int), or ``None`` for fixed-length sequences."""
        return IOKey("lengths", type="int", shape=["B"]) if self.variable_length else None

    def _valid(self, lengths: Any, t: int) -> Any:
        """``[B, 1]``: whether step ``t`` is inside each sample (``t < lengths``)."""
        return op(self, "unsqueeze", op(self, "greater", lengths, t), axis=1)

    def _run(
        self, inputs: list[Any], state: dict[str, Any], prefix: str = "", lengths: Any = None, projected: bool = False,
        recurrent_bias: bool = True,
    ) -> tuple[list[Any], dict[str, Any]]:  # fmt: skip
        """Run the cell over ``inputs`` (one ``[B, D]`` connection per step, or ``[B, gates * H]`` when
        ``projected``) from ``state``; returns each step's hidden and the final state. With ``lengths`` a
        sample's state is kept past its last step and its hidden there is 0."""
        hiddens = []
        weights: tuple[str, ...] = PARAMS[1::2] if projected else PARAMS  # weight_hh, bias_hh
        weights = weights if recurrent_bias else tuple(w for w in weights if w != "bias_hh")
        for t, x in enumerate(inputs):
            cell = self.cell_class(self.hidden_size, projected=projected, recurrent_bias=recurrent_bias)
            self |= cell(
                input=x, **{f"prev_{s}": state[s] for s in cell.state_keys}, **{p: IOKey(prefix + p) for p in weights}
            )
            new = {s: getattr(cell, s) for s in cell.state_keys}
            if lengths is None:
                state = new
                hiddens.append(state["hidden"])
                continue
            valid = self._valid(lengths, t)
            state = {s: op(self, "where", valid, new[s], state[s]) for s in new}
            hiddens.append(op(self, "where", valid, new["hidden"], 0.0))
        return hiddens, state

    def _initial_state(self, prefix: str = "initial_") -> dict[str, Any]:
        return {s: IOKey(f"{prefix}{s}", shape=["B", self.hidden_size]) for s in self.cell_class.state_keys}

    def _steps(self, key: str, prefix: str = "") -> list[Any]:
        """``key`` ``[B, T, D]`` projected by ``<prefix>weight_ih``/``bias_ih`` in one product (as
        ``nn.LSTM`` does) and split into its ``T = length`` steps ``[B, gates * H]``."""
        sequence = IOKey(key, shape=["B", self.length, "D"])
        projected = _input_projection(self, sequence, self.cell_class.gates, self.hidden_size, prefix)
        return self._split_steps(projected)

    def _split_steps(self, sequence: Any) -> list[Any]:
        """``[B, T, F]`` to its ``T = length`` steps ``[B, F]`` (one ``split``)."""
        return [op(self, "squeeze", part, axis=1) for part in _split(self, sequence, self.length, axis=1)]

    def _read(
        self, key: str, state: dict[str, Any], prefix: str = "", lengths: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        """Run the cell over the sequence ``key`` ``[B, length, D]`` from ``state``: every step's hidden
        (a list of ``[B, H]``, or one ``[B, length, H]`` where an LSTM reads a fixed-length sequence with
        one ``lstm_recurrence``) and the final state."""
        if self.cell_class is not TorchLSTMCell or lengths is not None:
            return self._run(self._steps(key, prefix), state, prefix, lengths, projected=True)

        h = self.hidden_size
        self._declare_keys(
            *(prefix + name for name in ("weight_ih", "bias_ih", "weight_hh", "bias_hh"))
        )  # the unrolled models' order
        layer = Primitive("lstm_layer")
        weights = {
            "weight_ih": param(prefix + "weight_ih", shape=[4 * h, "D"]),
            "weight_hh": param(prefix + "weight_hh", shape=[4 * h, h]),
            "bias_ih": param(prefix + "bias_ih", shape=[4 * h]), "bias_hh": param(prefix + "bias_hh", shape=[4 * h]),
        }  # fmt: skip
        self |= layer(
            input=IOKey(key, shape=["B", self.length, "D"]),
            **weights,
            initial_hidden=state["hidden"],
            initial_cell=state["cell"],
        )
        return layer.output, {"hidden": layer.hidden, "cell": layer.cell}

    def _generate(self, x: Any, state: dict[str, Any], steps: int, lengths: Any = None, prefix: str = "") -> list[Any]:
        """``steps`` predictions ``hidden @ weight_out.T + bias_out`` from input ``x``, each the next step's
        input (0 past a sample's ``lengths``)."""
        predictions = []
        weight_out, bias_out = param("weight_out", shape=["O", self.hidden_size]), param("bias_out", shape=["O"])
        for t in range(steps):
            _, state = self._run([x], state, prefix)
            x = op(self, "linear", state["hidden"], weight_out, bias_out)
            predictions.append(x if lengths is None else op(self, "where", self._valid(lengths, t), x, 0.0))
        return predictions

    def _stack(self, steps: Any) -> Any:
        """``[B, D]`` per step to ``[B, T, D]`` (a sequence already stacked is returned as is)."""
        if not isinstance(steps, list):
            return steps
        rows = [op(self, "unsqueeze", s, axis=1) for s in steps]
        return rows[0] if len(rows) == 1 else op(self, "concat", *rows, axis=1, n=len(rows))


class TorchManyToOne(_Unrolled):
    """Read a sequence ``input`` ``[B, length, D]`` from ``initial_hidden`` (and ``initial_cell``);
    ``output`` is the last hidden state ``[B, H]`` (and ``cell`` the last cell state of an LSTM). With
    ``variable_length=True``, ``lengths`` ``[B]`` (1..length) picks each sample's last step: a padded batch
    gives each sequence's own final state.

    This project's ``ManyToOne(cell_type, hidden_size, length)`` before ``ManyToOne`` became Mithril's model.

    >>> TorchManyToOne(TorchRNNCell, hidden_size=4, length=3).output_keys
    ['output']
    >>> TorchManyToOne(TorchRNNCell, hidden_size=4, length=3, variable_length=True).input_keys[:3]
    ['input', 'lengths', 'initial_hidden']
    """

    def _build(self) -> None:
        self._declare("input")
        _, state = self._read("input", self._initial_state(), lengths=self._lengths())
        if "cell" in state:
            self.expose(state["cell"], "cell", canonical=False)
        self.expose(state["hidden"], "output")
        self._cin = self._keys["input"]


class ManyToMany(_Unrolled):
    """Like ``torch.nn.LSTM(batch_first=True)`` with one layer: ``output`` ``[B, length, H]`` is every
    step's hidden state; ``hidden``/``cell`` the final state. ``variable_length=True`` is ``nn.LSTM`` on a
    ``pack_padded_sequence(input, lengths)``: ``output`` is 0 past each sample's length and
    ``hidden``/``cell`` are each sample's state at its last step.

    >>> ManyToMany(TorchLSTMCell, hidden_size=4, length=3).output_keys
    ['hidden', 'cell', 'output']
    """

    def _build(self) -> None:
        self._declare("input")
        hiddens, state = self._read("input", self._initial_state(), lengths=self._lengths())
        for key, value in state.items():
            self.expose(value, key, canonical=False)
        self.expose(self._stack(hiddens), "output")
        self._cin = self._keys["input"]


class TorchOneToMany(_Unrolled):
    """Generate ``length`` steps from one ``input`` ``[B, D]``: each step's prediction
    ``hidden @ weight_out.T + bias_out`` (``[B, D]``) is the next step's input; ``output`` ``[B, length, D]``
    holds the predictions. Its parameters do not depend on ``length``: a model trained on short sequences
    generates longer ones with the same weights. ``variable_length=True``: sample ``b`` generates
    ``lengths[b]`` steps (``output`` is 0 after them).

    This project's ``OneToMany(cell_type, hidden_size, length)`` before ``OneToMany`` became Mithril's model.

    >>> TorchOneToMany(TorchRNNCell, hidden_size=4, length=3).output_keys
    ['output']
    """

    def _build(self) -> None:
        self._declare("input")
        predictions = self._generate(
            IOKey("input", shape=["B", "D"]), self._initial_state(), self.length, self._lengths()
        )
        self.expose(self._stack(predictions), "output")
        self._cin = self._keys["input"]


class _Seq2Seq(_Unrolled):
    """An encoder (parameters ``encoder_*``) reading ``input`` ``[B, length, D]`` (``lengths[b]`` steps of
    sample ``b`` with ``variable_length=True``) whose final state starts a decoder (``decoder_*``) that
    gives ``output`` from ``decoder_input`` in ``decoder_length`` steps (:meth:`_decode`).
    ``variable_length=None`` is the class's ``default_variable_length``."""

    default_variable_length = False

    def __init__(
        self,
        cell_type: Any,
        hidden_size: int,
        length: int,
        decoder_length: int,
        *,
        variable_length: bool | None = None,
        name: str | None = None,
    ) -> None:
        if variable_length is None:
            variable_length = self.default_variable_length
        super().__init__(cell_type, hidden_size, length, variable_length=variable_length, name=name)
        decoder_length = validation.positive_int(type(self).__name__, "decoder_length", decoder_length)
        self._declare("input", "decoder_input")
        _, state = self._read("input", self._initial_state(), "encoder_", self._lengths())
        self.expose(self._decode(state, decoder_length), "output")
        self._cin = self._keys["input"]

    def _decode(self, state: dict[str, Any], decoder_length: int) -> Any:
        """The decoder from the encoder's final ``state``: ``output`` ``[B, decoder_length, O]``."""
        raise NotImplementedError


class TorchEncoderDecoder(_Seq2Seq):
    """Sequence to sequence with teacher forcing: an encoder (parameters ``encoder_*``) reads ``input``
    ``[B, length, D]``; its final state starts a decoder (``decoder_*``) that reads ``decoder_input``
    ``[B, decoder_length, E]``; ``output`` ``[B, decoder_length, O]`` projects each decoder step with
    ``weight_out`` ``[O, H]`` and ``bias_out``. ``variable_length=True``: the encoder reads ``lengths[b]``
    steps of sample ``b`` (its state at its last step starts the decoder).

    This project's ``EncoderDecoder(cell_type, hidden_size, length, decoder_length)`` before
    ``EncoderDecoder`` became Mithril's model.

    >>> TorchEncoderDecoder(TorchLSTMCell, hidden_size=4, length=3, decoder_length=2).input_keys[:2]
    ['input', 'decoder_input']
    """

    def _decode(self, state: dict[str, Any], decoder_length: int) -> Any:
        self.__dict__["length"] = decoder_length
        hiddens, _ = self._read("decoder_input", state, "decoder_")
        weight_out, bias_out = param("weight_out", shape=["O", self.hidden_size]), param("bias_out", shape=["O"])
        if isinstance(hiddens, list):
            return self._stack([op(self, "linear", h, weight_out, bias_out) for h in hiddens])
        return op(self, "linear", hiddens, weight_out, bias_out)


class TorchEncoderDecoderInference(_Seq2Seq):
    """``TorchEncoderDecoder``'s generation: the encoder (``encoder_*``) reads ``input`` ``[B, length, D]``
    (``lengths[b]`` steps of sample ``b`` with ``variable_length=True``, the default); the decoder
    (``decoder_*``) starts from its final state with ``decoder_input`` ``[B, O]`` (a start token) and feeds
    each prediction ``hidden @ weight_out.T + bias_out`` back as its next input, ``decoder_length`` times:
    ``output`` ``[B, decoder_length, O]``. The parameters are ``TorchEncoderDecoder``'s (with ``E == O``), so a
    model trained with teacher forcing generates with the same weights. This project's
    ``EncoderDecoderInference(cell_type, hidden_size, length, decoder_length)`` before the name became
    Mithril's model.

    >>> TorchEncoderDecoderInference(TorchLSTMCell, hidden_size=4, length=3, decoder_length=5).input_keys[:3]
    ['input', 'decoder_input', 'lengths']
    """

    default_variable_length = True

    def _decode(self, state: dict[str, Any], decoder_length: int) -> Any:
        predictions = self._generate(IOKey("decoder_input", shape=["B", "O"]), state, decoder_length, prefix="decoder_")
        return self._stack(predictions)


class _LSTMRecurrence(_Unrolled):
    """``lstm_recurrence`` as LSTM cells unrolled over ``length`` steps: what backends without the
    primitive compile (the sequence models' graph before the primitive existed)."""

    def __init__(self, hidden_size: int, length: int) -> None:
        super().__init__(TorchLSTMCell, hidden_size, length)
        self._declare("input", "weight_hh")
        steps = self._split_steps(IOKey("input", shape=["B", length, 4 * hidden_size]))
        hiddens, state = self._run(steps, self._initial_state(), projected=True, recurrent_bias=False)
        self.expose(state["hidden"], "hidden", canonical=False)
        self.expose(state["cell"], "cell", canonical=False)
        self.expose(self._stack(hiddens), "output")


def lstm_recurrence_decomposition(attrs: Mapping[str, Any], shapes: Mapping[str, Any]) -> Model:
    """The ``lstm_recurrence`` primitive as a logical model of cells (``split``, ``linear``, ``sigmoid``...),
    which ``ml.compile`` splices in on backends without the primitive. It unrolls the steps, so the
    sequence length (``input``'s dim 1) must be known when compiling.

    >>> lstm_recurrence_decomposition({}, {"input": (2, 3, 8), "weight_hh": (8, 2)}).output_keys
    ['hidden', 'cell', 'output']
    """
    dims, weight = shapes.get("input"), shapes.get("weight_hh")
    length = dims[1] if dims else None
    hidden = weight[1] if weight and weight[1] is not None else (dims[2] // 4 if dims and dims[2] is not None else None)
    if length is None or hidden is None:
        raise UnsupportedPrimitiveError(
            f"lstm_recurrence: its decomposition (for backends without the primitive) unrolls the steps, so it "
            f"needs the sequence length and hidden size at compile time; expected input [B, T, 4H] and "
            f"weight_hh [4H, H] with T and H known, given {dims} and {weight}: pass them in ml.compile(shapes=...)"
        )
    return _LSTMRecurrence(hidden, length)


def lstm_layer_decomposition(attrs: Mapping[str, Any], shapes: Mapping[str, Any]) -> Model:
    """The ``lstm_layer`` primitive as ``linear(input, weight_ih, bias_ih + bias_hh)`` followed by one
    ``lstm_recurrence``: what every backend but PyTorch compiles.

    >>> lstm_layer_decomposition({}, {}).output_keys
    ['output', 'hidden', 'cell']
    """
    model = Model()
    bias = op(model, "add", IOKey("bias_ih"), IOKey("bias_hh"))
    projected = op(model, "linear", IOKey("input"), IOKey("weight_ih"), bias)
    loop = Primitive("lstm_recurrence")
    model |= loop(input=projected, weight_hh="weight_hh", initial_hidden="initial_hidden", initial_cell="initial_cell")
    for key in ("output", "hidden", "cell"):
        model.expose(getattr(loop, key), key, canonical=key == "output")
    return model
