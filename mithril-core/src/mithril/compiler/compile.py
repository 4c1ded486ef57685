"""``ml.compile``: logical model + backend -> :class:`PhysicalModel`.

Steps: flatten (copy) the model, classify inputs (constants, data, trainable parameters), apply the
given shapes, run constant folding, CSE and pruning, build the symbolic backward pass for manual-gradient
backends, check the backend implements every primitive, and generate code.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Linear
    >>> pm = ml.compile(Linear(4), ml.NumpyBackend(), shapes={"input": [2, 3]})   # doctest: +SKIP
    >>> sorted(pm.input_keys)                                                     # doctest: +SKIP
    ['bias', 'input', 'weight']
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import initializers, validation
from ..backends.backend import Backend
from ..errors import (
    ArgumentError,
    DtypeError,
    ModelKeyError,
    ShapeError,
    UnsupportedPrimitiveError,
)
from ..gc_pause import with_paused_gc
from ..lazy_numpy import np
from ..lazy_plugins import registry
from ..parallel import make_plan
from ..runtime import CompileReport, PhysicalModel, ProgramSignature, RunSettings
from ..serialization.files import write_file_atomically
from ..shapes import ShapeMismatch, ShapeUndetermined, shape_from_template, unify
from .backward import build_backward
from .codegen.python import FunctionSpec
from .flatten import FlatModel, flatten
from .graph import Graph, Value, constant_kind, fit_constant
from .index_checks import find_index_checks
from .options import ACCEPTED_OPTIONS, CompileOptions, compile_options
from .passes import (
    decompose,
    insert_stop_gradients,
    place_on_host,
    positions_from_shapes,
    promote_integer_inputs,
    run_pass,
)
from .passes.pruning import live_nodes
from .train_step import TrainLayout, build_train_step, check_loss_shape, check_optimizer
from .verbose import log_verbose

__all__ = ["compile"]

@with_paused_gc
def compile(  # shadows the builtin: the public name is ml.compile
    model: Any,
    backend: Backend[Any],
    *,
    shapes: Mapping[str, Any] | None = None,
    data_keys: Iterable[str] = (),
    constant_keys: Mapping[str, Any] | None = None,
    trainable_keys: Iterable[str] = (),
    discard_keys: Iterable[str] = (),
    inference: bool = False,
    jit: bool | None = None,
    file_path: str | Path | None = None,
    safe_names: bool = True,
    use_short_namings: bool = True,
    parallelism: str | Mapping[str, Any] | None = None,
    verbose: bool = False,
    jit_options: Mapping[str, Any] | None = None,
    static_shapes: bool | None = None,
    optimizations: Mapping[str, bool] | None = None,
    optimizer: Any = None,
    loss: str | None = None,
    precision: str | None = None,
    quantize: str | None = None,
    **unknown: Any,
) -> PhysicalModel:
    """Compile a logical model for a backend.

    Args:
        model: the logical :class:`~mithril.models.Model` (a root: not a child of another model).
        backend: a backend instance (``ml.NumpyBackend()``).
        shapes: input (or output) name -> shape (ints, or ``None``/names for dims left symbolic).
        data_keys: inputs given at run time in ``data`` (never differentiated).
        constant_keys: input name -> value, folded into the compiled model.
        trainable_keys: inputs that are parameters (in addition to blocks' weights).
        discard_keys: outputs not to compute (their exclusive nodes are pruned).
        inference: build no backward pass.
        jit: use the backend's JIT (``jax.jit``, ``torch.compile``, ``mx.compile``); ``None`` lets the
            backend choose (JAX and MLX compile, PyTorch stays eager); ignored by NumPy.
        file_path: also write the generated source there.
        safe_names: sanitise generated variable names; Python code generation requires it (``False`` raises).
        use_short_namings: name unnamed inputs by their key (``weight``; later inputs with the same key, in
            order of first use, ``weight_1``, ``weight_2``...) instead of their path (``linear_0.weight``).
            Both are stable when blocks are added after the existing ones; ``pm.input_paths`` maps names
            to paths either way.
        parallelism: how inputs are placed over the backend's ``device_mesh`` (see
            :mod:`mithril.parallel.plan`): ``"data"`` (data split on its batch axis over the first mesh
            axis), ``"model"`` (Megatron-style parameter splits over the last mesh axis), ``"mixed"``
            (both, on a 2-D mesh), a dict ``{key: spec}`` (a tuple naming a mesh axis or ``None`` per
            dimension), or ``None``: follow the placements of the arrays passed in.
        verbose: log each stage (flatten, passes, shapes, codegen, jit) with its time, and the final
            shapes, to the ``mithril.compile`` logger (on stderr unless logging is configured).
        jit_options: keyword arguments of the backend's JIT (``jax.jit``: ``donate_argnums``,
            ``static_argnums`` counted over ``(params, data)``, plus ``xla_computation=True`` to keep the
            StableHLO text (:meth:`PhysicalModel.lowered_text`); ``torch.compile``: ``mode``, ``dynamic``...;
            ``mx.compile``: ``shapeless``).
        static_shapes: ``True``: one compiled program per input shape (what ``jax.jit`` always does;
            ``torch.compile(dynamic=False)``, ``mx.compile(shapeless=False)``); ``False``: shape-generic
            programs (PyTorch ``dynamic=True``, MLX ``shapeless=True``; refused on JAX). Needs a JIT backend.
        optimizations: ``{"constant_folding": bool, "cse": bool}`` switch Mithril's own passes (both on by
            default); ``"fusion"``, ``"buffer_reuse"``, ``"layout_optimization"`` are done by the backend's
            JIT compiler (XLA, Inductor, MLX) and are accepted as ``True`` when it runs (NumPy does
            ``buffer_reuse`` itself); ``False`` for them is refused, naming why.
        optimizer: a :mod:`mithril.optim` optimizer: also compile one training step (forward, backward and
            update in one call): ``state = pm.init_state(params)``, ``state, outputs = pm.train_step(state,
            data)``. ``model`` is a ``TrainModel`` (its ``final_cost`` is minimised) or names its scalar
            output with ``loss=``.
        loss: the scalar output ``optimizer`` minimises (default ``"final_cost"``).
        precision: ``"bf16-mixed"``: float32 parameters, gradients and optimizer state, bfloat16 compute
            (JAX, PyTorch, MLX); ``"fp16-mixed"``: float16 compute with dynamic loss scaling in
            ``train_step`` (PyTorch); ``None``/``"float32"``: the backend dtype throughout.
        quantize: ``"q8_0"``/``"q4_0"``: the weights of linear layers, embeddings and convolutions stored
            block-quantized (ggml's formats) and multiplied by the backend's quantized kernels; inference only,
            on backends that have them (``GGMLBackend``).

    Example:
        >>> pm = ml.compile(Linear(4), ml.JaxBackend(), shapes={"input": [2, 3]}, verbose=True,
        ...                 jit_options={"donate_argnums": (1,)})                          # doctest: +SKIP
    """
    arguments = locals()
    options = compile_options(model, backend, {**{k: arguments[k] for k in ACCEPTED_OPTIONS}, **unknown})
    started = time.perf_counter()
    log = _StageLog(options.verbose, f"ml.compile({type(model).__name__}, {type(backend).__name__})")
    stage = _flatten_and_classify(model, backend, options)
    log.stage("flatten", f"{len(stage.graph.nodes)} primitive calls; parameters {stage.params}, data {stage.data}")
    _optimise(stage, backend, options)
    backward = _differentiate(stage, backend, options)
    enabled = [name for name, on in options.passes.items() if on]
    symbolic = ", symbolic backward" if backward.gradients else ""
    log.stage(
        "passes",
        f"{', '.join(enabled) or 'no optional passes'}, pruning{symbolic}; {len(stage.graph.nodes)} primitive calls",
    )
    stage.graph.solve()
    loss_shape = check_loss_shape(backward.train[0], stage.outputs) if backward.train is not None else ()
    log.stage("shapes", "solved")
    place_on_host(stage.graph)
    _check_implementations(stage.graph, backend)
    plan = _parallel_plan(stage, backend, options)
    program, functions = _generate(model, stage, backward, backend, options.quantize)
    log.stage("codegen", f"{len(program.source.splitlines())} lines of {backend.codegen} for {functions}")
    if options.file_path is not None:
        where = f"ml.compile(file_path={str(options.file_path)!r})"
        write_file_atomically(options.file_path, program.source, where=where, error=ArgumentError)
    physical = _physical_model(model, backend, options, stage, backward, program, plan, loss_shape, started)
    jitted = options.will_jit and backend.supports_autograd
    jit_call = f"{type(backend).__name__}.jit({', '.join(f'{k}={v!r}' for k, v in options.jit_options.items())})"
    log.stage(
        "jit",
        f"{jit_call} wrapped; traced and compiled on the first evaluate"
        if jitted
        else "none (the generated code runs as is)",
    )
    log.shapes(physical.shapes)
    return physical


@dataclass
class _Stage:
    """The flattened model as the passes leave it: the graph, the inputs by role, the outputs kept."""

    flat: FlatModel
    params: list[str]
    buffers: list[str]
    data: list[str]
    outputs: dict[str, Value]
    state_outputs: dict[str, str]
    buffer_updates: dict[str, str]
    discarded: set[str]

    @property
    def graph(self) -> Graph:
        return self.flat.graph

    def inputs(self, *groups: list[str]) -> dict[str, Value]:
        return {name: self.flat.inputs[name] for group in groups for name in group}


@dataclass
class _Backward:
    """The symbolic gradients (manual-gradient backends), their cotangent inputs, and the training step."""

    gradients: dict[str, Value] = field(default_factory=dict)
    cotangents: dict[str, Value] = field(default_factory=dict)
    train: tuple[TrainLayout, dict[str, Value], dict[str, Value]] | None = None


def _flatten_and_classify(model: Any, backend: Backend[Any], options: CompileOptions) -> _Stage:
    """Copy the model into a graph, apply the given names, shapes and constants, and sort its inputs."""
    flat = flatten(model, registry(), short_names=options.use_short_namings)
    mentioned = set(options.shapes) | options.data_keys | options.trainable_keys | set(options.constant_keys)
    _drop_unused_optional_inputs(flat, mentioned)
    state_outputs = _expose_buffer_updates(flat)
    _check_names(
        flat,
        options.shapes,
        set(options.data_keys),
        set(options.trainable_keys),
        options.constant_keys,
        set(options.discard_keys),
    )
    discarded = _infer_discarded(flat, options.discard_keys)
    _apply_shapes(flat, options.shapes)
    _apply_constants(flat, options.constant_keys)
    decompose(flat.graph, backend.has_implementation)  # primitives the backend lacks, as other primitives
    params, buffers, data = _classify(flat, set(options.data_keys), set(options.trainable_keys))
    flat.graph.default_kinds(flat.inputs.values())
    for name in params:
        if flat.inputs[name].kind != "float":
            raise DtypeError(f"parameter {name!r} is {flat.inputs[name].kind}; only float inputs can be trained")
    outputs = {k: v for k, v in flat.outputs.items() if k not in options.discard_keys}
    buffer_updates = {buffer: out for buffer, out in state_outputs.items() if out in outputs and buffer in flat.inputs}
    return _Stage(flat, params, buffers, data, outputs, state_outputs, buffer_updates, discarded)


def _optimise(stage: _Stage, backend: Backend[Any], options: CompileOptions) -> None:
    """The forward graph's passes; inputs that only fed discarded outputs leave the model, as in Mithril."""
    graph = stage.graph
    promote_integer_inputs(graph)
    positions_from_shapes(graph)
    if options.passes["constant_folding"]:
        run_pass("constant_folding", graph, backend.evaluate_constant)
    if options.passes["cse"]:
        run_pass("cse", graph, stage.outputs)
    run_pass("pruning", graph, stage.outputs.values())
    if not stage.discarded:
        return
    live = live_nodes(graph.nodes, stage.outputs.values())  # whether or not the pruning pass ran
    used = {v.find().id for node in live for v in node.inputs.values() if v is not None}
    used |= {v.find().id for v in stage.outputs.values()}
    inputs = stage.flat.inputs
    dropped = {name for name in stage.discarded if name in inputs and inputs[name].find().id not in used}
    stage.params, stage.buffers, stage.data = (
        [n for n in group if n not in dropped] for group in (stage.params, stage.buffers, stage.data)
    )
    stage.discarded = {name for name in stage.discarded if name not in inputs or name in dropped}


def _differentiate(stage: _Stage, backend: Backend[Any], options: CompileOptions) -> _Backward:
    """The symbolic backward pass (backends without autograd) and the training step (``optimizer=``)."""
    graph, outputs, backward = stage.graph, stage.outputs, _Backward()
    wrt = stage.inputs(stage.params)
    if not options.inference and wrt and not backend.supports_autograd:
        differentiable = {
            k: v for k, v in outputs.items() if v.kind == "float" and k not in stage.state_outputs.values()
        }
        backward.cotangents = {
            k: graph.new_value(v.shape, "float", name=f"{k}_grad") for k, v in differentiable.items()
        }
        pairs = {k: (v, backward.cotangents[k]) for k, v in differentiable.items()}
        backward.gradients = build_backward(graph, wrt, pairs, backend.backend_type)
        _reoptimise(graph, backend, options.passes, outputs, backward.gradients)
    if not options.inference and wrt and backend.supports_autograd:
        insert_stop_gradients(graph, wrt.values())
    if options.optimizer is None and options.loss is None:
        return backward
    loss_key, adapter = check_optimizer(options.optimizer, options.loss, outputs, wrt, options.inference, backend)
    if adapter is not None:  # a framework's optimizer: the backend's autograd and its update
        backward.train = (TrainLayout.for_external(loss_key, adapter), {}, {})
        return backward
    backward.train = build_train_step(
        graph, options.optimizer, loss_key, outputs, wrt, stage.flat.paths, autograd=backend.supports_autograd,
        backend_type=backend.backend_type, taken={*stage.flat.inputs, *stage.flat.outputs},
        # eager only: under a JIT the framework already reuses buffers; sharded states stay functional
        in_place=backend.updates_in_place and not options.will_jit and options.parallelism is None,
    )  # fmt: skip
    decompose(graph, backend.has_implementation)  # the update's primitives the backend lacks (adam_update)
    _reoptimise(graph, backend, options.passes, outputs, backward.gradients, backward.train[2])
    return backward


def _parallel_plan(stage: _Stage, backend: Backend[Any], options: CompileOptions) -> Any:
    """How inputs are placed over the backend's device mesh (``parallelism=``), or ``None``."""
    if options.parallelism is None:
        return None
    if backend.device_mesh is None:
        raise ArgumentError(
            f"ml.compile(parallelism={options.parallelism!r}) needs a backend with a device mesh, e.g. "
            f"ml.JaxBackend(device_mesh=(2,)) or ml.TorchBackend(device_mesh=(2,)); got {backend!r}"
        )
    return make_plan(
        options.parallelism,
        mesh_shape=backend.device_mesh,
        graph=stage.graph,
        params=stage.inputs(stage.params, stage.buffers),
        data=stage.inputs(stage.data),
    )


def _generate(
    model: Any, stage: _Stage, backward: _Backward, backend: Backend[Any], quantize: str | None = None
) -> tuple[Any, list[str]]:
    """The backend's program (``evaluate``, ``evaluate_gradients``, the training step) and its function names."""
    inputs = stage.inputs(stage.params, stage.buffers, stage.data)
    outputs, train = stage.outputs, backward.train
    functions = [FunctionSpec("evaluate", inputs, {}, [outputs])]
    if backward.gradients:
        functions.append(FunctionSpec("evaluate_gradients", inputs, backward.cotangents, [outputs, backward.gradients]))
    if train is not None and train[0].external is None:
        layout, train_inputs, train_returns = train
        if backend.supports_autograd:  # the backend's autograd gives the gradients; the update is ours
            update_inputs = {**stage.inputs(stage.params), **train_inputs}
            functions.append(FunctionSpec(layout.function, update_inputs, {}, [train_returns]))
        else:
            functions.append(
                FunctionSpec(layout.function, {**inputs, **train_inputs}, {}, [{**outputs, **train_returns}])
            )
    header = (
        f"Generated by Mithril for {type(model).__name__} on {type(backend).__name__} ({backend.dtype.value}).\n"
        f"{len(stage.graph.nodes)} primitive calls; parameters: {', '.join(stage.params) or 'none'}."
    )
    state_names = set(stage.params) | (set(train[1]) if train is not None else set())
    extra = {"quantize": quantize} if quantize is not None else {}  # only backends with quantize_formats get it
    program = backend.generate_program(stage.graph, functions, param_names=state_names, header=header, **extra)
    return program, [f.name for f in functions]


def _physical_model(
    model: Any, backend: Backend[Any], options: CompileOptions, stage: _Stage, backward: _Backward, program: Any,
    plan: Any, loss_shape: Any, started: float,
) -> PhysicalModel:  # fmt: skip
    """The compiled model: the program with its inputs, outputs and the checks its calls run."""
    graph, outputs, inputs = stage.graph, stage.outputs, stage.inputs(stage.params, stage.buffers, stage.data)
    differentiable = [k for k, v in outputs.items() if v.kind == "float" and k not in stage.state_outputs.values()]
    signature = ProgramSignature(
        params=stage.inputs(stage.params),
        buffers=stage.inputs(stage.buffers),
        data=stage.inputs(stage.data),
        outputs=outputs,
        differentiable_outputs=list(backward.cotangents) if backward.gradients else differentiable,
        buffer_updates=stage.buffer_updates,
        paths={name: stage.flat.paths.get(name, name) for name in inputs},
        index_checks=find_index_checks(graph, {**stage.flat.inputs}, set(stage.data) | set(stage.buffers)),
        fan_in={name: fan for name, fan in _bias_fan_in(graph).items() if name in stage.params},
        discarded_keys=frozenset(stage.discarded),
        input_groups=_input_groups(model, set(inputs)),
    )
    settings = RunSettings(
        jit=options.will_jit,
        inference=options.inference,
        jit_options=dict(options.jit_options),
        verbose=options.verbose,
        precision=(str(options.precision), options.compute) if options.compute is not None else None,
        plan=plan,
        train=None if backward.train is None else (backward.train[0], loss_shape),
    )
    file_path = str(options.file_path) if options.file_path is not None else None
    report = CompileReport(model, len(graph.nodes), time.perf_counter() - started, file_path)
    return PhysicalModel(backend, program, signature, settings, report)


def _reoptimise(graph: Graph, backend: Backend[Any], passes: Mapping[str, bool], *groups: dict[str, Value]) -> None:
    """Constant folding, CSE and pruning again after nodes joined the graph (the backward pass, the training
    step). Every group of named values (outputs, gradients, the step's results) is kept, and updated in
    place where CSE merged one of its values into a twin."""
    if passes["constant_folding"]:
        run_pass("constant_folding", graph, backend.evaluate_constant)
    every = {f"{i}\0{k}": v for i, group in enumerate(groups) for k, v in group.items()}
    if passes["cse"]:
        run_pass("cse", graph, every)
    for i, group in enumerate(groups):
        group.update({k: every[f"{i}\0{k}"] for k in group})
    run_pass("pruning", graph, every.values())


class _StageLog:
    """``verbose=True``: one INFO line per compile stage with its time (seconds since the previous stage)."""

    def __init__(self, verbose: bool, title: str) -> None:
        self.verbose, self.title = verbose, title
        self.last = self.started = time.perf_counter()

    def _emit(self, message: str) -> None:
        if self.verbose:
            log_verbose(message)

    def stage(self, name: str, detail: str) -> None:
        now = time.perf_counter()
        self._emit(f"{self.title}: {name:<8} {now - self.last:8.4f} s  {detail}")
        self.last = now

    def shapes(self, shapes: Mapping[str, Any]) -> None:
        self._emit(f"{self.title}: total    {time.perf_counter() - self.started:8.4f} s")
        for key, shape in shapes.items():
            self._emit(f"{self.title}: shape {key}: {shape}")


def _drop_unused_optional_inputs(flat: FlatModel, mentioned: set[str]) -> None:
    """Optional inputs (bias, mask) that nobody connected or mentions are absent."""
    dropped = {v.id for name, v in flat.inputs.items() if v.id in flat.optional_only and name not in mentioned}
    if not dropped:
        return
    for node in flat.graph.nodes:
        for key, value in node.inputs.items():
            if value is not None and value.id in dropped:
                node.inputs[key] = None
    for name in [n for n, v in flat.inputs.items() if v.id in dropped]:
        del flat.inputs[name]


def _infer_discarded(flat: FlatModel, discard_keys: Iterable[str]) -> set[str]:
    """Mithril's discard inference: the discarded outputs and the inputs that only feed them.

    A discarded output that another primitive still consumes stays computed (it only leaves the outputs);
    from each discarded value the inference walks backwards to the inputs of its primitive that feed nothing
    else kept, and forwards to results whose inputs are all discarded; outputs of the model stop the walk.
    Returns the discarded output and input names (inputs still needed are kept by the caller).
    """
    keys = [k for k in discard_keys if k in flat.outputs]
    if not keys:
        return set()
    consumers: dict[int, list[Any]] = {}
    for node in flat.graph.nodes:
        for value in node.inputs.values():
            if value is not None:
                consumers.setdefault(value.find().id, []).append(node)
    output_ids = {v.find().id for v in flat.outputs.values()}
    discarded: set[int] = set()
    queue: list[Value] = []
    names: set[str] = set()
    for key in keys:
        root = flat.outputs[key].find()
        if root.id in consumers:  # still feeds a kept computation: not discarded, only no longer an output
            continue
        names.add(key)
        discarded.add(root.id)
        queue.append(root)

    def fed_only_discarded(value: Value) -> bool:
        return all(out.find().id in discarded for node in consumers.get(value.id, []) for out in node.outputs.values())

    while queue:
        value = queue.pop()
        # backwards: an input of its primitive that feeds only discarded results
        backward = [v.find() for v in value.producer.inputs.values() if v is not None] if value.producer else []
        # forwards: the results of a primitive whose inputs are all discarded
        forward = [
            out.find()
            for node in consumers.get(value.id, [])
            if all(v is None or v.find().id in discarded for v in node.inputs.values())
            for out in node.outputs.values()
        ]
        for other, check in [*((v, True) for v in backward), *((v, False) for v in forward)]:
            if other.id in discarded or other.id in output_ids or (check and not fed_only_discarded(other)):
                continue
            discarded.add(other.id)
            queue.append(other)
    names |= {name for name, v in flat.inputs.items() if v.find().id in discarded}
    return names


def _check_names(
    flat: FlatModel,
    shapes: Mapping[str, Any],
    data: set[str],
    trainable: set[str],
    constants: Mapping[str, Any],
    discard: set[str],
) -> None:
    inputs, outputs = set(flat.inputs), set(flat.outputs)
    for label, names, allowed in (
        ("data_keys", data, inputs),
        ("trainable_keys", trainable, inputs),
        ("constant_keys", set(constants), inputs),
        ("shapes", set(shapes), inputs | outputs),
        ("discard_keys", discard, outputs),
    ):
        unknown = names - allowed
        if unknown:
            kind = "outputs" if label == "discard_keys" else "inputs"
            raise ModelKeyError(
                f"ml.compile({label}=...): {sorted(unknown)} are not {kind} of the model; "
                f"its inputs are {sorted(inputs)}, its outputs {sorted(outputs)}"
            )
    for first, second, a, b in (
        ("data_keys", "trainable_keys", data, trainable),
        ("data_keys", "constant_keys", data, set(constants)),
        ("trainable_keys", "constant_keys", trainable, set(constants)),
    ):
        overlap = a & b
        if overlap:
            raise ModelKeyError(
                f"ml.compile: {sorted(overlap)} are in both {first} and {second}; the sets must be disjoint"
            )


def _apply_constants(flat: FlatModel, constants: Mapping[str, Any]) -> None:
    for name, value in constants.items():
        _apply_constant(name, flat.inputs.pop(name), value)


def _apply_constant(name: str, target: Value, value: Any) -> None:
    target.const = fit_constant(
        target,
        value,
        lambda array, _, exc: (
            f"ml.compile(constant_keys): {name!r} expects shape {target.shape!r}, got {list(np.shape(array))} ({exc})"
        ),
    )
    if target.kind is None:
        target.set_kind(constant_kind(target.const))


def _apply_shapes(flat: FlatModel, shapes: Mapping[str, Any]) -> None:
    symbols: dict[str, object] = {}
    for name, template in shapes.items():
        value = flat.inputs.get(name) or flat.outputs[name]
        template = validation.shape_template(f"ml.compile(shapes={{{name!r}: ...}})", "the shape", template)
        shape = shape_from_template(template, symbols)
        try:
            unify(value.shape, shape)
        except ShapeUndetermined:
            flat.graph.deferred.append((value.shape, shape, f"ml.compile(shapes={name!r})"))
        except ShapeMismatch as exc:
            raise ShapeError(
                f"ml.compile(shapes): {name!r} has shape {value.shape!r}, which does not match {list(template)} ({exc})"
            ) from None
    flat.graph.solve()


def _classify(flat: FlatModel, data: set[str], trainable: set[str]) -> tuple[list[str], list[str], list[str]]:
    """Inputs -> (trainable parameters, buffers, runtime data)."""
    params, buffers, runtime = [], [], []
    for name, value in flat.inputs.items():
        if name in trainable or (name not in data and value.differentiable is True):
            params.append(name)
        elif value.buffer and name not in data:
            buffers.append(name)
        else:
            runtime.append(name)
    return params, buffers, runtime


def _expose_buffer_updates(flat: FlatModel) -> dict[str, str]:
    """Make every declared state update (``Model.set_buffer_update``) an output named ``<buffer>_new``
    (or keep the name it is already exposed under). Returns buffer name -> output name."""
    input_names = {v.id: name for name, v in flat.inputs.items()}
    exposed = {v.id: name for name, v in flat.outputs.items()}
    updates: dict[str, str] = {}
    for node in flat.graph.nodes:
        for value in node.outputs.values():
            if value.updates is None or value.updates.id not in input_names:
                continue
            buffer = input_names[value.updates.id]
            name = exposed.get(value.id)
            if name is None:
                name, i = f"{buffer}_new", 0
                while name in flat.outputs or name in flat.inputs:
                    name, i = f"{buffer}_new_{i}", i + 1
                flat.outputs[name] = value
                value.name = value.name or name
            updates[buffer] = name
    return updates


def _bias_fan_in(graph: Graph) -> dict[str, int]:
    """For a parameter in a primitive's ``bias`` slot next to a ``weight``: the weight's fan-in, so
    ``randomize_params`` bounds biases as PyTorch's Linear/Conv do (``1/sqrt(fan_in)`` of the weight)."""
    result: dict[str, int] = {}
    for node in graph.nodes:
        bias, weight = node.inputs.get("bias"), node.inputs.get("weight")
        shape = weight.shape.static() if weight is not None else None
        if bias is not None and bias.name and shape is not None and len(shape) >= 2:
            result[bias.name] = initializers.fan_in_of(shape)
    return result


def _input_groups(model: Any, inputs: set[str]) -> dict[str, list[str]]:
    """The model's list-valued keys whose members are all inputs of the compiled model (``Concat``'s
    ``input``): evaluate takes a list for each."""
    groups = getattr(model, "__dict__", {}).get("_key_groups", {})
    found = {name: [conn.key for conn in members] for name, members in groups.items()}
    return {name: keys for name, keys in found.items() if keys and all(k in inputs for k in keys)}


def _check_implementations(graph: Graph, backend: Backend[Any]) -> None:
    missing: dict[str, str] = {}
    for node in graph.nodes:
        if not backend.has_implementation(node.spec.name):
            missing.setdefault(node.spec.name, node.path or "<root>")
    if missing:
        listed = ", ".join(f"{name!r} (at {path})" for name, path in missing.items())
        raise UnsupportedPrimitiveError(
            f"{type(backend).__name__} does not implement {listed}, and no decomposition into other primitives "
            "is declared for it (PrimitiveSpec.decomposition); pick another backend or register an implementation "
            "with the 'mithril_register_impls' hook"
        )
