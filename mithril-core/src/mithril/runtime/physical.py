"""``PhysicalModel``: a compiled model that evaluates outputs and gradients on one backend.

The class is the public face of three parts, each in its own module: the runner
(:mod:`mithril.runtime.runner`: ``evaluate``'s calls), input validation (:mod:`mithril.runtime.input_checks`)
and persistence/export (:mod:`mithril.runtime.persistence`: parameters, files, the standalone program, the
lowered text); the training step is :mod:`mithril.runtime.training`'s. ``ml.compile`` builds it from three
typed records (:mod:`mithril.runtime.records`).

Example:
    >>> pm = ml.compile(model, ml.NumpyBackend(), shapes={"input": [32, 784]})   # doctest: +SKIP
    >>> params = pm.randomize_params(seed=0)                                       # doctest: +SKIP
    >>> outputs = pm.evaluate(params, {"input": x})                                # doctest: +SKIP
    >>> outputs, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..backends.backend import Backend
from ..display.mixin import Displayable
from ..errors import ArgumentError
from ..optim.state import TrainState
from ..shapes import describe_shape
from .input_checks import InputChecks
from .persistence import ParameterStore, export_program, lower, lowered_text
from .records import CompileReport, ProgramSignature, RunSettings
from .runner import Runner, load_functions
from .training import TrainingProgram, not_compiled_for_training

__all__ = ["PhysicalModel"]


class PhysicalModel(Displayable):
    """The result of ``ml.compile``. See the module docstring for the calling convention."""

    def __init__(
        self,
        backend: Backend[Any],
        program: Any,
        signature: ProgramSignature,
        settings: RunSettings,
        report: CompileReport,
    ) -> None:
        """``program``: what ``backend.generate_program`` returned; the records say what it takes and
        returns, how it runs and where it came from."""
        self.backend = backend
        self.program = program
        self.plan = settings.plan  # mithril.parallel.ShardingPlan of ml.compile(parallelism=...), or None
        self.model = report.model
        self.primitive_count = report.primitive_count
        self.compile_seconds = report.compile_seconds
        self.file_path = report.file_path
        self.precision = None if settings.precision is None else settings.precision[0]  # ml.compile(precision=...)
        self.jit_options = dict(settings.jit_options)
        self._signature = signature
        name = type(report.model).__name__
        functions = load_functions(program, backend, settings, report.file_path or f"<mithril:{name}>")
        self._checks = InputChecks(backend, signature)
        self._runner = Runner(backend, functions, signature, settings, self._checks, name)
        self._parameters = ParameterStore(backend, signature, self._checks, self._runner.placed)
        self._training = None
        if settings.train is not None:
            layout, loss_shape = settings.train
            self._training = TrainingProgram(
                self._runner, layout, loss_shape, functions, jit=settings.jit, jit_options=self.jit_options,
                loss_scaling=self.precision == "fp16-mixed",
            )  # fmt: skip

    # -- the runner's compiled functions (tests and benchmarks call them directly) -----------------------
    @property
    def _forward(self) -> Callable[..., Any]:
        """The compiled forward ``forward(params, data)``, without this class's checks."""
        return self._runner.forward

    @property
    def _direct_forward(self) -> Callable[..., Any] | None:
        """The entry point that takes ``evaluate``'s calls directly (its own checks), or ``None``."""
        return self._runner.direct

    def lower(
        self, params: Mapping[str, Any], data: Mapping[str, Any], output_gradients: Mapping[str, Any] | None = None
    ) -> Any:
        """The JIT's lowered program for these arguments (JAX: a ``jax.stages.Lowered``; ``.as_text()`` is
        the StableHLO, ``.compile()`` the XLA executable). With ``output_gradients`` it is the
        forward+backward program. Backends whose JIT has no lowering stage refuse it.
        """
        return lower(self.backend, self._runner.compiled, params, data, output_gradients)

    def lowered_text(self, params: Mapping[str, Any] | None = None, data: Mapping[str, Any] | None = None) -> str:
        """The lowered (StableHLO) text of the forward: for ``params``/``data`` when given, else the one kept
        at the first evaluate by ``jit_options={"xla_computation": True}``."""
        return lowered_text(self.backend, self._runner.compiled, params, data)

    # -- introspection ---------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """The generated Python source."""
        source: str = self.program.source
        return source

    @property
    def input_keys(self) -> list[str]:
        """Every input: parameters, buffers, then data."""
        return list(self._signature.inputs())

    @property
    def param_keys(self) -> list[str]:
        """Trainable parameters (gradients are returned for these)."""
        return list(self._signature.params)

    @property
    def buffer_keys(self) -> list[str]:
        """Non-trainable state (BatchNorm running statistics): passed in ``params``, never differentiated."""
        return list(self._signature.buffers)

    @property
    def buffer_updates(self) -> dict[str, str]:
        """Buffer -> the output holding its next value (state updates, e.g. running statistics in training)."""
        return dict(self._signature.buffer_updates)

    @property
    def input_paths(self) -> dict[str, str]:
        """Each input's logical path (``h_0.attn.c_attn.weight``), whatever ``use_short_namings`` chose
        for its name: the stable identity checkpoint loaders map names to."""
        return dict(self._signature.paths)

    def update_buffers(self, params: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with every buffer replaced by its new value from ``outputs`` (see :attr:`buffer_updates`).

        >>> outputs, grads = pm.evaluate(params, data, output_gradients=True)   # doctest: +SKIP
        >>> params = pm.update_buffers(params, outputs)                          # doctest: +SKIP
        """
        return self._runner.update_buffers(params, outputs)

    @property
    def data_keys(self) -> list[str]:
        """The inputs given at run time in ``data``."""
        return list(self._signature.data)

    @property
    def output_keys(self) -> list[str]:
        """Every output, in the order ``evaluate`` returns them."""
        return list(self._signature.outputs)

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
        return set(self._signature.discarded_keys)

    def get_shapes(
        self,
        model: Any = None,
        uni_keys: Any = None,
        var_keys: Any = None,
        symbolic: bool = False,
        verbose: bool = False,
    ) -> dict[str, Any]:
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
        values = {**self._signature.inputs(), **self._signature.outputs}
        return {k: describe_shape(v.shape) for k, v in values.items()}

    @property
    def shapes(self) -> dict[str, list[int | None] | None]:
        """Final shapes of inputs and outputs (``None`` for a dim known only at run time)."""
        values = {**self._signature.inputs(), **self._signature.outputs}
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
        return export_program(
            self, self._parameters, directory, params, randomize=randomize, seed=seed, overwrite=overwrite
        )

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
        return self._parameters.randomize(seed)

    def get_parameters(self) -> dict[str, Any]:
        """The current parameters (randomised on first use, or the last ones loaded/randomised)."""
        return self._parameters.get()

    def save_params(self, path: str | Path, params: Mapping[str, Any] | None = None) -> Path:
        """Save parameters and buffers to exactly ``path``: ``.safetensors`` or ``.npz``. Never pickle.

        Keys, dtypes and shapes are checked first, so a file :meth:`load_params` would refuse is never
        written. Returns the path written.
        """
        return self._parameters.save(path, params)

    def load_params(self, path: str | Path, *, strict: bool = True) -> dict[str, Any]:
        """Load parameters and buffers saved by :meth:`save_params`; keys, dtypes and shapes are checked and
        every error names the file.

        With ``strict=False`` a file that lacks some of this model's parameters (saved before blocks were
        added) or has extra ones loads what matches; the rest keep their current values and a warning
        lists both. Names are stable when blocks are added after the existing ones (see ``ml.compile``'s
        ``use_short_namings``), so the saved blocks get their saved values.
        """
        return self._parameters.load(path, strict=strict)

    # -- evaluation ------------------------------------------------------------------------------
    def evaluate(
        self,
        params: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
        output_gradients: Any = None,
    ) -> Any:
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
        return self._runner.evaluate(params, data, output_gradients)

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
        return self._training.init_state(self.get_parameters() if params is None else params)

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
