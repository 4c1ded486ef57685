"""Mithril's recurrent family: cells that advance one time step of a batch sorted by sequence length, and the
models that unroll them over *time slots*.

Time slot ``input<t>`` ``[N_t, 1, D]`` holds step ``t`` of the sequences longer than ``t``, longest first
(:func:`mithril.utils.utils.pack_data_into_time_slots` builds the slots), so ``N_0 >= N_1 >= ...``. A cell's
previous state may have more rows than its input: it continues the first ``N`` (``prev_hidden[:N]``) and
passes the others on unchanged as ``hidden_compl`` (``prev_hidden[N:]``: the sequences that have ended). The
hidden size is never given: it is the last dim of ``initial_hidden`` (or of the weights).

- :class:`RNNCell`: ``hidden = tanh(prev_hidden[:N] @ w_hh.T + input @ w_ih.T + bias_h)`` and the output
  projection ``output = hidden @ w_ho.T + bias_o``.
- :class:`LSTMCell`: gates ``[input, prev_hidden[:N]] @ w_<g>.T + bias_<g>`` for ``g`` in ``i, f, c, o``,
  ``cell = sigmoid(f) * prev_cell[:N] + sigmoid(i) * tanh(c)``, ``hidden = sigmoid(o) * tanh(cell)``,
  ``output = hidden @ w_out.T + bias_out``.
- :class:`ManyToOne` reads ``input0``... (outputs ``output0``...) and gives the final hidden state of every
  sequence as ``hidden_concat``; :class:`OneToMany` generates ``output0``... from one ``input`` (each output,
  or with ``teacher_forcing`` each ``target<t-1>``, cut to ``target<t>``'s rows, is the next input);
  :class:`OneToManyInference` feeds its outputs back uncut; :class:`EncoderDecoder` and
  :class:`EncoderDecoderInference` join a ``ManyToOne`` encoder to a ``OneToMany``/``OneToManyInference``
  decoder whose keys are ``decoder_<key>`` (targets keep their names). Every step shares the cell's parameters.

These names were this project's PyTorch-layout models (:mod:`mithril.models.blocks.sequence`: ``[B, T, D]``
sequences and ``hidden_size`` given), now ``TorchRNNCell``, ``TorchManyToOne``...: calling a name the old way
(``RNNCell(8)``, ``ManyToOne(cell, hidden_size=8, length=5)``) still builds that model, with a
``DeprecationWarning`` naming the new name.

Example:
    >>> from mithril.models import LSTMCell, ManyToOne
    >>> model = ManyToOne(LSTMCell(), max_sequence_length=2)
    >>> model.input_keys[:4], model.output_keys
    (['input0', 'input1', 'initial_hidden', 'initial_cell'], ['output0', 'output1', 'hidden_concat'])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ... import validation
from ...deprecation import warn_deprecated
from ...errors import ArgumentError
from ...framework.keys import TBD, Connection, IOKey
from ...framework.model import Model
from . import sequence
from ._util import op, param, set_given

__all__ = [
    "Cell",
    "EncoderDecoder",
    "EncoderDecoderInference",
    "LSTMCell",
    "ManyToOne",
    "OneToMany",
    "OneToManyInference",
    "RNNCell",
]  # fmt: skip


# -- rows of a batch ------------------------------------------------------------------------------------------
def _pick_rows(model: Model, x: Any, rows: Any) -> Connection:
    """``x[rows]`` for ``x`` ``[M, 1, F]`` and int ``rows`` ``[K]``: ``[K, 1, F]`` (one ``embedding`` lookup,
    whose gradient adds back into the rows read)."""
    table = op(model, "squeeze", x, axis=1)
    return op(model, "embedding", op(model, "unsqueeze", rows, axis=1), table)


def _leading_rows(model: Model, x: Any, like: Any) -> Connection:
    """``x[:N]`` with ``N`` the number of rows of ``like`` (read when the model runs)."""
    return _pick_rows(model, x, op(model, "positions", like, axis=0))


def _rows_after(model: Model, x: Any, like: Any) -> Connection:
    """``x[N:]`` with ``N`` the number of rows of ``like``: the row numbers ``N .. len(x) - 1`` are computed
    from the two shapes when the model runs (folded when they are known at compile time)."""
    start = op(model, "index", op(model, "shape", like), key=0)
    stop = op(model, "index", op(model, "shape", x), key=0)
    return _pick_rows(model, x, op(model, "arange_between", start, stop, 1))


# -- the names this project used for its PyTorch-layout models -----------------------------------------------
_CELL_KEYWORDS = frozenset({"hidden_size", "projected", "recurrent_bias"})
_SEQUENCE_KEYWORDS = frozenset({"hidden_size", "length", "decoder_length", "variable_length"})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_torch_cell(cell: Any) -> bool:
    return isinstance(cell, sequence._Cell) or (isinstance(cell, type) and issubclass(cell, sequence._Cell))


class _Renamed(Model):
    """A Mithril model whose name this project gave before to its PyTorch-layout twin (``_twin``, a class of
    :mod:`~mithril.models.blocks.sequence`). A call in the twin's form (an int at positional ``_int_at``, one of
    ``_keywords``, or a PyTorch-layout cell) builds the twin, with a ``DeprecationWarning`` naming it."""

    _twin: ClassVar[str] = ""
    _twin_call: ClassVar[str] = ""
    _int_at: ClassVar[int] = 0
    _keywords: ClassVar[frozenset[str]] = _SEQUENCE_KEYWORDS

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        twin = cls.__dict__.get("_twin")
        if twin and cls._is_twin_call(args, kwargs):
            warn_deprecated(
                f"{cls.__name__}{cls._twin_call} (the PyTorch-layout model)",
                f"{twin}{cls._twin_call}; {cls.__name__} is now Mithril's model",
                mithrils=False,
            )
            return getattr(sequence, twin)(*args, **kwargs)
        instance = super().__new__(cls)
        instance.__dict__["_construction"] = (args, dict(kwargs))
        return instance

    @classmethod
    def _is_twin_call(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if cls._keywords & set(kwargs):
            return True
        cell = args[0] if args else kwargs.get("cell_type")
        if _is_torch_cell(cell):
            return True
        if isinstance(cell, Cell):  # an instance of Mithril's cell (the old calls gave a class)
            return False
        return len(args) > cls._int_at and _is_int(args[cls._int_at])


# -- cells ----------------------------------------------------------------------------------------------------
class Cell(_Renamed):
    """Base of Mithril's recurrent cells: one step with the keys ``input``, ``prev_<state>`` for each of
    ``state_keys``, the parameters ``shared_keys`` (one set for every step of a recurrent model) and the
    outputs ``<state>``, ``hidden_compl`` and ``out_key``. The recurrent models build a new cell per step with
    the arguments this one was built with (:meth:`fresh`), so a subclass works with them as it is.

    >>> sorted(RNNCell.shared_keys)
    ['bias_h', 'bias_o', 'w_hh', 'w_ho', 'w_ih']
    """

    shared_keys: ClassVar[tuple[str, ...]] = ()
    state_keys: ClassVar[tuple[str, ...]] = ("hidden",)
    out_key: ClassVar[str] = "output"
    projection_key: ClassVar[str | None] = None
    """The weight ``[d_out, d_hid]`` of the output projection, if the cell has one."""
    _keywords = _CELL_KEYWORDS

    def fresh(self) -> Cell:
        """A new, unconnected cell built with this cell's arguments (its name left out).

        >>> cell = RNNCell(name="rnn")
        >>> copy = cell.fresh()
        >>> copy is not cell, copy.name, copy.input_keys == cell.input_keys
        (True, None, True)
        """
        args, kwargs = self.__dict__["_construction"]
        fresh: Cell = type(self)(*args, **{k: v for k, v in kwargs.items() if k != "name"})
        return fresh

    def _finish(self, shapes: dict[str, list[Any]], given: dict[str, Any]) -> None:
        """Constrain the keys' shapes (symbols shared), give the constructor's values and make ``input`` the
        canonical input (``output`` is the canonical output)."""
        self.set_shapes(None, **shapes)
        set_given(self, **given)
        self._cin = self._keys["input"]


class RNNCell(Cell):
    """Mithril's Elman cell with an output projection, one time slot of a sorted batch:
    ``hidden = tanh(prev_hidden[:N] @ w_hh.T + input @ w_ih.T + bias_h)``, ``output = hidden @ w_ho.T + bias_o``
    and ``hidden_compl = prev_hidden[N:]`` for ``input`` ``[N, 1, d_in]`` and ``prev_hidden`` ``[M, 1, d_hid]``
    (``M >= N``). The hidden size comes from ``prev_hidden`` or the weights (``w_ih`` ``[d_hid, d_in]``,
    ``w_hh`` ``[d_hid, d_hid]``, ``w_ho`` ``[d_out, d_hid]``). The arguments give keys values (``TBD``: an
    input). ``RNNCell(hidden_size)``, this project's PyTorch-layout cell, builds ``TorchRNNCell`` (deprecated).

    >>> RNNCell().input_keys
    ['input', 'prev_hidden', 'w_ih', 'w_hh', 'w_ho', 'bias_h', 'bias_o']
    >>> RNNCell().output_keys
    ['hidden', 'hidden_compl', 'output']
    """

    shared_keys = ("w_ih", "w_hh", "w_ho", "bias_h", "bias_o")
    projection_key = "w_ho"
    _twin = "TorchRNNCell"
    _twin_call = "(hidden_size)"

    def __init__(
        self, input: Any = TBD, w_ih: Any = TBD, w_hh: Any = TBD, w_ho: Any = TBD, bias_h: Any = TBD,
        bias_o: Any = TBD, *, name: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(name=name)
        self._declare_keys("input", "prev_hidden", *self.shared_keys, "hidden", "hidden_compl", "output")
        x, prev = IOKey("input"), IOKey("prev_hidden")
        recurrent = op(self, "linear", _leading_rows(self, prev, x), param("w_hh"), None)
        projected = op(self, "linear", x, param("w_ih"), None)
        hidden = op(self, "tanh", op(self, "add", op(self, "add", recurrent, projected), param("bias_h")))
        self.expose(hidden, "hidden", canonical=False)
        self.expose(_rows_after(self, prev, x), "hidden_compl", canonical=False)
        self.expose(op(self, "linear", hidden, param("w_ho"), param("bias_o")), "output")
        shapes: dict[str, list[Any]] = {
            "input": ["N", 1, "d_in"], "prev_hidden": ["M", 1, "d_hid"], "w_ih": ["d_hid", "d_in"],
            "w_hh": ["d_hid", "d_hid"], "w_ho": ["d_out", "d_hid"], "bias_h": ["d_hid"], "bias_o": ["d_out"],
            "hidden": ["N", 1, "d_hid"], "hidden_compl": [None, 1, "d_hid"], "output": ["N", 1, "d_out"],
        }  # fmt: skip
        given = {"input": input, "w_ih": w_ih, "w_hh": w_hh, "w_ho": w_ho, "bias_h": bias_h, "bias_o": bias_o}
        self._finish(shapes, given)


class LSTMCell(Cell):
    """Mithril's LSTM cell with an output projection, one time slot of a sorted batch: with
    ``z = [input, prev_hidden[:N]]`` (concatenated features) the gates ``z @ w_<g>.T + bias_<g>`` for ``g``
    in ``i`` (input), ``f`` (forget), ``c`` (cell), ``o`` (output) give ``cell = sigmoid(f) * prev_cell[:N] +
    sigmoid(i) * tanh(c)`` and ``hidden = sigmoid(o) * tanh(cell)``; ``output = hidden @ w_out.T + bias_out``,
    ``hidden_compl = prev_hidden[N:]``. ``w_<g>`` is ``[d_hid, d_in + d_hid]``, ``w_out`` ``[d_out, d_hid]``.
    ``LSTMCell(hidden_size)``, this project's PyTorch-layout cell, builds ``TorchLSTMCell`` (deprecated).

    >>> LSTMCell().input_keys[:3], LSTMCell().output_keys
    (['input', 'prev_hidden', 'prev_cell'], ['hidden', 'cell', 'hidden_compl', 'output'])
    """

    shared_keys = ("w_i", "w_f", "w_c", "w_o", "w_out", "bias_f", "bias_i", "bias_c", "bias_o", "bias_out")
    state_keys = ("hidden", "cell")
    projection_key = "w_out"
    _twin = "TorchLSTMCell"
    _twin_call = "(hidden_size)"

    def __init__(
        self, input: Any = TBD, w_i: Any = TBD, w_f: Any = TBD, w_c: Any = TBD, w_o: Any = TBD, w_out: Any = TBD,
        bias_f: Any = TBD, bias_i: Any = TBD, bias_c: Any = TBD, bias_o: Any = TBD, bias_out: Any = TBD, *,
        name: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(name=name)
        self._declare_keys(
            "input", "prev_hidden", "prev_cell", *self.shared_keys, "hidden", "cell", "hidden_compl", "output"
        )
        x, prev = IOKey("input"), IOKey("prev_hidden")
        both = op(self, "concat", x, _leading_rows(self, prev, x), axis=-1, n=2)
        gates = [op(self, "linear", both, param(f"w_{g}"), param(f"bias_{g}")) for g in "ifco"]
        hidden, cell = sequence.lstm_update(self, gates, _leading_rows(self, IOKey("prev_cell"), x))
        self.expose(hidden, "hidden", canonical=False)
        self.expose(cell, "cell", canonical=False)
        self.expose(_rows_after(self, prev, x), "hidden_compl", canonical=False)
        self.expose(op(self, "linear", hidden, param("w_out"), param("bias_out")), "output")
        shapes: dict[str, list[Any]] = {
            "input": ["N", 1, "d_in"], "prev_hidden": ["M", 1, "d_hid"], "prev_cell": ["K", 1, "d_hid"],
            "w_out": ["d_out", "d_hid"], "bias_out": ["d_out"], "hidden": ["N", 1, "d_hid"],
            "cell": ["N", 1, "d_hid"], "hidden_compl": [None, 1, "d_hid"], "output": ["N", 1, "d_out"],
        }  # fmt: skip
        shapes |= {f"w_{g}": ["d_hid", "d_sum"] for g in "ifco"} | {f"bias_{g}": ["d_hid"] for g in "ifco"}
        given = {
            "input": input, "w_i": w_i, "w_f": w_f, "w_c": w_c, "w_o": w_o, "w_out": w_out, "bias_f": bias_f,
            "bias_i": bias_i, "bias_c": bias_c, "bias_o": bias_o, "bias_out": bias_out,
        }  # fmt: skip
        self._finish(shapes, given)


# -- recurrent models -----------------------------------------------------------------------------------------
def _template_cell(owner: str, cell_type: Any) -> Cell:
    """The cell the model copies for each step: ``cell_type`` itself (never added; copies are) or, for a
    class, an instance of it."""
    if isinstance(cell_type, type) and issubclass(cell_type, Cell):
        cell_type = cell_type()
    if not isinstance(cell_type, Cell):
        raise ArgumentError(
            f"{owner}: cell_type must be a recurrent cell such as RNNCell() or LSTMCell(), got {cell_type!r}"
        )
    return cell_type


class _Recurrent(_Renamed):
    """Unrolling helpers: one fresh copy of the cell per step, its parameters shared by name.
    ``_tied_states``: the initial states (``initial_hidden``, ``initial_cell``) have one batch size, as
    Mithril's cells require (so one of them gives the other's shape); the inference models leave them apart
    (Mithril's scripts give ``initial_cell`` with the training batch there)."""

    _tied_states: ClassVar[bool] = True

    def _tie_states(self, cell: Cell) -> None:
        if self._tied_states and len(cell.state_keys) > 1:
            self.set_shapes({f"initial_{key}": ["batch", 1, None] for key in cell.state_keys})

    def _step(self, cell: Cell, x: Any, state: dict[str, Any], output: str) -> tuple[Cell, dict[str, Any]]:
        """Add a copy of ``cell`` reading ``x`` from ``state`` (``{state key: connection or key name}``) whose
        output is named ``output``; returns the copy and its new state."""
        step = cell.fresh()
        shared = {key: key for key in cell.shared_keys}
        previous = {f"prev_{key}": value for key, value in state.items()}
        model: Model = self  # (``Model.__ior__`` returns a ``Model``)
        model |= step(input=x, **shared, **previous, **{cell.out_key: output})
        return step, {key: getattr(step, key) for key in cell.state_keys}


class _Unrolled(_Recurrent):
    """A cell unrolled over ``max_sequence_length`` steps: ``_cell`` (the template, see
    :func:`_template_cell`) and ``_length``, both checked in ``owner``'s name."""

    def __init__(self, owner: str, cell_type: Any, max_sequence_length: Any, *, name: str | None) -> None:
        super().__init__(name=name)
        self._cell = _template_cell(owner, cell_type)
        self._length = validation.positive_int(owner, "max_sequence_length", max_sequence_length)

    def _initial_state(self) -> dict[str, Any]:
        """The first step's state: the inputs ``initial_<state key>``."""
        return {key: f"initial_{key}" for key in self._cell.state_keys}

    def _generate(self, next_input: Callable[[Cell, int], Any], targets: list[str], **given: Any) -> None:
        """Unroll from the input ``input``: step ``t`` writes ``output<t>``, and ``next_input(step, t)`` is
        step ``t + 1``'s input (``targets``: the other inputs it reads); ``given``: the keys' values."""
        cell, length = self._cell, self._length
        self._declare_keys("input", *(f"initial_{s}" for s in cell.state_keys), *targets, *cell.shared_keys)
        state = self._initial_state()
        x: Any = "input"
        for t in range(length):
            step, state = self._step(cell, x, state, f"output{t}")
            if t + 1 < length:
                x = next_input(step, t)
        self._tie_states(cell)
        set_given(self, **given)
        self._cin = self._keys["input"]
        self._cout = self._keys[f"output{length - 1}"]


class ManyToOne(_Unrolled):
    """Read ``max_sequence_length`` time slots ``input0``, ``input1``... (``input<t>`` ``[N_t, 1, d_in]``,
    ``N_t`` the number of sequences longer than ``t``) from ``initial_hidden`` (and ``initial_cell`` for an
    LSTM, with the same batch size); ``output<t>`` is each step's output projection. ``hidden_concat`` holds the
    last hidden state of every sequence (``N_0`` rows) in Mithril's order: the rows steps 1 to
    ``max_sequence_length - 2`` passed on (their ``hidden_compl``: the sequences of length 1, 2, ...), then the
    last step's hidden state and its ``hidden_compl``. Keyword arguments give keys values
    (``initial_hidden=array``). ``ManyToOne(cell, hidden_size, length)`` builds ``TorchManyToOne``
    (deprecated).

    >>> ManyToOne(RNNCell(), 3).output_keys
    ['output0', 'output1', 'output2', 'hidden_concat']
    """

    _twin = "TorchManyToOne"
    _twin_call = "(cell_type, hidden_size, length)"
    _int_at = 2

    def __init__(
        self, cell_type: Cell | type[Cell], max_sequence_length: int, hidden_concat: Any = TBD, *,
        name: str | None = None, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__("ManyToOne", cell_type, max_sequence_length, name=name)
        cell, length = self._cell, self._length
        if hidden_concat is not TBD:
            raise ArgumentError("ManyToOne: hidden_concat is the model's output; it takes no value")
        self._declare_keys(
            *(f"input{t}" for t in range(length)), *(f"initial_{s}" for s in cell.state_keys), *cell.shared_keys
        )
        state = self._initial_state()
        passed_on: list[Any] = []
        for t in range(length):
            step, state = self._step(cell, f"input{t}", state, f"output{t}")
            if 0 < t < length - 1:
                passed_on.append(step.hidden_compl)
        pieces = [*passed_on, step.hidden, step.hidden_compl]
        self.expose(op(self, "concat", *pieces, axis=0, n=len(pieces)), "hidden_concat")
        first = "input0" if length > 1 else "initial_hidden"  # one row per sequence: as many as it has
        self.set_shapes({first: ["sequences", 1, None], "hidden_concat": ["sequences", 1, None]})
        self._tie_states(cell)
        set_given(self, **kwargs)
        self._cin = self._keys["input0"]


class OneToMany(_Unrolled):
    """Generate ``max_sequence_length`` outputs ``output0``... from ``input`` ``[N, 1, d_in]`` and
    ``initial_hidden`` (and ``initial_cell``): step ``t >= 1`` reads the previous output, or with
    ``teacher_forcing`` ``target<t-1>``, cut to the rows of ``target<t>`` (the sequences longer than ``t``; its
    values are not read without teacher forcing, when the output projection's size must be the input's).
    Keyword arguments give keys values. ``OneToMany(cell, hidden_size, length)`` builds ``TorchOneToMany``
    (deprecated).

    >>> OneToMany(RNNCell(), 3).input_keys[:4]
    ['input', 'initial_hidden', 'target1', 'target2']
    >>> OneToMany(RNNCell(), 3, teacher_forcing=True).input_keys[:4]
    ['input', 'initial_hidden', 'target0', 'target1']
    """

    _twin = "TorchOneToMany"
    _twin_call = "(cell_type, hidden_size, length)"
    _int_at = 2

    def __init__(
        self, cell_type: Cell | type[Cell], max_sequence_length: int, teacher_forcing: bool = False,
        input: Any = TBD, *, name: str | None = None, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__("OneToMany", cell_type, max_sequence_length, name=name)
        forcing = validation.boolean("OneToMany", "teacher_forcing", teacher_forcing)

        def next_input(step: Cell, t: int) -> Any:  # this output (or target<t>), cut to target<t+1>'s rows
            source = IOKey(f"target{t}") if forcing else getattr(step, self._cell.out_key)
            return _leading_rows(self, source, IOKey(f"target{t + 1}"))

        targets = range(0 if forcing else 1, self._length)
        self._generate(next_input, [f"target{t}" for t in targets], input=input, **kwargs)


class OneToManyInference(_Unrolled):
    """``OneToMany``'s generation: every output is the next step's input, uncut, ``max_sequence_length``
    times (outputs ``output0``...), with ``OneToMany``'s parameters. The initial states may have different
    batch sizes (each cell reads the rows it needs).

    >>> OneToManyInference(LSTMCell(), 2).output_keys
    ['output0', 'output1']
    """

    _tied_states = False

    def __init__(
        self, cell_type: Cell | type[Cell], max_sequence_length: int, input: Any = TBD, *,
        name: str | None = None, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__("OneToManyInference", cell_type, max_sequence_length, name=name)
        self._generate(lambda step, t: getattr(step, self._cell.out_key), [], input=input, **kwargs)


class _InferenceEncoder(ManyToOne):
    """``ManyToOne`` with initial states of any batch sizes (``EncoderDecoderInference``'s encoder)."""

    _tied_states = False


def _size_encoder_projection(model: Model, cell: Cell) -> None:
    """The encoder's output projection (``w_ho``/``w_out``) feeds nothing an encoder-decoder returns (only the
    encoder's final states do), so no output gives its size: it is taken to be the encoder's input size, which
    lets ``randomize_params`` draw it (Mithril leaves such inputs out of the compiled model instead)."""
    if cell.projection_key is not None:
        model.set_shapes({"input0": [None, 1, "features"], cell.projection_key: ["features", None]})


def _lengths(owner: str, inputs: int, targets: int) -> tuple[int, int]:
    """An encoder-decoder's ``max_input_sequence_length`` and ``max_target_sequence_length``, checked."""
    return (
        validation.positive_int(owner, "max_input_sequence_length", inputs),
        validation.positive_int(owner, "max_target_sequence_length", targets),
    )


def _decoder_keys(decoder: Model) -> dict[str, str]:
    """The decoder's keys in an encoder-decoder: ``decoder_<key>``, but targets and outputs keep their names
    and ``initial_hidden`` (the encoder's state) is left out."""
    renamed = {
        key: key if "target" in key else f"decoder_{key}" for key in decoder.input_keys if key != "initial_hidden"
    }
    return renamed | {key: key for key in decoder.output_keys}


class EncoderDecoder(_Recurrent):
    """Sequence to sequence with time slots: a ``ManyToOne`` encoder (keys ``input0``..., ``initial_hidden``,
    the cell's parameters under their names) whose ``hidden_concat``, permuted by ``indices``
    (``hidden_concat[indices]``: the encoder's rows in the decoder's order, see
    :func:`~mithril.utils.utils.pack_data_into_time_slots`), starts a ``OneToMany`` decoder (keys
    ``decoder_input``, ``decoder_initial_cell``, ``decoder_w_ih``...; ``target<t>`` as in ``OneToMany``);
    outputs ``output0``... are the decoder's. ``EncoderDecoder(cell, hidden_size, length, decoder_length)``
    builds ``TorchEncoderDecoder`` (deprecated).

    >>> model = EncoderDecoder(RNNCell(), 2, 2, teacher_forcing=True)
    >>> "indices" in model.input_keys, "decoder_w_ih" in model.input_keys, model.output_keys
    (True, True, ['output0', 'output1'])
    """

    _twin = "TorchEncoderDecoder"
    _twin_call = "(cell_type, hidden_size, length, decoder_length)"
    _int_at = 3

    def __init__(
        self, cell_type: Cell | type[Cell], max_input_sequence_length: int, max_target_sequence_length: int,
        teacher_forcing: bool = False, indices: Any = TBD, *, name: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(name=name)
        cell = _template_cell("EncoderDecoder", cell_type)
        inputs, targets = _lengths("EncoderDecoder", max_input_sequence_length, max_target_sequence_length)
        teacher_forcing = validation.boolean("EncoderDecoder", "teacher_forcing", teacher_forcing)
        encoder = ManyToOne(cell, inputs, name="encoder")
        decoder = OneToMany(cell, targets, teacher_forcing, name="decoder")
        model: Model = self  # (``Model.__ior__`` returns a ``Model``)
        model |= encoder(**{key: key for key in encoder.input_keys})
        start = _pick_rows(self, encoder.hidden_concat, IOKey("indices", type="int"))
        model |= decoder(initial_hidden=start, **_decoder_keys(decoder))
        _size_encoder_projection(self, cell)
        set_given(self, indices=indices)
        self._cin = self._keys["input0"]
        self._cout = self._keys[f"output{targets - 1}"]


class EncoderDecoderInference(_Recurrent):
    """``EncoderDecoder``'s generation: the ``ManyToOne`` encoder's ``hidden_concat`` starts a
    ``OneToManyInference`` decoder (keys ``decoder_input``..., the same parameters as ``EncoderDecoder``'s, so
    a model trained with teacher forcing generates with its weights); no ``indices``.
    ``EncoderDecoderInference(cell, hidden_size, length, decoder_length)`` builds
    ``TorchEncoderDecoderInference`` (deprecated).

    >>> EncoderDecoderInference(LSTMCell(), 2, 3).output_keys
    ['output0', 'output1', 'output2']
    """

    _twin = "TorchEncoderDecoderInference"
    _twin_call = "(cell_type, hidden_size, length, decoder_length)"
    _int_at = 3

    def __init__(
        self, cell_type: Cell | type[Cell], max_input_sequence_length: int, max_target_sequence_length: int, *,
        name: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(name=name)
        cell = _template_cell("EncoderDecoderInference", cell_type)
        inputs, targets = _lengths("EncoderDecoderInference", max_input_sequence_length, max_target_sequence_length)
        encoder = _InferenceEncoder(cell, inputs, name="encoder")
        decoder = OneToManyInference(cell, targets, name="decoder")
        model: Model = self  # (``Model.__ior__`` returns a ``Model``)
        model |= encoder(**{key: key for key in encoder.input_keys})
        model |= decoder(initial_hidden=encoder.hidden_concat, **_decoder_keys(decoder))
        _size_encoder_projection(self, cell)
        self._cin = self._keys["input0"]
        self._cout = self._keys[f"output{targets - 1}"]
