"""Flat graph -> C source: one entry point per function (``evaluate``, ``evaluate_gradients``), each
taking a struct of array pointers. Intermediates live in one workspace laid out at compile time
(liveness-based reuse); outputs are written straight into the caller's arrays.

The generated code has no global or static mutable state: constants are ``static const`` arrays and
everything else lives in the caller's struct, its workspace or locals, so one library can serve many
models and threads at once.

Each function goes through named passes, each taking and returning plain data:

1. :func:`~mithril_backend_c.layout.lay_out_fields`: the argument struct (:class:`~.layout.FieldLayout`);
2. :func:`~mithril_backend_c.fusion.plan`: the nodes grouped into units;
3. :func:`~mithril_backend_c.liveness.last_uses`: the last reader of every stored value;
4. :func:`~mithril_backend_c.emission.emit_function`: each unit's kernel and what it stores
   (:class:`~.emission.EmittedFunction`);
5. :func:`~mithril_backend_c.allocation.allocate`: the workspace offsets (:class:`~.allocation.Allocation`);
6. :mod:`~mithril_backend_c.partitioning`: the checks of a partitioned function (``options.partitioned``);

then the entry point's body is assembled (:func:`function_body`) into an :class:`~.csource.Entry` of the
:class:`~.csource.CSource`.

Example of a generated entry point (``Add`` of two vectors)::

    typedef struct {
        const void *in_left;   /* data 'left': float32[16] */
        const void *in_right;  /* data 'right': float32[16] */
        void *out_output;      /* output 'output': float32[16] */
        void *workspace;       /* NULL, or mithril_evaluate_workspace_size() bytes */
        uint64_t seed;         /* random primitives draw from (seed, node) */
        int64_t *error;        /* NULL, or int64_t[3]: {check site, bad value, position} on MT_ERR_INDEX */
    } mithril_evaluate_args;
    int mithril_evaluate(const mithril_evaluate_args *a, int nt);  /* 0, MT_ERR_ALLOC or MT_ERR_INDEX */

Every user-controlled string (keys, block paths, the header) reaches the source only through
:mod:`mithril.extend.escape` (``c_identifier`` for field names, ``c_comment`` for comments,
``c_string_literal`` for strings). Data-dependent indices (``embedding``, class targets of
``cross_entropy``, ``gather`` and their gradients) are checked before use (:meth:`Ctx.check_indices`):
an index outside ``[0, n)`` makes the function return ``MT_ERR_INDEX`` with the site, the value and its
position in ``a->error``, having read and written nothing out of bounds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from mithril.errors import ArgumentError, UnsupportedPrimitiveError
from mithril.extend import Node, Value, escape, live_nodes

from . import partitioning
from .allocation import Allocation, allocate
from .context import Ctx
from .csource import CFunction, CSource, Entry, Kernel, constant_array
from .emission import EmittedFunction, emit_function
from .emitters import emitter_table
from .fusion import Unit, plan
from .layout import FieldLayout, lay_out_fields, static_shape, value_dtypes
from .liveness import last_uses
from .options import SourceOptions
from .quantize import format_of, reads_quantized

__all__ = ["function_body", "generate_c", "generate_source"]


def generate_c(nodes: Sequence[Node], functions: Sequence[Any], options: SourceOptions) -> tuple[str, list[CFunction]]:
    """C source (one translation unit, with the ``#include`` lines ``options.includes`` names) and the
    entry points' layouts: :func:`generate_source`'s code as one text.

    >>> text, (layout,) = generate_c(graph.nodes, [fn], SourceOptions(header="Add"))    # doctest: +SKIP
    >>> layout.symbol, "mithril_evaluate(" in text           # doctest: +SKIP
    ('mithril_evaluate', True)
    """
    source, entry_points = generate_source(nodes, functions, options)
    return source.text(options.includes), entry_points


def generate_source(
    nodes: Sequence[Node], functions: Sequence[Any], options: SourceOptions
) -> tuple[CSource, list[CFunction]]:
    """The generated C (:class:`CSource`) of ``functions`` (:class:`~mithril.extend.FunctionSpec` s over the
    graph's ``nodes``) and the entry points' layouts.

    Every unit (a node, or a fused group) becomes a call of a *kernel* (:mod:`~mithril_backend_c.emission`);
    repeated layers share one kernel each. A partitioned function (``options.partitioned``) raises
    :class:`~mithril_backend_c.partitioning.NotPartitionable` when some node cannot be split into parts,
    or when the nodes make more than one unit.

    >>> source, layouts = generate_source(graph.nodes, [fn], SourceOptions())   # doctest: +SKIP
    >>> [k.calls for k in source.kernels.values()]               # doctest: +SKIP
    [12, 12, 1]
    """
    all_values: list[Value] = []
    for fn in functions:
        all_values += [*fn.inputs.values(), *fn.cotangents.values()]
        all_values += [v for group in fn.returns for v in group.values()]
    dtypes = value_dtypes(nodes, all_values, options.dtype)
    for fn in functions:
        for key, value in fn.inputs.items():
            if key in options.quantized:  # the blocks' bytes (the emitters read the logical shape)
                dtypes[value.id] = np.dtype(np.uint8)
    if options.emitters is None:
        options = replace(options, emitters=emitter_table())
    source = CSource(header=[f"/* {escape.c_comment(line)} */" for line in options.header.splitlines()])
    constant_names: dict[int, str] = {}  # value id -> the name of its array, across the functions
    entry_points = []
    for fn in functions:
        entry, emitted = _generate_function(nodes, fn, options, dtypes, source.kernels, constant_names)
        _add_entry(source, entry, emitted)
        entry_points.append(entry.function)
    return source, entry_points


def _generate_function(
    nodes: Sequence[Node],
    fn: Any,
    options: SourceOptions,
    dtypes: dict[int, np.dtype],
    kernels: Mapping[str, Kernel],
    constant_names: dict[int, str],
) -> tuple[Entry, EmittedFunction]:
    """The passes for one function: its entry point, and its code (for the kernels and constants it adds
    to the library); ``kernels``: the library's so far. ``constant_names`` is extended with the constants
    it names."""
    emitters = options.emitters
    assert emitters is not None
    layout = lay_out_fields(fn, options.param_names, dtypes, options.quantized)
    targets = [v for group in fn.returns for v in group.values()]
    live = live_nodes(nodes, targets)
    missing = sorted({n.spec.name for n in live if n.spec.name not in emitters})
    if missing:
        raise UnsupportedPrimitiveError(f"CBackend has no C emitter for {missing}")
    _check_quantized_readers(live, fn, options)
    returned = {v.id for v in targets}
    quantized = {v.id: options.quantized[k] for k, v in fn.inputs.items() if k in options.quantized}
    ctx = Ctx(options.dtype, dtypes, max_parts=options.max_parts, partitioned=options.partitioned, quantized=quantized)
    units = plan(live, returned, ctx, emitters) if options.fuse else [Unit([n]) for n in live]
    if options.partitioned:
        partitioning.check_units([u.label for u in units])
    emitted = emit_function(ctx, units, layout, fn.returns, options, constant_names, kernels)
    if options.partitioned:
        for unit in emitted.units:
            partitioning.check_region(unit.label, unit.one_region)
        partitioning.check_copies(emitted.copied)
    allocation = allocate([u.memory for u in emitted.units], last_uses(units, returned))
    constant_names.update(emitted.constant_names)
    function = CFunction(
        fn.name, f"{options.prefix}_{fn.name}", layout.inputs, layout.returns, allocation.size, emitted.random,
        emitted.checks,
    )  # fmt: skip
    body = function_body(layout, emitted, allocation)
    text = "\n".join(body)
    called = list(dict.fromkeys(u.kernel.name for u in emitted.units if u.kernel is not None))
    constants = [name for name in emitted.constants if name in text]
    entry = Entry(function, body, called, constants, options.partitioned, options.max_parts)
    return entry, emitted


def _check_quantized_readers(live: Sequence[Node], fn: Any, options: SourceOptions) -> None:
    """Every node reading a parameter passed quantized has a kernel for it (``quantize.reads_quantized``)."""
    if not options.quantized:
        return
    for key in options.quantized:
        format_of(options.quantized[key], "SourceOptions(quantized=...)")
        if key not in options.param_names:
            raise ArgumentError(f"SourceOptions(quantized=...): {key!r} is not a parameter of the model")
    ids = {v.id: k for k, v in fn.inputs.items() if k in options.quantized}
    for node in live:
        for name, value in node.inputs.items():
            if value is None or value.id not in ids:
                continue
            if not reads_quantized(node, name, static_shape(value, ids[value.id])):
                raise UnsupportedPrimitiveError(
                    f"CBackend: parameter {ids[value.id]!r} is passed quantized ({options.quantized[ids[value.id]]}), "
                    f"but {node.spec.name} at {node.path or '<root>'} reads it as {name!r}, which has no quantized "
                    "kernel (quantizable_params says which parameters can be quantized)"
                )


def _add_entry(source: CSource, entry: Entry, emitted: EmittedFunction) -> None:
    """Add an entry point to ``source``, with the kernels its code calls and the constants it reads."""
    for unit in emitted.units:
        if unit.kernel is not None:
            source.kernels.setdefault(unit.kernel.name, unit.kernel).calls += 1
    for name, (const, dtype) in emitted.constants.items():
        if name not in source.constants:
            source.constants[name] = constant_array(name, const, dtype)
    source.entries.append(entry)


def function_body(layout: FieldLayout, emitted: EmittedFunction, allocation: Allocation) -> list[str]:
    """The statements of an entry point: the input pointers, then each unit (the pointers to the
    constants it reads first and to what it stores, and its kernel's call), then the copies of the
    returns not computed in place; pointers nothing reads are left out."""
    body = layout.pointer_lines()
    for unit, scratch in zip(emitted.units, allocation.scratch, strict=True):
        body += unit.constants
        body += [storage.declaration(allocation.offsets) for storage in unit.stored]
        body.append(f"{{  /* {escape.c_comment(unit.label)} */")
        if unit.kernel is not None:
            body.append("    " + unit.call(scratch))
        body.append("}")
    return _drop_unused_pointers(body + emitted.copies)


_POINTER_DECLARATION = re.compile(r"^\s*[\w ]+ \*(v\d+) = [^;]*;$")
_VALUE_NAME = re.compile(r"\bv\d+\b")
_COMMENT = re.compile(r"/\*.*?\*/")


def _drop_unused_pointers(lines: list[str]) -> list[str]:
    """``lines`` (an entry point's body) without the ``T *vN = ...;`` declarations of pointers nothing
    reads (a constant folded into a literal, an alias nobody uses, an input whose values are not needed),
    so the code compiles without ``-Wunused-variable`` warnings. Repeated until none is left (dropping an
    alias can leave its source unread).

    >>> _drop_unused_pointers(["float *v1 = (float *)a->in_x;", "float *v2 = (float *)v1;", "f(v3);"])
    ['f(v3);']
    """
    while True:
        declared: dict[str, int] = {}
        read: set[str] = set()
        for i, line in enumerate(lines):
            names = _VALUE_NAME.findall(_COMMENT.sub("", line))
            match = _POINTER_DECLARATION.match(line)
            if match:
                declared[match.group(1)] = i
                names = names[1:]  # the declared name itself
            read.update(names)
        unused = {i for name, i in declared.items() if name not in read}
        if not unused:
            return lines
        lines = [line for i, line in enumerate(lines) if i not in unused]
