"""Turning the optimised flat graph into ggml compute graphs, and running them.

For every :class:`~mithril.extend.FunctionSpec` (``evaluate``; ``evaluate_gradients`` holds the
forward *and* the symbolic backward nodes) a :class:`_GraphFunction` owns:

- a metadata-only ggml context (``no_alloc``) holding the tensor headers and the graph, sized from the
  number of primitive calls (a few hundred bytes per tensor header, never a fixed guess);
- a constants buffer, allocated to the exact size of the folded constants the graph reads;
- a ``ggml_gallocr`` compute buffer, sized by ggml's allocator from the static shapes (with memory reuse
  between tensors whose lifetimes do not overlap);
- a CPU backend computing with the requested thread count.

Nothing is shared between compiled models. Tensors are stored in ggml's layout: a row-major shape
``[a, b, c]`` is ``ne = (c, b, a)`` (``ne[0]`` is the fastest dim). Floats are F32, ints I32, and bools F32
holding 0/1 (so masks feed straight into arithmetic); outputs are converted back at the boundary.

Never aborting: ggml asserts (and so kills the process) on tensors with a zero-size dimension and on
``ggml_get_rows`` indices out of range. A function whose graph holds a zero-size tensor is therefore
computed by the C backend's generated code for the whole function (:class:`_ViaC`, same results, empty
arrays where NumPy gives them); indices reach native ops only through a checking kernel, and C kernels
report errors through their slots (see :mod:`~mithril_backend_ggml._ckernels`), raised as Mithril errors
after the compute.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from mithril.errors import ArgumentError, ShapeError, UnsupportedPrimitiveError
from mithril.extend import escape, live_nodes
from mithril_backend_c import kernels

from ._builder import Builder, T
from ._ckernels import CKernels, c_emitters
from ._lib import load_ggml
from .ops import backend_threads, build_fused, build_node

__all__ = ["GGMLProgram"]

_TENSORS_PER_NODE = 24  # upper bound of ggml ops (and shape templates) one primitive's builder creates


def _static_shape(value: Any, where: str) -> tuple[int, ...]:
    shape = value.shape.static()
    if shape is None:
        label = value.name or f"%{value.id}"
        raise ShapeError(
            f"GGMLBackend needs static shapes: {label!r} ({where}) has shape {value.shape!r}; "
            "give every input shape to ml.compile(shapes=...)"
        )
    return tuple(int(d) for d in shape)


class _Values:
    """The built tensor of every value of a graph function; a folded constant is built on first use."""

    def __init__(self, b: Builder) -> None:
        self.b = b
        self.built: dict[int, T] = {}

    def __setitem__(self, value_id: int, t: T) -> None:
        self.built[value_id] = t

    def __call__(self, value: Any) -> T:
        values = self.built
        value = value.find() if value.id not in values else value
        if value.id in values:
            return values[value.id]
        if value.is_constant and value.producer is None:
            kind = value.kind or ("float" if isinstance(value.const, float) else "int")
            const = values[value.id] = self.b.const(value.const, kind)
            return const
        raise KeyError(f"GGMLBackend: value {value!r} is used before it is computed")


class _GraphFunction:
    """One ggml graph (with its memory) computing one FunctionSpec."""

    def __init__(self, program: GGMLProgram, graph: Any, fn: Any, param_names: set[str]) -> None:
        ggml = load_ggml()
        self.ggml = ggml
        self.name = fn.name
        self.program_backend = program.backend
        self.quantized = program.quantized
        self.returns_tuple = len(fn.returns) > 1
        targets = [v for group in fn.returns for v in group.values()]
        nodes = live_nodes(graph.nodes, targets)
        graph_size = self._init_contexts(fn, nodes, targets)
        self.backend = ggml.ggml_backend_cpu_init()
        self.const_buffer = None
        self.galloc = None
        self._finalizer = weakref.finalize(self, _free, ggml, self.__dict__)
        b = Builder(program.backend, program.ckernels, self.ctx, self.const_ctx)
        b.input_names = {v.id: k for group in (fn.inputs, fn.cotangents) for k, v in group.items()}
        b.faithful = bool(program.quantized)
        self.callbacks = b.callbacks
        self.slots = b.slots
        self.input_names = b.input_names
        self.ckernels = program.ckernels
        self.custom_ops = b.custom_kinds
        self.random_slots = program.ckernels
        self.lines: list[str] = [f"def {fn.name}({'params, data, cotangents' if fn.cotangents else 'params, data'}):"]
        values = _Values(b)
        self.fn_inputs = dict(fn.inputs)
        self.inputs = self._declare_inputs(b, fn, param_names, values)
        self._build_nodes(b, nodes, targets, values)
        self.gf = self._declare_outputs(fn, values, graph_size)
        self.n_graph_nodes = ggml.ggml_graph_n_nodes(self.gf)
        self._allocate(b, fn)
        self.errors = b.errors
        self.lock = threading.Lock()

    def _init_contexts(self, fn: Any, nodes: Sequence[Any], targets: Sequence[Any]) -> int:
        """The metadata-only ggml contexts (tensor headers and graph; the constants' headers), sized from
        the number of primitive calls; returns the graph size."""
        ggml = self.ggml
        n_tensors = _TENSORS_PER_NODE * (len(nodes) + len(fn.inputs) + len(fn.cotangents)) + 64
        graph_size = max(64, 2 * n_tensors)
        mem = n_tensors * ggml.ggml_tensor_overhead() + ggml.ggml_graph_overhead_custom(graph_size, False)
        self.ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=True))
        n_consts = sum(1 for n in nodes for v in n.inputs.values() if v is not None and v.is_constant) + len(targets)
        self.const_ctx = ggml.ggml_init(
            ggml.ggml_init_params(mem_size=(n_consts + 1) * ggml.ggml_tensor_overhead(), mem_buffer=None, no_alloc=True)
        )
        return graph_size

    def _declare_inputs(
        self, b: Builder, fn: Any, param_names: set[str], values: _Values
    ) -> list[tuple[str, str, Any, tuple[int, ...], np.dtype]]:
        """An input tensor per input and cotangent: ``(params|data|cotangents, key, tensor, shape, dtype)``;
        a quantized parameter's is a 2-d tensor of its block type (``self.quantized``: key -> format)."""
        ggml = self.ggml
        inputs = []
        for source, group in (("input", fn.inputs), ("cotangent", fn.cotangents)):
            for name, value in group.items():
                kind = value.kind or "float"
                shape = _static_shape(value, f"{source} {name!r}")
                fmt = self.quantized.get(name) if source == "input" and name in param_names else None
                if fmt is None:
                    tensor = b.new(shape, kind)
                else:
                    block_type = ggml.GGML_TYPE_Q8_0 if fmt == "q8_0" else ggml.GGML_TYPE_Q4_0
                    tensor = ggml.ggml_new_tensor_2d(self.ctx, block_type, math.prod(shape[1:]), shape[0])
                ggml.ggml_set_input(tensor)
                ggml.ggml_set_name(tensor, name.encode("utf-8", "replace").replace(b"\0", b"?")[:63])
                values[value.id] = T(tensor, shape, kind)
                label = "cotangents" if source == "cotangent" else ("params" if name in param_names else "data")
                inputs.append((label, name, tensor, shape, np.dtype(np.int32 if kind == "int" else np.float32)))
                self.lines.append(f"    {_label(value)} = {label}[{name!r}]  # {list(shape)} {kind}")
        return inputs

    def _build_nodes(self, b: Builder, nodes: Sequence[Any], targets: Sequence[Any], values: _Values) -> None:
        """The ggml ops of every node, fused groups as one split C kernel where they can be."""
        for node in nodes:
            if node.spec.name != "lambda":  # a lambda's result shape is probed when it is built
                for value in node.outputs.values():
                    _static_shape(value, f"output of {node.path or node.spec.name}")

        def build_one(node: Any) -> None:
            args = {k: (None if v is None else values(v)) for k, v in node.inputs.items()}
            outs, how = build_node(b, node, args)
            for key, value in node.outputs.items():
                values[value.id] = outs[key]
            self._describe(node.spec.name, node.inputs, node.outputs.values(), how, node.path)

        quantized = {v.id for k, v in self.fn_inputs.items() if k in self.quantized}
        for unit in _units(nodes, targets):
            if not unit.fused or any(v.id in quantized for v in unit.inputs):  # a C kernel cannot read blocks
                for node in unit.nodes:
                    build_one(node)
                continue
            output = unit.stored[0]
            built = build_fused(b, unit.nodes, unit.inputs, output, values)
            if built is None:  # not expressible as one split C kernel: node by node
                for node in unit.nodes:
                    build_one(node)
                continue
            values[output.id] = built
            names = ", ".join(n.spec.name for n in unit.nodes)
            how = f"custom op (C kernel, fused, on {backend_threads(b)} threads)"
            self._describe(f"fused[{names}]", dict(enumerate(unit.inputs)), [output], how, unit.nodes[0].path)

    def _declare_outputs(self, fn: Any, values: _Values, graph_size: int) -> Any:
        """The graph computing every return: fresh tensors (never an input or a view), flagged so the
        allocator keeps them; constant returns are held on the host."""
        ggml = self.ggml
        self.outputs: list[list[tuple[str, Any, tuple[int, ...], str, np.ndarray | None]]] = []
        gf = ggml.ggml_new_graph_custom(self.ctx, graph_size, False)
        for group in fn.returns:
            entries: list[tuple[str, Any, tuple[int, ...], str, np.ndarray | None]] = []
            for key, value in group.items():
                kind = value.kind or "float"
                if value.is_constant and value.producer is None:
                    const = np.asarray(value.const)
                    entries.append((key, None, const.shape, kind, _host(const, kind)))
                    continue
                t = values(value)
                tensor = _materialised(ggml, t.tensor)
                if tensor is None:
                    tensor = ggml.ggml_cont(self.ctx, t.tensor)
                ggml.ggml_set_output(tensor)
                ggml.ggml_build_forward_expand(gf, tensor)
                entries.append((key, tensor, t.shape, kind, None))
                self.lines.append(f"    return[{key!r}] = {_label(value)}  # {list(t.shape)} {kind}")
            self.outputs.append(entries)
        return gf

    def _allocate(self, b: Builder, fn: Any) -> None:
        """Memory: the constants (exact size, filled now), then the compute buffer sized by ggml's
        allocator; inputs the graph never reads have none and are skipped when copying in."""
        ggml = self.ggml
        if b.constants:
            self.const_buffer = ggml.ggml_backend_alloc_ctx_tensors(self.const_ctx, self.backend)
            for tensor, array in b.constants:
                ggml.ggml_backend_tensor_set(tensor, array.ctypes.data_as(ctypes.c_void_p), 0, array.nbytes)
        # (the bindings declare ggml_backend_cpu_buffer_type's result as int, truncating the pointer:
        # ask the backend for its buffer type instead)
        self.galloc = ggml.ggml_gallocr_new(ggml.ggml_backend_get_default_buffer_type(self.backend))
        if not ggml.ggml_gallocr_alloc_graph(self.galloc, self.gf):
            raise kernels.NativeMemoryError(f"GGMLBackend: could not allocate the compute buffer of {fn.name}")
        self.buffer_bytes = ggml.ggml_gallocr_get_buffer_size(self.galloc, 0)
        self.inputs = [entry for entry in self.inputs if entry[2].contents.data]
        self.aliases = self._input_views()

    def _input_views(self) -> list[list[tuple[Any, int]]]:
        """Per input (as ``self.inputs``): the graph's views of it, ``(view tensor, byte offset)``. An input
        that is not quantized is read in place: its tensor, and these views, are pointed at the caller's array
        for each compute (nothing writes an input, so the array is only read)."""
        ggml = self.ggml
        gf = self.gf.contents
        graph = [ggml.ggml_graph_node(self.gf, i) for i in range(ggml.ggml_graph_n_nodes(self.gf))]
        graph += [gf.leafs[i] for i in range(gf.n_leafs)]
        views: dict[int, list[tuple[Any, int]]] = {}
        for tensor in graph:  # a view's view_src is the viewed tensor's root (ggml keeps no chains)
            source = tensor.contents.view_src
            if source:
                views.setdefault(ctypes.addressof(source.contents), []).append((tensor, int(tensor.contents.view_offs)))
        return [views.get(ctypes.addressof(entry[2].contents), []) for entry in self.inputs]

    def _describe(self, name: str, inputs: Mapping[Any, Any], outputs: Any, how: str, path: str) -> None:
        """One line of the readable listing (``pm.source``): ``results = primitive(inputs)  # ggml: how``."""
        shown = ", ".join(
            ("" if isinstance(k, int) else f"{k}=") + ("None" if v is None else _label(v)) for k, v in inputs.items()
        )
        results = ", ".join(_label(v) for v in outputs)
        comment = escape.python_comment(f"ggml: {how}" + ("  @ " + path if path else ""))
        self.lines.append(f"    {results} = {name}({shown})  # {comment}")

    def __call__(self, threads: int, *groups: Mapping[str, Any]) -> Any:
        ggml = self.ggml
        sources = dict(zip(("params", "data", "cotangents"), groups, strict=False))  # cotangents: gradient functions
        read = []  # the arrays the graph reads in place: alive until the compute is over
        with self.lock:
            for (label, name, tensor, shape, dtype), views in zip(self.inputs, self.aliases, strict=True):
                array = sources[label][name]
                if not (isinstance(array, np.ndarray) and array.dtype == dtype and array.flags.c_contiguous):
                    array = np.asarray(array, dtype=dtype, order="C")  # keeps 0-d arrays 0-d
                if array.shape != shape:
                    raise ShapeError(f"{self.name}: {label}[{name!r}] has shape {array.shape}, expected {shape}")
                fmt = self.quantized.get(name) if label == "params" else None
                if fmt is not None:  # quantized at every call, straight into the tensor (host memory)
                    rows = array.reshape(shape[0], -1)
                    kernels.quantizer()(fmt, rows, tensor.contents.data, threads)
                    continue
                read.append(array)
                address = array.ctypes.data
                tensor.contents.data = address
                for view, offset in views:
                    view.contents.data = address + offset
            ggml.ggml_backend_cpu_set_n_threads(self.backend, threads)
            self.errors.clear()
            if self.slots:
                self.ckernels.reset(self.slots)
            if self.random_slots.random_slots:
                self.random_slots.reseed(self.program_backend.rng)
            status = ggml.ggml_backend_graph_compute(self.backend, self.gf)
            if self.errors:
                raise self.errors[0]
            if self.slots:
                error = self.ckernels.error(self.slots, self.name, self.input_names)
                if error is not None:
                    raise error
            if status != 0:
                raise kernels.NativeError(
                    f"GGMLBackend: ggml_backend_graph_compute returned status {status} (expected 0) in {self.name}"
                )
            results = []
            for entries in self.outputs:
                out = {}
                for key, tensor, shape, kind, fixed in entries:
                    if fixed is not None:  # a constant output (no tensor)
                        out[key] = fixed.copy()
                        continue
                    array = np.empty(shape, np.int32 if kind == "int" else np.float32)
                    ggml.ggml_backend_tensor_get(tensor, array.ctypes.data, 0, array.nbytes)
                    out[key] = array != 0 if kind == "bool" else array
                results.append(out)
        return tuple(results) if self.returns_tuple else results[0]


def _units(nodes: Sequence[Any], targets: Sequence[Any]) -> list[Any]:
    """The nodes grouped for fusion as the C backend groups them (:func:`mithril_backend_c.kernels.plan_fusion`),
    keeping only groups with one result (a ggml custom op has one) whose values are all floats (ggml
    stores bools as floats 0/1, C kernels as bytes), each one group when planned on its own.

    A group's split kernel plans the group's nodes again, alone (``kernel_source(partitioned=True)``), and
    must find one group: the kernel is one loop whose parts never wait for each other. The plan is greedy
    in node order, so without the graph's other nodes it can group differently (a node reading two open
    groups joins one and closes the other); such a group is replaced by the groups its own plan makes."""
    emitters = c_emitters()

    def plan(members: Sequence[Any], returned: set[int]) -> list[kernels.FusionUnit]:
        return kernels.plan_fusion(members, returned, emitters=emitters, single_output=True)

    def split(unit: kernels.FusionUnit) -> list[kernels.FusionUnit]:
        if not unit.fused:
            return [unit]
        values = [*unit.inputs, *(v for n in unit.nodes for v in n.outputs.values())]
        if not all((v.kind or "float") == "float" for v in values):
            return [kernels.FusionUnit([node]) for node in unit.nodes]
        alone = plan(unit.nodes, {v.id for v in unit.stored})
        if len(alone) == 1:
            return [unit]
        return [kernel for part in alone for kernel in split(part)]  # each part has fewer nodes: ends

    return [kernel for unit in plan(nodes, {v.id for v in targets}) for kernel in split(unit)]


def _materialised(ggml: Any, tensor: Any) -> Any:
    """The computed tensor holding an output's bytes in row-major order: the tensor itself, or the source
    of a reshape view of one (same bytes, so no copy and no view node); ``None`` when a copy is needed (a
    graph input, a constant, a strided view)."""
    while tensor.contents.op == ggml.GGML_OP_RESHAPE and tensor.contents.view_src:
        tensor = tensor.contents.src[0]
    t = tensor.contents
    if t.view_src or t.op == ggml.GGML_OP_NONE or t.flags & ggml.GGML_TENSOR_FLAG_INPUT:
        return None
    return tensor


def _label(value: Any) -> str:
    """A value's name in the readable listing (``pm.source``): an inert identifier or literal."""
    if value.is_constant and value.producer is None and np.ndim(value.const) == 0:
        return repr(value.const.item() if isinstance(value.const, np.ndarray) else value.const)
    return escape.python_identifier(value.name) if value.name else f"t{value.id}"


def _host(array: np.ndarray, kind: str) -> np.ndarray:
    if kind == "bool":
        return array.astype(bool)
    return array.astype(np.int32 if kind == "int" else np.float32)


def _zero_size(graph: Any, fn: Any) -> str | None:
    """A description of the first value of ``fn``'s graph with a zero-size dimension, or ``None``."""
    targets = [v for group in fn.returns for v in group.values()]
    values = [*fn.inputs.items(), *fn.cotangents.items()]
    values += [
        (f"{n.path or n.spec.name}.{k}", v) for n in live_nodes(graph.nodes, targets) for k, v in n.outputs.items()
    ]
    values += [(k, v) for group in fn.returns for k, v in group.items()]
    for label, value in values:
        shape = value.shape.static()
        if shape is not None and 0 in tuple(shape):
            return f"{label!r} with shape {list(shape)}"
    return None


class _ViaC:
    """A function whose graph holds a zero-size tensor, computed by the C backend's generated code for
    the whole function (ggml asserts on empty tensors, which would abort the process). Same calling
    convention and boundary dtypes as a ggml graph (ints come back as int32)."""

    def __init__(self, program: GGMLProgram, graph: Any, fn: Any, param_names: set[str]) -> None:
        self.name = fn.name
        where = _zero_size(graph, fn)
        targets = [v for group in fn.returns for v in group.values()]
        missing = sorted({n.spec.name for n in live_nodes(graph.nodes, targets) if n.spec.name not in c_emitters()})
        if missing:
            raise UnsupportedPrimitiveError(
                f"GGMLBackend: {fn.name} has a zero-size tensor ({where}); ggml cannot compute empty tensors, so such "
                f"graphs run as the C backend's generated code, which has no kernel for {missing}. Expected every "
                "dimension to be at least 1"
            )
        options = kernels.SourceOptions(
            param_names=frozenset(param_names), header=f"GGMLBackend {fn.name}, zero-size tensor {where}",
            max_parts=int(getattr(program.backend, "threads", 1)), emitters=c_emitters(),
        )  # fmt: skip
        source, (layout,) = kernels.generate_c(graph.nodes, [fn], options)
        self._call = kernels.load_functions(kernels.build_library(source), [layout], program.backend)[layout.name]
        self.n_graph_nodes = 0
        self.buffer_bytes = 0
        self.custom_ops: list[tuple[str, str]] = []
        held = escape.python_comment(str(where))
        self.lines = [f"# {fn.name}: the C backend's generated code (the graph holds {held})"]

    def __call__(self, threads: int, *groups: Mapping[str, Any]) -> Any:
        result = self._call(*groups)
        for out in result if isinstance(result, tuple) else (result,):
            for key, array in out.items():
                if array.dtype.kind in "iu":
                    out[key] = array.astype(np.int32)
        return result


def _quantized_params(
    graph: Any, functions: Sequence[Any], param_names: set[str], quantize: str | None
) -> dict[str, str]:
    """Parameter key -> block format of the weights ``quantize`` stores quantized (the C backend's rule,
    :func:`~mithril_backend_c.kernels.quantizable_params`, so an exported program quantizes the same ones)."""
    if quantize is None:
        return {}
    if quantize not in kernels.FORMATS:
        raise ArgumentError(f"GGMLBackend: unknown quantization {quantize!r}; accepted: {', '.join(kernels.FORMATS)}")
    trained = [fn.name for fn in functions if fn.cotangents or fn.name != "evaluate"]
    if trained:
        raise ArgumentError(f"GGMLBackend: quantized weights are for inference (inference=True), not {trained}")
    params = {k: v for fn in functions for k, v in fn.inputs.items() if k in param_names}
    return dict.fromkeys(kernels.quantizable_params(graph.nodes, params), quantize)


def _free(ggml: Any, state: dict[str, Any]) -> None:
    if state.get("galloc"):
        ggml.ggml_gallocr_free(state["galloc"])
    if state.get("const_buffer"):
        ggml.ggml_backend_buffer_free(state["const_buffer"])
    if state.get("backend"):
        ggml.ggml_backend_free(state["backend"])
    for key in ("ctx", "const_ctx"):
        if state.get(key):
            ggml.ggml_free(state[key])


class GGMLProgram:
    """The compiled program: ``source`` describes the ggml graphs; ``load`` returns the callables."""

    def __init__(
        self,
        backend: Any,
        graph: Any,
        functions: Sequence[Any],
        *,
        param_names: set[str],
        header: str,
        quantize: str | None = None,
    ) -> None:
        self.backend = backend
        self.quantized = _quantized_params(graph, functions, param_names, quantize)
        self.ckernels = CKernels(backend.threads)  # the C kernels of custom ops, compiled once for all functions
        self.functions: dict[str, Any] = {}
        for fn in functions:
            empty = _zero_size(graph, fn)
            maker = _GraphFunction if empty is None else _ViaC
            self.functions[fn.name] = maker(self, graph, fn, param_names)
        self.ckernels.link()
        lines = [f"# {escape.python_comment(line)}" for line in header.splitlines()]
        for f in self.functions.values():
            if isinstance(f, _ViaC):
                lines.append(
                    f"# {f.name!r}: generated C (the graph holds a zero-size tensor, which ggml cannot compute)"
                )
                continue
            lines.append(
                f"# ggml graph {f.name!r}: {f.n_graph_nodes} ggml nodes, "
                f"compute buffer {f.buffer_bytes / 2**20:.2f} MiB"
            )
        lines.append("")
        for f in self.functions.values():
            lines.extend(f.lines)
            lines.append("")
        self.source = "\n".join(lines)

    def load(self, filename: str = "<mithril-ggml>") -> dict[str, Any]:
        backend = self.backend

        def bind(f: _GraphFunction) -> Any:
            def run(*groups: Mapping[str, Any]) -> Any:
                return f(backend.threads, *groups)

            run.__name__ = f.name
            return run

        return {name: bind(f) for name, f in self.functions.items()}
