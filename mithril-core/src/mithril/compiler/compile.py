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

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import initializers, validation
from ..backends.backend import Backend
from ..errors import ArgumentError, ConnectionError_, DtypeError, KeyError_, ShapeError, UnsupportedPrimitiveError
from ..gc_pause import with_paused_gc
from ..parallel import make_plan
from ..serialization.files import write_file_atomically
from ..shapes import ShapeMismatch, ShapeUndetermined, shape_from_template, unify
from ..types import Dtype
from .backward import build_backward
from .codegen.python import FunctionSpec
from .flatten import FlatModel, flatten, is_logical_model
from .graph import Graph, Value, as_constant, constant_kind
from .index_checks import find_index_checks
from .passes import (
    decompose,
    eliminate_common_subexpressions,
    fold_constants,
    insert_stop_gradients,
    place_on_host,
    positions_from_shapes,
    promote_integer_inputs,
    prune,
)
from .passes.pruning import live_nodes
from .physical import PhysicalModel
from .train_step import TrainLayout, build_train_step, check_loss_shape, check_optimizer
from .verbose import log_verbose

__all__ = ["compile"]

ACCEPTED_OPTIONS = (
    "shapes", "data_keys", "constant_keys", "trainable_keys", "discard_keys", "inference", "jit", "file_path",
    "safe_names", "use_short_namings", "parallelism", "verbose", "jit_options", "static_shapes", "optimizations",
    "optimizer", "loss", "precision",
)

"""``ml.compile(verbose=True)`` logs each stage here (INFO); shown on stderr when nothing else handles it."""

_PASSES = {"constant_folding": "constant_folding", "cse": "cse", "common_subexpression_elimination": "cse"}
_JIT_OPTIMIZATIONS = {"fusion": "operator fusion", "buffer_reuse": "buffer reuse", "layout_optimization": "layout assignment"}


@with_paused_gc
def compile(  # noqa: A001 - the public name is ml.compile
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

    Example:
        >>> pm = ml.compile(Linear(4), ml.JaxBackend(), shapes={"input": [2, 3]}, verbose=True,
        ...                 jit_options={"donate_argnums": (1,)})                          # doctest: +SKIP
    """
    if unknown:
        raise ArgumentError(f"ml.compile got unknown option(s) {sorted(unknown)}; accepted: {', '.join(ACCEPTED_OPTIONS)}")
    if not is_logical_model(model):
        raise ArgumentError(f"ml.compile needs a logical model (mithril.models.Model) as its first argument, got {type(model).__name__}")
    if not isinstance(backend, Backend):
        hint = f"; create one: {backend.__name__}()" if isinstance(backend, type) and issubclass(backend, Backend) else ""
        raise ArgumentError(f"ml.compile needs a backend instance such as ml.NumpyBackend() as its second argument, got {backend!r}{hint}")
    shapes = validation.mapping("ml.compile", "shapes", shapes, what="a dict of key -> shape template")
    constant_keys = validation.mapping("ml.compile", "constant_keys", constant_keys, what="a dict of key -> value")
    data_keys = validation.key_names("ml.compile", "data_keys", data_keys)
    trainable_keys = validation.key_names("ml.compile", "trainable_keys", trainable_keys)
    discard_keys = validation.key_names("ml.compile", "discard_keys", discard_keys)
    for flag, value in (("inference", inference), ("safe_names", safe_names), ("use_short_namings", use_short_namings)):
        validation.boolean("ml.compile", flag, value)
    if jit is not None:
        validation.boolean("ml.compile", "jit", jit)
    if not safe_names and backend.codegen == "python":
        raise ArgumentError("ml.compile: safe_names=False is not available for Python code generation: variable names must be identifiers")
    if getattr(model, "_parent", None) is not None:
        raise ConnectionError_(f"{model._path()} is part of another model; compile its root model instead")
    validation.boolean("ml.compile", "verbose", verbose)
    compute = _mixed_precision(backend, precision)
    will_jit = backend.jit_by_default if jit is None else jit
    jit_options = _jit_options(backend, will_jit, jit_options, static_shapes)
    passes = _optimizations(backend, will_jit, optimizations)
    started = time.perf_counter()
    log = _StageLog(verbose, f"ml.compile({type(model).__name__}, {type(backend).__name__})")
    from ..plugins import registry

    flat = flatten(model, registry(), short_names=use_short_namings)
    data_set, trainable_set = set(data_keys), set(trainable_keys)
    constants = dict(constant_keys or {})
    mentioned = set(shapes or {}) | data_set | trainable_set | set(constants)
    _drop_unused_optional_inputs(flat, mentioned)
    state_outputs = _expose_buffer_updates(flat)
    _check_names(flat, shapes or {}, data_set, trainable_set, constants, set(discard_keys))
    discarded = _infer_discarded(flat, discard_keys)
    _apply_shapes(flat, shapes or {})
    _apply_constants(flat, constants)
    decompose(flat.graph, backend.has_implementation)  # primitives the backend lacks, as other primitives
    params, buffers, data = _classify(flat, data_set, trainable_set)
    graph = flat.graph
    log.stage("flatten", f"{len(graph.nodes)} primitive calls; parameters {params}, data {data}")
    graph.default_kinds(flat.inputs.values())
    for name in params:
        if flat.inputs[name].kind != "float":
            raise DtypeError(f"parameter {name!r} is {flat.inputs[name].kind}; only float inputs can be trained")
    outputs = {k: v for k, v in flat.outputs.items() if k not in set(discard_keys)}
    buffer_updates = {buffer: out for buffer, out in state_outputs.items() if out in outputs and buffer in flat.inputs}
    promote_integer_inputs(graph)
    positions_from_shapes(graph)

    if passes["constant_folding"]:
        fold_constants(graph, backend.evaluate_constant)
    if passes["cse"]:
        eliminate_common_subexpressions(graph, outputs)
    prune(graph, outputs.values())
    if discarded:  # inputs that only fed discarded outputs leave the compiled model, as in Mithril
        live = live_nodes(graph.nodes, outputs.values())  # whether or not the pruning pass ran
        used = {v.find().id for node in live for v in node.inputs.values() if v is not None}
        used |= {v.find().id for v in outputs.values()}
        dropped = {name for name in discarded if name in flat.inputs and flat.inputs[name].find().id not in used}
        params, buffers, data = ([n for n in group if n not in dropped] for group in (params, buffers, data))
        discarded = {name for name in discarded if name not in flat.inputs or name in dropped}
    gradients: dict[str, Value] = {}
    cotangents: dict[str, Value] = {}
    wrt = {name: flat.inputs[name] for name in params}
    if not inference and wrt and not backend.supports_autograd:
        differentiable_outputs = {k: v for k, v in outputs.items() if v.kind == "float" and k not in state_outputs.values()}
        cotangents = {k: graph.new_value(v.shape, "float", name=f"{k}_grad") for k, v in differentiable_outputs.items()}
        gradients = build_backward(graph, wrt, {k: (v, cotangents[k]) for k, v in differentiable_outputs.items()}, backend.backend_type)
        _reoptimise(graph, backend, passes, outputs, gradients)
    if not inference and wrt and backend.supports_autograd:
        insert_stop_gradients(graph, wrt.values())
    train: tuple[TrainLayout, dict[str, Value], dict[str, Value]] | None = None
    if optimizer is not None or loss is not None:
        loss_key, adapter = check_optimizer(optimizer, loss, outputs, wrt, inference, backend)
        if adapter is not None:  # a framework's optimizer: the backend's autograd and its update
            train = (TrainLayout.for_external(loss_key, adapter), {}, {})
        else:
            train = build_train_step(
                graph, optimizer, loss_key, outputs, wrt, flat.paths, autograd=backend.supports_autograd,
                backend_type=backend.backend_type, taken={*flat.inputs, *flat.outputs},
                # eager only: under a JIT the framework already reuses buffers; sharded states stay functional
                in_place=backend.updates_in_place and not will_jit and parallelism is None,
            )
            decompose(graph, backend.has_implementation)  # the update's primitives the backend lacks (adam_update)
            _reoptimise(graph, backend, passes, outputs, gradients, train[2])
    enabled = [name for name, on in passes.items() if on]
    log.stage("passes", f"{', '.join(enabled) or 'no optional passes'}, pruning{', symbolic backward' if gradients else ''}; {len(graph.nodes)} primitive calls")
    graph.solve()
    loss_shape = check_loss_shape(train[0], outputs) if train is not None else ()
    log.stage("shapes", "solved")
    place_on_host(graph)
    _check_implementations(graph, backend)
    plan = None
    if parallelism is not None:
        if backend.device_mesh is None:
            raise ArgumentError(
                f"ml.compile(parallelism={parallelism!r}) needs a backend with a device mesh, e.g. "
                f"ml.JaxBackend(device_mesh=(2,)) or ml.TorchBackend(device_mesh=(2,)); got {backend!r}"
            )
        plan = make_plan(
            parallelism,
            mesh_shape=backend.device_mesh,
            graph=graph,
            params={name: flat.inputs[name] for name in [*params, *buffers]},
            data={name: flat.inputs[name] for name in data},
        )

    inputs = {name: flat.inputs[name] for name in [*params, *buffers, *data]}
    functions = [FunctionSpec("evaluate", inputs, {}, [outputs])]
    if gradients:
        functions.append(FunctionSpec("evaluate_gradients", inputs, cotangents, [outputs, gradients]))
    if train is not None and train[0].external is None:
        layout, train_inputs, train_returns = train
        if backend.supports_autograd:  # the backend's autograd gives the gradients; the update is ours
            update_inputs = {**{name: flat.inputs[name] for name in params}, **train_inputs}
            functions.append(FunctionSpec(layout.function, update_inputs, {}, [train_returns]))
        else:
            functions.append(FunctionSpec(layout.function, {**inputs, **train_inputs}, {}, [{**outputs, **train_returns}]))
    header = (
        f"Generated by Mithril for {type(model).__name__} on {type(backend).__name__} ({backend.dtype.value}).\n"
        f"{len(graph.nodes)} primitive calls; parameters: {', '.join(params) or 'none'}."
    )
    state_names = set(params) | (set(train[1]) if train is not None else set())
    program = backend.generate_program(graph, functions, param_names=state_names, header=header)
    log.stage("codegen", f"{len(program.source.splitlines())} lines of {backend.codegen} for {[f.name for f in functions]}")
    if file_path is not None:
        if not isinstance(file_path, (str, os.PathLike)):
            raise ArgumentError(f"ml.compile: file_path must be a path (str or os.PathLike), got {type(file_path).__name__}")
        write_file_atomically(file_path, program.source, where=f"ml.compile(file_path={str(file_path)!r})", error=ArgumentError)
    index_checks = find_index_checks(graph, {**flat.inputs}, set(data) | set(buffers))
    physical = PhysicalModel(
        backend=backend,
        index_checks=index_checks,
        program=program,
        params={name: flat.inputs[name] for name in params},
        buffers={name: flat.inputs[name] for name in buffers},
        data={name: flat.inputs[name] for name in data},
        outputs=outputs,
        buffer_updates=buffer_updates,
        paths={name: flat.paths.get(name, name) for name in inputs},
        differentiable_outputs=list(cotangents) if gradients else [k for k, v in outputs.items() if v.kind == "float" and k not in state_outputs.values()],
        jit=backend.jit_by_default if jit is None else jit,
        inference=inference,
        fan_in={name: fan for name, fan in _bias_fan_in(graph).items() if name in params},
        model=model,
        primitive_count=len(graph.nodes),
        compile_seconds=time.perf_counter() - started,
        file_path=str(file_path) if file_path is not None else None,
        plan=plan,
        jit_options=jit_options,
        verbose=verbose,
        train=None if train is None else (train[0], loss_shape),
        precision=(str(precision), compute) if compute is not None else None,
        discarded_keys=discarded,
        input_groups=_input_groups(model, set(inputs)),
    )
    jitted = will_jit and backend.supports_autograd
    log.stage("jit", f"{type(backend).__name__}.jit({', '.join(f'{k}={v!r}' for k, v in jit_options.items())}) wrapped; traced and compiled on the first evaluate" if jitted else "none (the generated code runs as is)")
    log.shapes(physical.shapes)
    return physical


def _reoptimise(graph: Graph, backend: Backend[Any], passes: Mapping[str, bool], *groups: dict[str, Value]) -> None:
    """Constant folding, CSE and pruning again after nodes joined the graph (the backward pass, the training
    step). Every group of named values (outputs, gradients, the step's results) is kept, and updated in
    place where CSE merged one of its values into a twin."""
    if passes["constant_folding"]:
        fold_constants(graph, backend.evaluate_constant)
    every = {f"{i}\0{k}": v for i, group in enumerate(groups) for k, v in group.items()}
    if passes["cse"]:
        eliminate_common_subexpressions(graph, every)
    for i, group in enumerate(groups):
        group.update({k: every[f"{i}\0{k}"] for k in group})
    prune(graph, every.values())


_PRECISIONS = {"float32": None, "32": None, "bf16-mixed": Dtype.bfloat16, "fp16-mixed": Dtype.float16}


def _mixed_precision(backend: Backend[Any], precision: Any) -> Dtype | None:
    """The compute dtype ``precision=`` asks for (``None``: the backend dtype), after checking it fits."""
    if precision is None:
        return None
    if not isinstance(precision, str) or precision not in _PRECISIONS:
        raise ArgumentError(f"ml.compile(precision={precision!r}): accepted are {', '.join(map(repr, _PRECISIONS))} or None")
    compute = _PRECISIONS[precision]
    if compute is None:
        return None
    name = type(backend).__name__
    if backend.dtype is not Dtype.float32:
        raise ArgumentError(f"ml.compile(precision={precision!r}) keeps float32 parameters; {name} computes in {backend.dtype.value}: create it with dtype=ml.float32")
    if compute is Dtype.float16 and backend.backend_type != "torch":
        raise ArgumentError(f"ml.compile(precision='fp16-mixed') (float16 with dynamic loss scaling) runs on TorchBackend, not {name}; use 'bf16-mixed'")
    backend.mixed_precision(lambda params, data: {}, compute)  # the backends without it refuse here
    return compute


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


def _jit_options(backend: Backend[Any], will_jit: bool, options: Mapping[str, Any] | None, static_shapes: bool | None) -> dict[str, Any]:
    """``jit_options`` checked against the backend's JIT, with what ``static_shapes`` means for it."""
    options = dict(validation.mapping("ml.compile", "jit_options", options, what="a dict of JIT keyword arguments") or {})
    name = type(backend).__name__
    if static_shapes is not None:
        validation.boolean("ml.compile", "static_shapes", static_shapes)
        options.update(backend.shape_jit_options(static_shapes))
    if not options:
        return options
    accepted = backend.jit_option_names()
    if not accepted:
        raise ArgumentError(f"ml.compile(jit_options={options!r}): {name} has no JIT compiler (it runs the generated code directly); use a JAX, PyTorch or MLX backend")
    if not will_jit:
        raise ArgumentError(f"ml.compile(jit_options={options!r}) with jit=False: the options configure {name}'s JIT; pass jit=True")
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ArgumentError(f"ml.compile(jit_options=...): {unknown} are not options of {name}'s JIT; accepted: {', '.join(accepted)}")
    return options


def _optimizations(backend: Backend[Any], will_jit: bool, optimizations: Mapping[str, bool] | None) -> dict[str, bool]:
    """Which of Mithril's optional passes run; the JIT compiler's optimisations are checked, not toggled."""
    given = validation.mapping("ml.compile", "optimizations", optimizations, what="a dict of optimisation -> bool") or {}
    passes = {"constant_folding": True, "cse": True}
    jitted = will_jit and bool(backend.jit_option_names())
    for key, value in given.items():
        validation.boolean("ml.compile", f"optimizations[{key!r}]", value)
        if key in _PASSES:
            passes[_PASSES[key]] = value
        elif key in _JIT_OPTIMIZATIONS:
            what = _JIT_OPTIMIZATIONS[key]
            if key == "buffer_reuse" and backend.backend_type == "numpy" and value:
                continue  # NumPy's generated code writes into dead intermediates itself
            if not jitted:
                raise ArgumentError(
                    f"ml.compile(optimizations={{{key!r}: {value}}}): {what} is done by a JIT compiler (XLA, Inductor, "
                    f"MLX); {type(backend).__name__} runs {'without JIT' if not will_jit else 'no JIT compiler'} here"
                )
            if not value:
                raise ArgumentError(
                    f"ml.compile(optimizations={{{key!r}: False}}): {type(backend).__name__}'s JIT compiler always does "
                    f"{what}; Mithril cannot switch it off (compile with jit=False to run without the JIT)"
                )
        else:
            raise ArgumentError(
                f"ml.compile(optimizations=...): unknown optimisation {key!r}; Mithril's passes: constant_folding, cse; "
                f"the JIT compiler's: {', '.join(_JIT_OPTIMIZATIONS)}"
            )
    return passes


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


def _check_names(flat: FlatModel, shapes: Mapping[str, Any], data: set[str], trainable: set[str], constants: Mapping[str, Any], discard: set[str]) -> None:
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
            raise KeyError_(
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
            raise KeyError_(f"ml.compile: {sorted(overlap)} are in both {first} and {second}; the sets must be disjoint")


def _apply_constants(flat: FlatModel, constants: Mapping[str, Any]) -> None:
    for name, value in constants.items():
        target = flat.inputs.pop(name)
        array, shape = as_constant(value)
        try:
            unify(target.shape, shape)
        except ShapeMismatch as exc:
            raise ShapeError(f"ml.compile(constant_keys): {name!r} expects shape {target.shape!r}, got {list(np.shape(array))} ({exc})") from None
        target.const = array
        if target.kind is None:
            target.set_kind(constant_kind(array))


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
            raise ShapeError(f"ml.compile(shapes): {name!r} has shape {value.shape!r}, which does not match {list(template)} ({exc})") from None
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
