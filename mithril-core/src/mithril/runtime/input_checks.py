"""Input validation of a compiled model's calls: every check ``evaluate``, ``train_step``, ``init_state`` and the
parameter files run before the backend sees an input.

Keys (missing, unknown, in the wrong dict), types, dtypes and shapes of ``params`` and ``data``; dims shared by
several inputs (``N`` of data and labels); the index ranges of integer data (:mod:`mithril.compiler.index_checks`);
the keys, shapes and values of ``output_gradients``. Run-time data given as NumPy arrays, lists or other-precision
arrays is converted; nothing else is. Every refusal names the key, what was expected and what was given.

The fast path (:meth:`InputChecks.direct_entry`): an entry point that checks its own inputs
(:mod:`mithril.backends.direct`) takes ``evaluate``'s calls directly only where its checks are all the checks
below would run (static shapes, no index checks, no buffers, no shared symbolic dims); anything it does not
accept falls back to these checks, which convert the input or name the problem.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Linear
    >>> pm = ml.compile(Linear(2), ml.NumpyBackend(), shapes={"input": [1, 3]}, jit=False)
    >>> pm.evaluate(pm.randomize_params(), {"input": [[1.0, 2.0]]})
    Traceback (most recent call last):
    ...
    mithril.errors.ShapeError: evaluate(data): 'input' has shape (1, 2), expected (1, 3)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..compiler.graph import Value
from ..compiler.index_checks import check_indices
from ..errors import ArgumentError, DtypeError, ModelKeyError, ShapeError
from ..lazy_numpy import np
from .records import ProgramSignature

__all__ = ["InputCheck", "InputChecks"]

Forward = Callable[[Mapping[str, Any], Mapping[str, Any]], Mapping[str, Any]]


class InputCheck(NamedTuple):
    """What one input is compiled for (the common case costs a few comparisons per call)."""

    name: str
    is_state: bool
    """Passed in ``params`` (a parameter or a buffer) rather than in ``data``."""
    static: tuple[int, ...] | None
    """Its shape when fully known at compile time."""
    pattern: tuple[int | None, ...] | None
    """Its shape with ``None`` for a size known only at run time; ``None`` for an unknown rank."""
    dtype: Any
    """The backend's native dtype for it."""
    kind: str
    """``"float"``, ``"int"`` or ``"bool"``."""


class InputChecks:
    """The checks of one compiled model's inputs, prepared once at compile time from its signature."""

    def __init__(self, backend: Any, signature: ProgramSignature) -> None:
        self.backend = backend
        self.param_keys = frozenset(signature.params)
        self.buffer_keys = frozenset(signature.buffers)
        self.state_keys = self.param_keys | self.buffer_keys  # what evaluate's ``params`` holds
        self.data_keys = frozenset(signature.data)
        self.discarded_keys = frozenset(signature.discarded_keys)
        self.outputs = dict(signature.outputs)
        self.differentiable_outputs = list(signature.differentiable_outputs)
        self.index_checks = list(signature.index_checks)
        inputs = signature.inputs()
        self.per_input = [_input_check(backend, name, name in self.state_keys, v) for name, v in inputs.items()]
        # symbolic dims shared by several inputs (``N`` of data and labels) are checked for agreement
        self.shared_dims = _shared_symbolic_dims(inputs)
        # output axis -> an input axis of the same run-time size, to check cotangents whose shape is symbolic
        self.output_dims = _output_symbolic_dims(inputs, signature.outputs)
        # cotangents with an axis that follows no input: checked against the outputs the gradient pass computes
        self.unchecked_outputs = frozenset(
            key
            for key in self.differentiable_outputs
            if (pattern := self.outputs[key].shape.ints()) is None
            or any(size is None and (key, axis) not in self.output_dims for axis, size in enumerate(pattern))
        )

    # -- the fast path -----------------------------------------------------------------------------
    def direct_entry(self, evaluate: Any, *, allowed: bool) -> Callable[..., Any] | None:
        """``evaluate``'s strict form (``evaluate.strict``, :mod:`mithril.backends.direct`) when it may take the
        calls directly: ``allowed`` (no mixed-precision wrapper, no sharding) and its own checks are all there
        is to check (static shapes, no index checks, no buffers, no shared symbolic dims); else ``None``."""
        strict = getattr(evaluate, "strict", None) if allowed else None
        covered = not self.index_checks and not self.buffer_keys and not self.shared_dims
        return strict if covered and all(check.static is not None for check in self.per_input) else None

    @property
    def direct_sizes(self) -> tuple[int, int]:
        """How many entries ``params`` and ``data`` have in a call the fast path may take."""
        return len(self.state_keys), len(self.data_keys)

    # -- a call's arguments -----------------------------------------------------------------------
    def evaluate_inputs(self, params: Any, data: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """``evaluate``'s ``params`` and ``data`` checked: dicts with exactly the model's keys (inputs that
        ``discard_keys`` removed are ignored), then :meth:`checked_inputs`. Returns them, data converted."""
        params = {} if params is None else params
        data = {} if data is None else data
        if not isinstance(params, Mapping) or not isinstance(data, Mapping):
            wrong, value = ("params", params) if not isinstance(params, Mapping) else ("data", data)
            raise ArgumentError(
                f"evaluate({wrong}=...): expected a dict of name -> array, got {type(value).__name__}; "
                f"e.g. pm.evaluate(params, {{{', '.join(repr(k) for k in sorted(self.data_keys)) or ''}: ...}})"
            )
        if self.discarded_keys:  # inputs discard_keys removed: ignored when given
            params = {k: v for k, v in params.items() if k not in self.discarded_keys}
            data = {k: v for k, v in data.items() if k not in self.discarded_keys}
        if params.keys() != self.state_keys:
            self.check_group(params, self.state_keys, "params")
        if data.keys() != self.data_keys:
            self.check_group(data, self.data_keys, "data")
        return params, self.checked_inputs(params, data)

    def checked_inputs(
        self, params: Mapping[str, Any], data: Mapping[str, Any], where: str = "evaluate"
    ) -> Mapping[str, Any]:
        """Index ranges, then every input's dtype and shape; returns ``data`` converted where needed."""
        if self.index_checks:  # on the data as given: a narrower integer type (int32) would wrap bad indices
            check_indices(self.index_checks, {**params, **data}, self.backend.to_numpy, self.backend.is_array)
        return self.check_arrays(params, data, where=where)

    def check_group(
        self, given: Mapping[str, Any], expected: frozenset[str], label: str, where: str = "evaluate"
    ) -> None:
        """``given`` has exactly the keys ``expected`` (``label``: ``"params"`` or ``"data"``)."""
        missing = sorted(expected - set(given))
        unknown = sorted(set(given) - expected)
        parts = []
        if missing:
            parts.append(f"missing {missing}")
        if unknown:
            other = self.data_keys if label == "params" else self.state_keys
            hint = [k for k in unknown if k in other]
            belong = "data" if label == "params" else "params"
            parts.append(f"unknown {unknown}" + (f" ({hint} belong in {belong})" if hint else ""))
        if parts:
            raise ModelKeyError(f"{where}({label}=...): {'; '.join(parts)}; expected exactly {sorted(expected)}")

    def check_arrays(
        self, params: Mapping[str, Any], data: Mapping[str, Any], params_only: bool = False, where: str = "evaluate"
    ) -> Mapping[str, Any]:
        """Check every input's type, dtype and shape (the common case is a few comparisons per input);
        convert runtime data given as NumPy arrays/lists. Returns ``data``, converted where needed."""
        is_array = self.backend.is_array
        converted: dict[str, Any] | None = None
        for name, is_state, static, pattern, dtype, kind in self.per_input:
            if params_only and not is_state:
                continue
            value = params[name] if is_state else data[name]
            if is_array(value) and value.dtype == dtype:
                if static is not None and tuple(value.shape) == static:
                    continue
            elif is_state:
                self._refuse_state(name, value, dtype, where)
            else:
                converted = dict(data) if converted is None else converted
                converted[name] = value = self.convert_data(name, value, kind)
            check_shape(name, "params" if is_state else "data", pattern, value, where)
        if self.shared_dims:
            self.check_shared_dims(params, data if converted is None else converted)
        return data if converted is None else converted

    def _refuse_state(self, name: str, value: Any, dtype: Any, where: str) -> None:
        """Parameters are never converted: a non-array or another dtype is refused."""
        if not self.backend.is_array(value):
            raise DtypeError(
                f"{where}(params): {name!r} is a {type(value).__name__}; expected a {type(self.backend).__name__} "
                f"array of dtype {dtype}: convert it with backend.array(...)"
            )
        raise DtypeError(
            f"{where}(params): {name!r} has dtype {value.dtype}, expected {dtype} (the model computes in {dtype})"
        )

    def check_shared_dims(self, params: Mapping[str, Any], data: Mapping[str, Any]) -> None:
        """Input axes that are one symbolic dim have one size in this call."""
        for positions in self.shared_dims:
            seen: tuple[str, int, int] | None = None
            for name, axis in positions:
                value = params.get(name, data.get(name))
                if value is None:
                    continue
                size = int(value.shape[axis])
                if seen is None:
                    seen = (name, axis, size)
                elif size != seen[2]:
                    raise ShapeError(
                        f"evaluate: {name!r} axis {axis} has size {size} but {seen[0]!r} axis {seen[1]} has size "
                        f"{seen[2]}; the model requires them to be equal (one symbolic dimension)"
                    )

    def convert_data(self, name: str, value: Any, kind: str, label: str = "data") -> Any:
        """Runtime data (and cotangents) may come as NumPy arrays, lists or other-precision arrays; they are
        converted to the model's dtype. Floats are never silently truncated into integer or bool inputs."""
        backend = self.backend
        try:
            array = np.asarray(backend.to_numpy(value) if backend.is_array(value) else value)
        except (ValueError, TypeError) as exc:  # ragged nested lists, objects NumPy cannot convert
            raise DtypeError(
                f"evaluate({label}): {name!r} ({type(value).__name__}) is not an array of numbers ({kind}): {exc}"
            ) from None
        if array.dtype.kind not in "biuf":
            raise DtypeError(
                f"evaluate({label}): {name!r} is {type(value).__name__} of dtype {array.dtype}; "
                f"expected numbers ({kind})"
            )
        if array.dtype.kind == "f" and kind != "float":
            raise DtypeError(f"evaluate({label}): {name!r} has float values, but the model expects {kind} values")
        try:
            return backend.array(array, kind)
        except (DtypeError, ShapeError, ArgumentError) as exc:  # values the backend cannot hold (GGML: > int32)
            raise type(exc)(f"evaluate({label}): {name!r}: {exc}") from None

    # -- output_gradients -------------------------------------------------------------------------
    def cotangents(
        self, output_gradients: Any, params: Mapping[str, Any], data: Mapping[str, Any], forward: Forward
    ) -> tuple[dict[str, Any], list[str]]:
        """Cotangents for every differentiable output (zeros for those not given), checked and converted to
        the model's float dtype, and the keys the caller gave. ``forward`` computes the outputs when the size
        of one left out is known only once computed."""
        outputs = self.differentiable_outputs
        given = self._given_cotangents(output_gradients)
        keys = list(given)
        float_dtype = self.backend.native_dtype("float")
        computed: Mapping[str, Any] | None = None
        for key in outputs:
            if key not in given:  # no cotangent: no gradient flows from this output (as in Mithril)
                shape = self.runtime_shape(key, params, data)
                if shape is None:  # its size is known only once computed: run the forward pass for it
                    computed = forward(params, data) if computed is None else computed
                    shape = tuple(computed[key].shape)
                given[key] = self.backend.zeros(*shape)
            else:
                value = given[key]
                if not (self.backend.is_array(value) and value.dtype == float_dtype):
                    given[key] = value = self.convert_data(key, value, "float", "output_gradients")
                check_shape(key, "output_gradients", self.outputs[key].shape.ints(), value)
        self.check_cotangent_dims(given, params, data)
        return given, keys

    def _given_cotangents(self, output_gradients: Any) -> dict[str, Any]:
        """``output_gradients`` as a dict of the caller's cotangents (``True``: one for the scalar output)."""
        outputs = self.differentiable_outputs
        if output_gradients is True:
            scalar = [k for k in outputs if self.outputs[k].shape.ints() == ()]
            if "final_cost" in scalar:  # a TrainModel: its cost, not its scalar metrics
                scalar = ["final_cost"]
            if len(scalar) != 1:
                raise ModelKeyError(
                    f"output_gradients=True needs exactly one scalar output; the float outputs are {outputs} with "
                    f"shapes {[self.outputs[k].shape for k in outputs]}. Pass a dict of cotangents instead."
                )
            return {scalar[0]: self.backend.array(1.0)}
        if not isinstance(output_gradients, Mapping):
            raise ArgumentError(
                f"evaluate(output_gradients=...): expected a dict of output name -> cotangent array (or True for a "
                f"single scalar output), got {output_gradients!r} ({type(output_gradients).__name__}); "
                f"differentiable outputs: {outputs}"
            )
        given = dict(output_gradients)
        if not given:
            raise ModelKeyError(
                f"output_gradients is empty, which would give all-zero gradients; give cotangents for the "
                f"differentiable outputs {outputs} (or True for a single scalar output)"
            )
        unknown = [k for k in given if k not in self.outputs or k not in outputs]
        if unknown:
            raise ModelKeyError(
                f"evaluate(output_gradients): {'; '.join(self._describe_non_output(k) for k in unknown)}; "
                f"the differentiable outputs are {outputs}"
            )
        return given

    def _describe_non_output(self, key: Any) -> str:
        if key in self.outputs:
            return f"{key!r} is an output of kind {self.outputs[key].kind}, which has no gradient"
        if key in self.state_keys or key in self.data_keys:
            return f"{key!r} is an input, not an output"
        return f"{key!r} is not a key of the model"

    def runtime_shape(self, key: str, params: Mapping[str, Any], data: Mapping[str, Any]) -> tuple[int, ...] | None:
        """The shape output ``key`` has in this call, when every axis is static or follows an input axis."""
        pattern = self.outputs[key].shape.ints()
        if pattern is None:
            return None
        shape = []
        for axis, size in enumerate(pattern):
            if size is None:
                source = self.output_dims.get((key, axis))
                value = None if source is None else params.get(source[0], data.get(source[0]))
                if source is None or value is None:
                    return None
                size = int(value.shape[source[1]])
            shape.append(size)
        return tuple(shape)

    def check_cotangent_dims(
        self, cotangents: Mapping[str, Any], params: Mapping[str, Any], data: Mapping[str, Any]
    ) -> None:
        """Cotangent axes that are symbolic at compile time must match the inputs they follow (``N``, ``T``)."""
        for (key, axis), (name, in_axis) in self.output_dims.items():
            given = cotangents.get(key)
            source = params.get(name, data.get(name))
            if given is None or source is None:
                continue
            if int(given.shape[axis]) != int(source.shape[in_axis]):
                raise ShapeError(
                    f"evaluate(output_gradients): {key!r} axis {axis} has size {int(given.shape[axis])}, but the "
                    f"output's axis {axis} follows {name!r} axis {in_axis}, of size {int(source.shape[in_axis])} "
                    "in this call"
                )

    def check_cotangents_fit(self, keys: list[str], cotangents: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        """The cotangents of ``keys`` (axes that follow no input) have the shapes ``outputs`` have in this call."""
        for key in keys:
            expected, given = tuple(outputs[key].shape), tuple(cotangents[key].shape)
            if expected != given:
                raise ShapeError(
                    f"evaluate(output_gradients): {key!r} has shape {given}, but the output {key!r} has shape "
                    f"{expected} in this call"
                )


def _input_check(backend: Any, name: str, is_state: bool, value: Value) -> InputCheck:
    kind = value.kind or "float"
    return InputCheck(name, is_state, value.shape.static(), value.shape.ints(), backend.native_dtype(kind), kind)


def check_shape(
    name: str, label: str, expected: tuple[int | None, ...] | None, value: Any, where: str = "evaluate"
) -> None:
    """``value``'s shape fits ``expected`` (``None`` for a size known only at run time; ``None``: any shape)."""
    if expected is None:
        return
    shape = tuple(value.shape)
    if len(shape) != len(expected) or any(e is not None and e != s for e, s in zip(expected, shape, strict=True)):
        shown = tuple("?" if e is None else e for e in expected)
        raise ShapeError(f"{where}({label}): {name!r} has shape {shape}, expected {shown}")


def _shared_symbolic_dims(values: Mapping[str, Value]) -> list[list[tuple[str, int]]]:
    """Groups of (input, axis) that are one unknown dim, for inputs whose shapes are not fully static."""
    groups: dict[int, list[tuple[str, int]]] = {}
    for name, value in values.items():
        dims = value.shape.dims()
        if dims is None:
            continue
        for axis, dim in enumerate(dims):
            if dim.value is None:
                groups.setdefault(id(dim.find()), []).append((name, axis))
    return [positions for positions in groups.values() if len(positions) > 1]


def _output_symbolic_dims(
    inputs: Mapping[str, Value], outputs: Mapping[str, Value]
) -> dict[tuple[str, int], tuple[str, int]]:
    """(output, axis) -> (input, axis) for output axes of unknown size that are one dim with an input axis."""
    by_dim: dict[int, tuple[str, int]] = {}
    for name, value in inputs.items():
        for axis, dim in enumerate(value.shape.dims() or ()):
            if dim.value is None:
                by_dim.setdefault(id(dim.find()), (name, axis))
    result = {}
    for key, value in outputs.items():
        for axis, dim in enumerate(value.shape.dims() or ()):
            if dim.value is None and id(dim.find()) in by_dim:
                result[(key, axis)] = by_dim[id(dim.find())]
    return result
