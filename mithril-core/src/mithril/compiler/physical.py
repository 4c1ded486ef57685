"""``PhysicalModel``: a compiled model that evaluates outputs and gradients on one backend.

Example:
    >>> pm = ml.compile(model, ml.NumpyBackend(), shapes={"input": [32, 784]})   # doctest: +SKIP
    >>> params = pm.randomize_params(seed=0)                                       # doctest: +SKIP
    >>> outputs = pm.evaluate(params, {"input": x})                                # doctest: +SKIP
    >>> outputs, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
import warnings
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import initializers, validation
from ..backends.direct import InputsNeedChecking
from ..display.mixin import Displayable
from ..errors import ArgumentError, CheckpointError, DtypeError, MithrilError, ModelKeyError, ShapeError
from ..optim.state import TrainState
from ..progress import task
from ..serialization.files import check_output_directory, write_file_atomically
from ..serialization.names import match_separators
from ..serialization.safetensors import SafetensorsFile, save_safetensors
from .graph import Value
from .index_checks import IndexCheck, check_indices
from .training import TrainingProgram, not_compiled_for_training
from .verbose import log_verbose

__all__ = ["PhysicalModel"]


class PhysicalModel(Displayable):
    """The result of ``ml.compile``. See the module docstring for the calling convention."""

    def __init__(
        self,
        *,
        backend: Any,
        program: Any,
        params: Mapping[str, Value],
        data: Mapping[str, Value],
        outputs: Mapping[str, Value],
        buffers: Mapping[str, Value] | None = None,
        buffer_updates: Mapping[str, str] | None = None,
        paths: Mapping[str, str] | None = None,
        index_checks: list[IndexCheck] | None = None,
        differentiable_outputs: list[str],
        jit: bool,
        model: Any,
        inference: bool = False,
        fan_in: Mapping[str, int] | None = None,
        primitive_count: int,
        compile_seconds: float,
        file_path: str | None,
        plan: Any = None,
        jit_options: Mapping[str, Any] | None = None,
        verbose: bool = False,
        train: tuple[Any, tuple[int, ...]] | None = None,
        precision: tuple[str, Any] | None = None,
        discarded_keys: set[str] | None = None,
        input_groups: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.backend = backend
        self._input_groups = {name: tuple(members) for name, members in (input_groups or {}).items()}
        self.plan = plan  # mithril.parallel.ShardingPlan of ml.compile(parallelism=...), or None
        self.program = program
        self._param_values = dict(params)
        self._buffer_values = dict(buffers or {})
        self._data_values = dict(data)
        self._output_values = dict(outputs)
        self._discarded_keys = frozenset(discarded_keys or ())
        self._differentiable_outputs = differentiable_outputs
        self._param_keys = frozenset(params)
        self._buffer_keys = frozenset(self._buffer_values)
        self._state_keys = self._param_keys | self._buffer_keys  # what evaluate's ``params`` holds
        self._data_keys = frozenset(data)
        self._buffer_updates = dict(buffer_updates or {})
        self._paths = dict(paths or {})
        self._index_checks = list(index_checks or [])
        self.model = model
        self.primitive_count = primitive_count
        self.compile_seconds = compile_seconds
        self.file_path = file_path
        self._model_name = type(model).__name__
        filename = file_path or f"<mithril:{self._model_name}>"
        # a framework JIT gets this model's own ``evaluate``, not the shared compile-on-first-call trampoline
        functions = program.load(filename, eager=("evaluate",)) if jit and backend.supports_autograd else program.load(filename)
        self.precision = None if precision is None else precision[0]  # ml.compile(precision=...)
        if precision is not None:  # the forward computes in the low dtype; parameters stay float32
            functions = {**functions, "evaluate": backend.mixed_precision(functions["evaluate"], precision[1])}
        self.jit_options = dict(jit_options or {})
        self._verbose = verbose
        options = {"jit_options": self.jit_options} if self.jit_options else {}
        self._forward = backend.prepare_forward(functions["evaluate"], jit=jit, **options) if backend.supports_autograd else functions["evaluate"]
        if inference or not params:
            self._backward = None
        elif backend.supports_autograd:
            self._backward = backend.gradient_function(functions["evaluate"], jit=jit, **options)
        else:
            self._backward = functions.get("evaluate_gradients")
        self._training = None if train is None else TrainingProgram(
            self, train[0], train[1], functions, jit=jit, jit_options=self.jit_options, loss_scaling=self.precision == "fp16-mixed"
        )
        self._compiled = {"forward": self._forward, "gradients": self._backward}  # what lower()/lowered_text() read
        if backend.supports_autograd and jit:  # the framework compiles on the first call: say so when it is slow
            self._forward = self._announce_first_call("_forward", "forward")
            if self._backward is not None:
                self._backward = self._announce_first_call("_backward", "forward+backward")
        self._fan_in = dict(fan_in or {})
        self._params: dict[str, Any] | None = None
        self._prepare_input_checks(params, data, outputs, functions["evaluate"], direct=precision is None and plan is None)
        self._unchecked_outputs = frozenset(
            key
            for key in differentiable_outputs
            if (pattern := outputs[key].shape.ints()) is None
            or any(size is None and (key, axis) not in self._output_dims for axis, size in enumerate(pattern))
        )

    def _prepare_input_checks(
        self, params: Mapping[str, Value], data: Mapping[str, Value], outputs: Mapping[str, Value], evaluate: Any, *, direct: bool
    ) -> None:
        """What each call checks: every input's static shape, dims shared between inputs, the output axes that
        follow an input axis, and whether the entry point can take the calls directly."""
        # per input: (name, is_state, static shape or None, shape pattern, native dtype, kind); state
        # (parameters and buffers) comes in ``params``, runtime data in ``data``
        self._checks = [
            (name, label == "params", v.shape.static(), v.shape.ints(), self.backend.native_dtype(v.kind or "float"), v.kind or "float")
            for label, group in (("params", params), ("params", self._buffer_values), ("data", data))
            for name, v in group.items()
        ]
        # symbolic dims shared by several inputs (``N`` of data and labels) are checked for agreement
        inputs = {**params, **self._buffer_values, **data}
        self._shared_dims = _shared_symbolic_dims(inputs)
        # output axis -> an input axis of the same run-time size, to check cotangents whose shape is symbolic
        self._output_dims = _output_symbolic_dims(inputs, outputs)
        # an entry point that checks its own inputs takes evaluate's calls directly where its checks are all
        # there is to check (mithril.backends.direct); anything unexpected falls back to the checks below
        strict = getattr(evaluate, "strict", None) if direct else None  # under mixed precision the wrapper is the entry
        direct = direct and not self._index_checks and not self._buffer_keys and not self._shared_dims
        self._direct_forward = strict if direct and all(check[2] is not None for check in self._checks) else None
        self._direct_sizes = (len(self._state_keys), len(self._data_keys))

    def _announce_first_call(self, attribute: str, what: str) -> Callable[..., Any]:
        """Wrap ``self.<attribute>`` so its first call (where JAX/PyTorch/MLX trace and compile) runs as a
        :func:`mithril.progress.task`; the wrapper then puts the plain function back (no per-call cost)."""
        fn = getattr(self, attribute)
        description = f"{type(self.backend).__name__}: compiling {self._model_name} {what} (first call)"

        def first_call(*args: Any) -> Any:
            started = time.perf_counter()
            with task(description):
                result = fn(*args)
            setattr(self, attribute, fn)
            if self._verbose:
                log_verbose(f"{description}: jit {time.perf_counter() - started:.4f} s (trace + compile + run)")
            return result

        return first_call

    def lower(self, params: Mapping[str, Any], data: Mapping[str, Any], output_gradients: Mapping[str, Any] | None = None) -> Any:
        """The JIT's lowered program for these arguments (JAX: a ``jax.stages.Lowered``; ``.as_text()`` is
        the StableHLO, ``.compile()`` the XLA executable). With ``output_gradients`` it is the
        forward+backward program. Backends whose JIT has no lowering stage refuse it.
        """
        which = "forward" if output_gradients is None else "gradients"
        fn = self._compiled[which]
        lower = getattr(fn, "lower", None)
        if lower is None:
            raise MithrilError(
                f"PhysicalModel.lower: the {which} function of this model on {type(self.backend).__name__} has no lowered form (JAX with jit gives one: ml.compile(..., backend=ml.JaxBackend(), jit=True))"
            )
        args = (params, data) if output_gradients is None else (params, data, output_gradients)
        return lower(*args)

    def lowered_text(self, params: Mapping[str, Any] | None = None, data: Mapping[str, Any] | None = None) -> str:
        """The lowered (StableHLO) text of the forward: for ``params``/``data`` when given, else the one kept
        at the first evaluate by ``jit_options={"xla_computation": True}``."""
        if params is not None and data is not None:
            return str(self.lower(params, data).as_text())
        text = getattr(self._compiled["forward"], "lowered_text", None)
        if text is None:
            raise MithrilError(
                "PhysicalModel.lowered_text(): no text kept yet; compile with jit_options={'xla_computation': True} and evaluate once, or pass params and data"
            )
        return str(text)

    # -- introspection ---------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """The generated Python source."""
        source: str = self.program.source
        return source

    @property
    def input_keys(self) -> list[str]:
        return [*self._param_values, *self._buffer_values, *self._data_values]

    @property
    def param_keys(self) -> list[str]:
        """Trainable parameters (gradients are returned for these)."""
        return list(self._param_values)

    @property
    def buffer_keys(self) -> list[str]:
        """Non-trainable state (BatchNorm running statistics): passed in ``params``, never differentiated."""
        return list(self._buffer_values)

    @property
    def buffer_updates(self) -> dict[str, str]:
        """Buffer -> the output holding its next value (state updates, e.g. running statistics in training)."""
        return dict(self._buffer_updates)

    @property
    def input_paths(self) -> dict[str, str]:
        """Each input's logical path (``h_0.attn.c_attn.weight``), whatever ``use_short_namings`` chose
        for its name: the stable identity checkpoint loaders map names to."""
        return dict(self._paths)

    def update_buffers(self, params: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with every buffer replaced by its new value from ``outputs`` (see :attr:`buffer_updates`).

        >>> outputs, grads = pm.evaluate(params, data, output_gradients=True)   # doctest: +SKIP
        >>> params = pm.update_buffers(params, outputs)                          # doctest: +SKIP
        """
        missing = [out for out in self._buffer_updates.values() if out not in outputs]
        if missing:
            raise ModelKeyError(f"update_buffers: outputs {missing} are missing; pass the dict evaluate returned")
        return {**params, **{buffer: outputs[out] for buffer, out in self._buffer_updates.items()}}

    @property
    def data_keys(self) -> list[str]:
        return list(self._data_values)

    @property
    def output_keys(self) -> list[str]:
        return list(self._output_values)

    @property
    def discarded_keys(self) -> set[str]:
        """The keys ``ml.compile(discard_keys=...)`` removed (Mithril's ``discarded_keys``): the discarded outputs
        and the inputs that only fed them (these are no longer inputs; an input given for them is ignored).

        >>> import mithril as ml
        >>> from mithril.models import Linear
        >>> pm = ml.compile(Linear(2), ml.NumpyBackend(), discard_keys=["output"], inference=True, jit=False)
        >>> sorted(pm.discarded_keys) == ["bias", "input", "output", "weight"] and not pm.input_keys
        True
        """
        return set(self._discarded_keys)

    def get_shapes(self, model: Any = None, uni_keys: Any = None, var_keys: Any = None, symbolic: bool = False, verbose: bool = False) -> dict[str, Any]:
        """Shapes of the compiled model's inputs and outputs (Mithril's ``get_shapes``).

        ``symbolic=False``: each shape a list of ints with ``None`` for a size known only at run time (``None``
        for a key of unknown rank). ``symbolic=True``: ints and symbol names (``"d12"``), ``"..."`` for a
        variadic part. The other parameters are accepted for Mithril's signature and ignored.

        >>> import mithril as ml
        >>> from mithril.models import Linear
        >>> pm = ml.compile(Linear(3), ml.NumpyBackend(), shapes={"input": [None, 2]}, jit=False)
        >>> tuple(pm.get_shapes()["weight"])
        (3, 2)
        """
        if not isinstance(symbolic, bool):
            raise ArgumentError(f"get_shapes(symbolic=...): expected True or False, got {symbolic!r}")
        if not symbolic:
            return self.shapes
        from ..framework.tensor_types import describe_shape

        values = {**self._param_values, **self._buffer_values, **self._data_values, **self._output_values}
        return {k: describe_shape(v.shape) for k, v in values.items()}

    @property
    def shapes(self) -> dict[str, list[int | None] | None]:
        """Final shapes of inputs and outputs (``None`` for a dim known only at run time)."""
        values = {**self._param_values, **self._buffer_values, **self._data_values, **self._output_values}
        return {k: (list(s) if (s := v.shape.ints()) is not None else None) for k, v in values.items()}

    def export(
        self,
        directory: str | Path,
        params: Mapping[str, Any] | None = None,
        *,
        randomize: bool = False,
        seed: int | None = None,
        overwrite: bool = False,
    ) -> Any:
        """Write a standalone program for this model (backends that generate native code, e.g. C).

        ``params``: the parameters to write (e.g. the trained ones); required unless ``randomize=True``,
        which writes fresh random ones (as :meth:`randomize_params` with ``seed``, leaving this model's
        current parameters unchanged). A ``directory`` that already holds files is refused unless
        ``overwrite=True`` (then the exported files are replaced and other files kept).

        Returns what was written: a path-like result (``str(result)`` is the directory) whose ``files``,
        ``inputs``/``outputs`` (key -> file) and ``params`` (``"given"`` or ``"random (seed ...)"``) say
        what the directory now holds; ``result.summary()`` prints it.

        >>> result = pm.export("out", pm.get_parameters())     # doctest: +SKIP
        >>> print(result.summary())                              # doctest: +SKIP
        exported to out: model.c, model.h, model.weights, main.c, BUILD, input_input.bin, ...
        """
        where = f"pm.export({str(directory)!r})"
        exporter = getattr(self.program, "export", None)
        if exporter is None:
            from ..errors import UnsupportedPrimitiveError

            raise UnsupportedPrimitiveError(
                f"{type(self.backend).__name__} cannot export a standalone program; compile with ml.CBackend() to export C"
            )
        params = validation.mapping(where, "params", params, what="a dict of name -> array")
        randomize = validation.boolean(where, "randomize", randomize)
        overwrite = validation.boolean(where, "overwrite", overwrite)
        seed = validation.positive_int(where, "seed", seed, optional=True, minimum=0)
        if params is not None and randomize:
            raise ArgumentError(f"{where}: give either params=... or randomize=True, not both")
        if params is None and not randomize:
            raise ArgumentError(
                f"{where}: expected the parameters to write, got none. Pass params=... (e.g. your trained "
                "parameters, or pm.get_parameters()), or randomize=True to write random ones"
            )
        if seed is not None and not randomize:
            raise ArgumentError(f"{where}: seed={seed!r} is only used with randomize=True")
        directory = check_output_directory(directory, overwrite, where)
        if params is None:
            current = self._params
            try:
                params = self.randomize_params(seed)
            finally:
                self._params = current
            source = f"random (randomize_params(seed={seed!r}))"
        else:
            missing, unknown = sorted(self._state_keys - set(params)), sorted(set(params) - self._state_keys)
            if missing or unknown:
                parts = ([f"missing {missing}"] if missing else []) + ([f"unknown {unknown}"] if unknown else [])
                raise ModelKeyError(
                    f"{where}: params {'; '.join(parts)}; expected exactly the parameters and buffers "
                    f"{sorted(self._state_keys)}"
                )
            source = "given"
        arrays = {k: np.asarray(self.backend.to_numpy(v)) for k, v in params.items()}
        return exporter(directory, arrays, self, overwrite=overwrite, params_source=source)

    # -- parameters ------------------------------------------------------------------------------
    def randomize_params(self, seed: int | None = None) -> dict[str, Any]:
        """New parameters, each drawn as its block declares (:mod:`mithril.initializers`): by default
        PyTorch-style uniform(+-1/sqrt(fan_in)) for weights and for biases (the fan-in of the weight they
        are added to), ones/zeros for norm scales/shifts, normal(0, 0.02) for embeddings; the model families
        declare their references' initialisers (GPT-2's normal(0.02) with scaled residual projections,
        ResNet's Kaiming normal, T5's and CLIP's).

        The numbers come from NumPy's generator seeded with ``seed`` (or the backend's seed), so the
        same seed gives the same parameters on every backend.
        """
        seed = validation.positive_int("randomize_params", "seed", seed, optional=True, minimum=0)
        rng = np.random.default_rng(self.backend.seed if seed is None else seed)
        params = {}
        for name, value in {**self._param_values, **self._buffer_values}.items():
            shape = value.shape.static()
            if shape is None:
                raise ShapeError(
                    f"randomize_params: the shape of parameter {name!r} is {value.shape!r}, not fully known; "
                    "give the input shapes to ml.compile(shapes=...)"
                )
            params[name] = self.backend.array(initializers.sample(rng, shape, value.init, self._fan_in.get(name)))
        self._params = params = self._placed(params)
        return params

    def get_parameters(self) -> dict[str, Any]:
        """The current parameters (randomised on first use, or the last ones loaded/randomised)."""
        if self._params is None:
            return self.randomize_params()
        return dict(self._params)

    def save_params(self, path: str | Path, params: Mapping[str, Any] | None = None) -> Path:
        """Save parameters and buffers to exactly ``path``: ``.safetensors`` or ``.npz``. Never pickle.

        Keys, dtypes and shapes are checked first, so a file :meth:`load_params` would refuse is never
        written. Returns the path written.
        """
        path = _param_file(path, "save_params")
        where = f"save_params({path})"
        params = self.get_parameters() if params is None else params
        if not isinstance(params, Mapping):
            raise ArgumentError(f"{where}: params must be a dict of name -> array, got {type(params).__name__}")
        self._check_group(params, self._state_keys, "params", where)
        self._check_arrays(params, {}, params_only=True, where=where)
        arrays = {k: np.asarray(self.backend.to_numpy(v), order="C") for k, v in params.items()}
        if not path.parent.is_dir():
            raise CheckpointError(f"{where}: the directory {path.parent} does not exist; create it first")
        if path.suffix == ".safetensors":
            try:
                save_safetensors(path, arrays)
            except CheckpointError as exc:
                raise CheckpointError(f"{where}: {exc}") from None
        else:  # a file object: np.savez appends no ".npz" to the name
            write_file_atomically(path, lambda f: np.savez(f, **arrays), where=where)  # type: ignore[arg-type]
        return path

    def load_params(self, path: str | Path, *, strict: bool = True) -> dict[str, Any]:
        """Load parameters and buffers saved by :meth:`save_params`; keys, dtypes and shapes are checked and
        every error names the file.

        With ``strict=False`` a file that lacks some of this model's parameters (saved before blocks were
        added) or has extra ones loads what matches; the rest keep their current values and a warning
        lists both. Names are stable when blocks are added after the existing ones (see ``ml.compile``'s
        ``use_short_namings``), so the saved blocks get their saved values.
        """
        path = _param_file(path, "load_params")
        if not path.is_file():
            what = "is a directory, not a file" if path.is_dir() else "does not exist"
            raise CheckpointError(f"load_params: {path} {what}")
        if path.suffix == ".safetensors":
            file = SafetensorsFile(path)
            arrays = {k: file.read(k) for k in file.keys()}
        else:
            try:
                with np.load(path, allow_pickle=False) as archive:
                    arrays = {k: archive[k] for k in archive.files}
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                raise CheckpointError(f"load_params: {path} is not a valid .npz file ({type(exc).__name__}: {exc})") from None
        # long names join block paths with "."; files spelling them with "_" load too (mithril.serialization.names)
        params = {k: self.backend.array(v) for k, v in match_separators(arrays, self._state_keys).items()}
        if not strict and params.keys() != self._state_keys:
            missing, unexpected = sorted(self._state_keys - set(params)), sorted(set(params) - self._state_keys)
            warnings.warn(f"load_params({path}): kept current values for {missing}; ignored {unexpected}", stacklevel=2)
            current = self.get_parameters()
            params = {k: params[k] if k in params else current[k] for k in self._state_keys}
        self._check_group(params, self._state_keys, "params", f"load_params({path})")
        self._check_arrays(params, {}, params_only=True, where=f"load_params({path})")
        self._params = params = self._placed(params)
        return params

    # -- evaluation ------------------------------------------------------------------------------
    def evaluate(self, params: Mapping[str, Any] | None = None, data: Mapping[str, Any] | None = None, output_gradients: Any = None) -> Any:
        """Outputs, or ``(outputs, gradients)`` when ``output_gradients`` (cotangents, or ``True`` for a
        scalar output) is given.

        Every input is checked before the backend sees it: keys, dtypes and shapes of ``params`` and
        ``data`` (data given as NumPy arrays, lists or other-precision arrays is converted; float data
        for an int input is refused), and the keys, shapes and values of ``output_gradients`` (converted
        to the model's float dtype; outputs left out get zero cotangents). Mistakes raise
        :class:`~mithril.errors.MithrilError` subclasses naming the key, what was expected and what was given.

        >>> outputs = pm.evaluate(params, {"input": x})                                  # doctest: +SKIP
        >>> outputs, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})  # doctest: +SKIP
        """
        if self._input_groups:  # list-valued keys (Concat's input): one value per member
            params, data = self._expand_groups(params, data)
            if output_gradients is not None:
                outputs, gradients = self._evaluate_ungrouped(params, data, output_gradients)
                return outputs, self._grouped(gradients)
        return self._evaluate_ungrouped(params, data, output_gradients)

    def _expand_groups(self, params: Mapping[str, Any] | None, data: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """A list given for a list-valued key becomes its members, each where it belongs (a trainable
        member in ``params``, the others in ``data``), whichever of the two held the list."""
        params, data = dict(params or {}), dict(data or {})
        for name, members in self._input_groups.items():
            for source in (params, data):
                if name not in source:
                    continue
                values = source.pop(name)
                if not isinstance(values, (list, tuple)) or len(values) != len(members):
                    raise ArgumentError(f"evaluate: {name!r} is a list of {len(members)} arrays ({', '.join(members)}), got {values!r}")
                for member, value in zip(members, values):
                    (params if member in self._state_keys else data)[member] = value
        return params, data

    def _grouped(self, gradients: Mapping[str, Any]) -> dict[str, Any]:
        """Gradients of a list-valued key's members as one list under the key's name."""
        grouped = dict(gradients)
        for name, members in self._input_groups.items():
            if all(m in grouped for m in members):
                grouped[name] = [grouped.pop(m) for m in members]
        return grouped

    def _evaluate_ungrouped(self, params: Mapping[str, Any] | None, data: Mapping[str, Any] | None, output_gradients: Any) -> Any:
        direct = self._direct_forward
        if direct is not None and output_gradients is None and type(params) is dict and type(data) is dict:
            if len(params) == self._direct_sizes[0] and len(data) == self._direct_sizes[1]:
                try:
                    return direct(params, data)
                except (InputsNeedChecking, KeyError):
                    pass  # the checks below convert the input or name what is wrong
        params = {} if params is None else params
        data = {} if data is None else data
        if not isinstance(params, Mapping) or not isinstance(data, Mapping):
            wrong, value = ("params", params) if not isinstance(params, Mapping) else ("data", data)
            raise ArgumentError(
                f"evaluate({wrong}=...): expected a dict of name -> array, got {type(value).__name__}; "
                f"e.g. pm.evaluate(params, {{{', '.join(repr(k) for k in sorted(self._data_keys)) or ''}: ...}})"
            )
        if self._discarded_keys:  # inputs discard_keys removed: ignored when given
            params = {k: v for k, v in params.items() if k not in self._discarded_keys}
            data = {k: v for k, v in data.items() if k not in self._discarded_keys}
        if params.keys() != self._state_keys:
            self._check_group(params, self._state_keys, "params")
        if data.keys() != self._data_keys:
            self._check_group(data, self._data_keys, "data")
        data = self._checked_inputs(params, data)
        if self.plan is not None:
            params, data = self._placed(params), self._placed(data)
        if self._buffer_keys:  # buffers reach the generated code as runtime inputs, never differentiated
            data = {**data, **{k: params[k] for k in self._buffer_keys}}
            params = {k: params[k] for k in self._param_keys}
        if output_gradients is None:
            return self._forward(params, data)
        if self.plan is None:
            return self._evaluate_gradients(params, data, output_gradients)
        outputs, gradients = self._evaluate_gradients(params, data, output_gradients)
        return outputs, self._placed(gradients)  # gradients live where their parameters do

    def _checked_inputs(self, params: Mapping[str, Any], data: Mapping[str, Any], where: str = "evaluate") -> Mapping[str, Any]:
        """Index ranges, then every input's dtype and shape; returns ``data`` converted where needed."""
        if self._index_checks:  # on the data as given: a narrower integer type (int32) would wrap bad indices
            check_indices(self._index_checks, {**params, **data}, self.backend.to_numpy, self.backend.is_array)
        return self._check_arrays(params, data, where=where)

    # -- training (ml.compile(..., optimizer=...)) --------------------------------------------------
    @property
    def optimizer(self) -> Any:
        """The :mod:`mithril.optim` optimizer compiled into :meth:`train_step` (``None`` without one)."""
        return None if self._training is None else self._training.layout.optimizer

    @property
    def loss_key(self) -> str | None:
        """The output :meth:`train_step` minimises (``None`` without an optimizer)."""
        return None if self._training is None else self._training.layout.loss

    def init_state(self, params: Mapping[str, Any] | None = None) -> TrainState:
        """The training state to start from: copies of ``params`` (default :meth:`get_parameters`), the
        optimizer's state slots at zero and step 0, as backend arrays.

        >>> state = pm.init_state(pm.randomize_params(seed=0))                        # doctest: +SKIP
        >>> sorted(state.opt_state)                                                  # doctest: +SKIP
        ['m', 'v']
        """
        if self._training is None:
            raise not_compiled_for_training("init_state")
        return self._training.init_state(params)

    def train_step(self, state: TrainState, data: Mapping[str, Any] | None = None) -> tuple[TrainState, dict[str, Any]]:
        """One optimisation step in one compiled call: forward, backward of the loss and the optimizer's
        update. Returns the new state and the model's outputs (the loss among them) before the update.

        Inputs are checked as :meth:`evaluate` checks them. On JAX the given state's arrays are donated to
        the step: keep using the returned state.

        >>> state, outputs = pm.train_step(state, {"input": x, "target": y})           # doctest: +SKIP
        >>> float(outputs["final_cost"])                                             # doctest: +SKIP
        0.42
        """
        if self._training is None:
            raise not_compiled_for_training("train_step")
        return self._training.step(state, data or {})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``physical_model(params, data, output_gradients)`` is :meth:`evaluate`; ``physical_model(data)``
        (the Backends API page's spelling: one mapping of data keys only) evaluates with the current
        parameters (:meth:`get_parameters`: randomised on first use, or the last ones loaded).

        >>> import mithril as ml
        >>> from mithril.models import Linear
        >>> pm = ml.compile(Linear(2), ml.NumpyBackend(), shapes={"input": [1, 3]})   # doctest: +SKIP
        >>> pm({"input": pm.backend.ones(1, 3)})["output"].shape                    # doctest: +SKIP
        (1, 2)
        """
        if len(args) == 1 and not kwargs and isinstance(args[0], Mapping):
            keys = set(args[0])
            if keys and keys <= set(self.data_keys) and not keys & {*self.param_keys, *self.buffer_keys}:
                return self.evaluate(self.get_parameters() if (self.param_keys or self.buffer_keys) else {}, args[0])
        return self.evaluate(*args, **kwargs)

    def get_layer_names(self) -> list[str]:
        """Names of the logical model's top-level blocks, in the order they were added (``linear_0``,
        ``relu_0``, ...; a block's ``name=`` when given). Parameter paths start with them
        (:attr:`input_paths`)."""
        return [name for name, _ in self.model._children]

    def _placed(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """``arrays`` placed over the backend's device mesh per :attr:`plan` (unchanged without one)."""
        if self.plan is None:
            return dict(arrays)
        placed = {}
        for key, array in arrays.items():
            self.plan.check_shape(key, self.backend.shape_of(array))
            placed[key] = self.backend.place(array, self.plan.spec(key))
        return placed

    def _evaluate_gradients(self, params: Mapping[str, Any], data: Mapping[str, Any], output_gradients: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        cotangents, given = self._cotangents(output_gradients, params, data)
        self._check_cotangent_dims(cotangents, params, data)
        if self._backward is None:
            raise MithrilError(
                "evaluate(output_gradients=...): this model was compiled with inference=True or has no parameters; "
                "it has no gradients (compile without inference=True, with trainable parameters)"
            )
        unchecked = [key for key in given if key in self._unchecked_outputs]
        if not unchecked:
            gradients: tuple[dict[str, Any], dict[str, Any]] = self._backward(params, data, cotangents)
            return gradients
        # some cotangent axes follow no input: compare them with the outputs the gradient pass computes
        # (a wrong shape may have broadcast silently), or diagnose the framework's error with a forward pass
        try:
            result = self._backward(params, data, cotangents)
        except MithrilError:
            raise
        except Exception:
            self._check_cotangents_fit(unchecked, cotangents, self._forward(params, data))
            raise
        self._check_cotangents_fit(unchecked, cotangents, result[0])
        checked: tuple[dict[str, Any], dict[str, Any]] = result
        return checked

    def _check_cotangents_fit(self, keys: list[str], cotangents: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        for key in keys:
            expected, given = tuple(outputs[key].shape), tuple(cotangents[key].shape)
            if expected != given:
                raise ShapeError(f"evaluate(output_gradients): {key!r} has shape {given}, but the output {key!r} has shape {expected} in this call")

    def _cotangents(self, output_gradients: Any, params: Mapping[str, Any], data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Cotangents for every differentiable output (zeros for those not given), checked and converted to
        the model's float dtype, and the keys the caller gave."""
        outputs = self._differentiable_outputs
        if output_gradients is True:
            scalar = [k for k in outputs if self._output_values[k].shape.ints() == ()]
            if "final_cost" in scalar:  # a TrainModel: its cost, not its scalar metrics
                scalar = ["final_cost"]
            if len(scalar) != 1:
                raise ModelKeyError(
                    f"output_gradients=True needs exactly one scalar output; the float outputs are {outputs} with "
                    f"shapes {[self._output_values[k].shape for k in outputs]}. Pass a dict of cotangents instead."
                )
            given: dict[str, Any] = {scalar[0]: self.backend.array(1.0)}
        elif isinstance(output_gradients, Mapping):
            given = dict(output_gradients)
            if not given:
                raise ModelKeyError(
                    f"output_gradients is empty, which would give all-zero gradients; give cotangents for the "
                    f"differentiable outputs {outputs} (or True for a single scalar output)"
                )
        else:
            raise ArgumentError(
                f"evaluate(output_gradients=...): expected a dict of output name -> cotangent array (or True for a "
                f"single scalar output), got {output_gradients!r} ({type(output_gradients).__name__}); differentiable outputs: {outputs}"
            )
        unknown = [k for k in given if k not in self._output_values or k not in outputs]
        if unknown:
            raise ModelKeyError(f"evaluate(output_gradients): {'; '.join(self._describe_non_output(k) for k in unknown)}; the differentiable outputs are {outputs}")
        keys = list(given)
        float_dtype = self.backend.native_dtype("float")
        forward: dict[str, Any] | None = None
        for key in outputs:
            if key not in given:  # no cotangent: no gradient flows from this output (as in Mithril)
                shape = self._runtime_shape(key, params, data)
                if shape is None:  # its size is known only once computed: run the forward pass for it
                    forward = self._forward(params, data) if forward is None else forward
                    shape = tuple(forward[key].shape)
                given[key] = self.backend.zeros(*shape)
            else:
                value = given[key]
                if not (self.backend.is_array(value) and value.dtype == float_dtype):
                    given[key] = value = self._convert_data(key, value, "float", "output_gradients")
                self._check_shape(key, "output_gradients", self._output_values[key].shape.ints(), value)
        return given, keys

    def _describe_non_output(self, key: Any) -> str:
        if key in self._output_values:
            return f"{key!r} is an output of kind {self._output_values[key].kind}, which has no gradient"
        if key in self._param_keys or key in self._buffer_keys or key in self._data_keys:
            return f"{key!r} is an input, not an output"
        return f"{key!r} is not a key of the model"

    def _runtime_shape(self, key: str, params: Mapping[str, Any], data: Mapping[str, Any]) -> tuple[int, ...] | None:
        """The shape output ``key`` has in this call, when every axis is static or follows an input axis."""
        pattern = self._output_values[key].shape.ints()
        if pattern is None:
            return None
        shape = []
        for axis, size in enumerate(pattern):
            if size is None:
                source = self._output_dims.get((key, axis))
                value = None if source is None else params.get(source[0], data.get(source[0]))
                if source is None or value is None:
                    return None
                size = int(value.shape[source[1]])
            shape.append(size)
        return tuple(shape)

    def _check_group(self, given: Mapping[str, Any], expected: frozenset[str], label: str, where: str = "evaluate") -> None:
        missing = sorted(expected - set(given))
        unknown = sorted(set(given) - expected)
        parts = []
        if missing:
            parts.append(f"missing {missing}")
        if unknown:
            other = self._data_keys if label == "params" else self._state_keys
            hint = [k for k in unknown if k in other]
            parts.append(f"unknown {unknown}" + (f" ({hint} belong in {'data' if label == 'params' else 'params'})" if hint else ""))
        if parts:
            raise ModelKeyError(f"{where}({label}=...): {'; '.join(parts)}; expected exactly {sorted(expected)}")

    def _check_shape(self, name: str, label: str, expected: tuple[int | None, ...] | None, value: Any, where: str = "evaluate") -> None:
        if expected is None:
            return
        shape = tuple(value.shape)
        if len(shape) != len(expected) or any(e is not None and e != s for e, s in zip(expected, shape)):
            shown = tuple("?" if e is None else e for e in expected)
            raise ShapeError(f"{where}({label}): {name!r} has shape {shape}, expected {shown}")

    def _check_arrays(self, params: Mapping[str, Any], data: Mapping[str, Any], params_only: bool = False, where: str = "evaluate") -> Mapping[str, Any]:
        """Check every input's type, dtype and shape (the common case is a few comparisons per input);
        convert runtime data given as NumPy arrays/lists. Returns ``data``, converted where needed."""
        is_array = self.backend.is_array
        converted: dict[str, Any] | None = None
        for name, is_param, static, pattern, dtype, kind in self._checks:
            if params_only and not is_param:
                continue
            value = params[name] if is_param else data[name]
            if is_array(value) and value.dtype == dtype:
                if static is not None and tuple(value.shape) == static:
                    continue
            elif is_param:
                if not is_array(value):
                    raise DtypeError(f"{where}(params): {name!r} is a {type(value).__name__}; expected a {type(self.backend).__name__} array of dtype {dtype}: convert it with backend.array(...)")
                raise DtypeError(f"{where}(params): {name!r} has dtype {value.dtype}, expected {dtype} (the model computes in {dtype})")
            else:
                converted = dict(data) if converted is None else converted
                converted[name] = value = self._convert_data(name, value, kind)
            self._check_shape(name, "params" if is_param else "data", pattern, value, where)
        if self._shared_dims:
            self._check_shared_dims(params, data if converted is None else converted)
        return data if converted is None else converted

    def _check_cotangent_dims(self, cotangents: Mapping[str, Any], params: Mapping[str, Any], data: Mapping[str, Any]) -> None:
        """Cotangent axes that are symbolic at compile time must match the inputs they follow (``N``, ``T``)."""
        for (key, axis), (name, in_axis) in self._output_dims.items():
            given = cotangents.get(key)
            source = params.get(name, data.get(name))
            if given is None or source is None:
                continue
            if int(given.shape[axis]) != int(source.shape[in_axis]):
                raise ShapeError(
                    f"evaluate(output_gradients): {key!r} axis {axis} has size {int(given.shape[axis])}, but the output's "
                    f"axis {axis} follows {name!r} axis {in_axis}, of size {int(source.shape[in_axis])} in this call"
                )

    def _check_shared_dims(self, params: Mapping[str, Any], data: Mapping[str, Any]) -> None:
        for positions in self._shared_dims:
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

    def _convert_data(self, name: str, value: Any, kind: str, label: str = "data") -> Any:
        """Runtime data (and cotangents) may come as NumPy arrays, lists or other-precision arrays; they are
        converted to the model's dtype. Floats are never silently truncated into integer or bool inputs."""
        try:
            array = np.asarray(self.backend.to_numpy(value) if self.backend.is_array(value) else value)
        except (ValueError, TypeError) as exc:  # ragged nested lists, objects NumPy cannot convert
            raise DtypeError(f"evaluate({label}): {name!r} ({type(value).__name__}) is not an array of numbers ({kind}): {exc}") from None
        if array.dtype.kind not in "biuf":
            raise DtypeError(f"evaluate({label}): {name!r} is {type(value).__name__} of dtype {array.dtype}; expected numbers ({kind})")
        if array.dtype.kind == "f" and kind != "float":
            raise DtypeError(f"evaluate({label}): {name!r} has float values, but the model expects {kind} values")
        try:
            return self.backend.array(array, kind)
        except (DtypeError, ShapeError, ArgumentError) as exc:  # values the backend cannot hold (ints beyond int32 on GGML)
            raise type(exc)(f"evaluate({label}): {name!r}: {exc}") from None


PARAM_FILE_SUFFIXES = (".safetensors", ".npz")


def _param_file(path: str | Path, where: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"{where}: path must be a str or path ending in .safetensors or .npz, got {path!r} ({type(path).__name__})")
    path = Path(path)
    if path.suffix not in PARAM_FILE_SUFFIXES:
        raise ArgumentError(f"{where}: {path} must end in .safetensors or .npz (the format is chosen by the suffix)")
    return path


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


def _output_symbolic_dims(inputs: Mapping[str, Value], outputs: Mapping[str, Value]) -> dict[tuple[str, int], tuple[str, int]]:
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
