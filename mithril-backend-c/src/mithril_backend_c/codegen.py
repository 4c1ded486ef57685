"""Flat graph -> C source: one entry point per function (``evaluate``, ``evaluate_gradients``), each
taking a struct of array pointers. Intermediates live in one workspace laid out at compile time
(liveness-based reuse); outputs are written straight into the caller's arrays.

The generated code has no global or static mutable state: constants are ``static const`` arrays and
everything else lives in the caller's struct, its workspace or locals, so one library can serve many
models and threads at once.

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
:mod:`mithril.compiler.codegen.escape` (``c_identifier`` for field names, ``c_comment`` for comments,
``c_string_literal`` for strings). Data-dependent indices (``embedding``, class targets of
``cross_entropy``, ``gather`` and their gradients) are checked before use (:meth:`Ctx.check_indices`):
an index outside ``[0, n)`` makes the function return ``MT_ERR_INDEX`` with the site, the value and its
position in ``a->error``, having read and written nothing out of bounds.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mithril.compiler.codegen.escape import c_comment, c_identifier, c_string_literal
from mithril.compiler.graph import Graph, Node, Value
from mithril.compiler.passes.pruning import live_nodes
from mithril.errors import DtypeError, MithrilError, ShapeError, UnsupportedPrimitiveError
from mithril.types import Dtype

from .context import ALIAS_PRIMITIVES, C_TYPES, PAR_THRESHOLD, Ctx, Emitter, IndexSite, KernelFrame, c_type, omp
from .emitters.fused import elementwise_group
from .emitters.nn import conv_forward
from .fusion import Unit, plan

__all__ = [
    "CFunction", "CField", "CSource", "Ctx", "Entry", "IndexSite", "Kernel", "KernelFrame", "TranslationUnit",
    "c_type", "entry_declarations", "omp", "generate_c", "generate_source", "ALIAS_PRIMITIVES", "PAR_THRESHOLD",
    "NotPartitionable", "MT_ERR_ALLOC", "MT_ERR_INDEX",
]  # fmt: skip

MT_ERR_ALLOC = 1
"""Return code of a generated function that could not allocate its workspace (``runtime.h``)."""
MT_ERR_INDEX = 2
"""Return code of a generated function that met an index outside its range (``runtime.h``)."""



class NotPartitionable(Exception):
    """``generate_c(partitioned=True)`` was asked for code that does not run as independent parts."""


@dataclass
class CField:
    """One pointer in an entry point's argument struct."""

    name: str  # C field name
    key: str  # Mithril key (input, cotangent, output or parameter name)
    role: str  # "param", "data", "cotangent", or "return<i>"
    shape: tuple[int, ...]
    dtype: np.dtype




@dataclass
class CFunction:
    """One generated entry point and its struct layout; ``checks[site]`` describes the index check that
    a return of ``MT_ERR_INDEX`` with ``error[0] == site`` comes from."""

    name: str  # "evaluate" / "evaluate_gradients"
    symbol: str
    inputs: list[CField]
    returns: list[list[CField]]
    workspace: int
    random: bool
    checks: list[IndexSite] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        """The prefix of the library's symbols (``symbol`` is ``<prefix>_<name>``)."""
        return self.symbol[: -len(self.name) - 1]




def value_dtypes(nodes: Sequence[Node], values: Sequence[Value], dtype: Dtype) -> dict[int, np.dtype]:
    """The NumPy dtype of every value: the kind's default, or an explicit ``dtype`` attribute
    (``cast``/``zeros``/``ones``/``full`` with an ``ml.Dtype``)."""
    default = {"float": np.dtype(dtype.value), "int": np.dtype(np.int64), "bool": np.dtype(np.bool_)}
    result: dict[int, np.dtype] = {}

    def assign(value: Value) -> None:
        if value.id in result:
            return
        explicit = None
        if value.producer is not None:
            attr = value.producer.attrs.get("dtype")
            if isinstance(attr, Dtype) and value.producer.spec.name in ("cast", "zeros", "ones", "full"):
                explicit = attr
        if explicit is not None:
            if explicit.value not in C_TYPES:
                raise DtypeError(f"CBackend cannot compute in {explicit.value} (at {value.producer.path or '<root>'})")
            result[value.id] = np.dtype(explicit.value)
            return
        kind = value.kind or "float"
        result[value.id] = default[kind]

    for value in values:
        assign(value)
    for node in nodes:
        for value in node.inputs.values():
            if value is not None:
                assign(value)
        for value in node.outputs.values():
            assign(value)
    return result


def _check_static(value: Value, key: str) -> tuple[int, ...]:
    shape = value.shape.static()
    if shape is None:
        where = value.producer.path if value.producer is not None and value.producer.path else "<root>"
        raise ShapeError(
            f"CBackend needs every shape at compile time, but {key!r} (at {where}) has shape {value.shape!r}; "
            "pass the input shapes to ml.compile(shapes=...)"
        )
    return tuple(shape)


def _constant_array(name: str, value: Value, dtype: np.dtype) -> tuple[str, str]:
    """``(definition, declaration)`` of a constant array: shared by the translation units of a library
    (hidden, read-only), declared ``extern`` in those that read it."""
    array = np.asarray(value.const).astype(dtype).ravel()
    ct = C_TYPES[dtype.name]
    count = max(array.size, 1)
    declaration = f"extern MT_HIDDEN const {ct} {name}[{count}];"
    if array.size == 0:
        return f"MT_HIDDEN const {ct} {name}[1] = {{0}};", declaration
    if dtype.kind == "f":
        items = [
            ("NAN" if math.isnan(x) else ("INFINITY" if x > 0 else "(-INFINITY)") if math.isinf(x) else float(x).hex())
            for x in array.tolist()
        ]
    else:
        items = [str(int(x)) for x in array.tolist()]
    body = ",".join(items)
    return f"MT_HIDDEN const {ct} {name}[{array.size}] = {{{body}}};", declaration


INCLUDES = (
    "#include <float.h>",
    "#include <math.h>",
    "#include <stdint.h>",
    "#include <stdlib.h>",
    "#include <string.h>",
    '#include "runtime.h"',
)
"""The ``#include`` lines every translation unit starts with."""

PART_BYTES = 8 << 10
"""About this many bytes of kernel definitions go into one translation unit of :meth:`CSource.units`
(small enough that the kernels of a model spread over the cores; each unit also parses the headers)."""
MAX_KERNEL_PARTS = 64
"""At most this many translation units of kernels."""


@dataclass(frozen=True)
class TranslationUnit:
    """One independently compiled part of a library: ``label`` says what it holds (for progress and
    errors), ``optimize`` whether it gets the full optimisation flags (kernels, constants) or is compiled
    without optimisation (entry points: only pointer arithmetic and kernel calls, whose code gains nothing
    from ``-O3`` but takes most of the compile time at it).

    >>> TranslationUnit("kernels 1/2", "int f(void) { return 0; }").optimize
    True
    """

    label: str
    text: str
    optimize: bool = True


@dataclass
class Kernel:
    """One distinct generated kernel: ``name`` is ``<prefix>_k<16 hex digits of the SHA-256 of its
    text>``, so every unit that computes the same thing (primitive, static shapes, dtypes, attributes,
    folded literals) calls the same function; ``label`` names its primitives (no paths), ``calls`` counts
    its call sites."""

    name: str
    definition: str
    prototype: str
    label: str
    calls: int = 0


@dataclass
class Entry:
    """One entry point: its C symbol, its text (argument struct, workspace size, check-site names,
    function) and the kernels and constants it refers to."""

    symbol: str
    text: str
    kernels: list[str]
    constants: list[str]


@dataclass
class CSource:
    """Generated C: constants, the distinct kernels and the entry points that call them.

    :meth:`text` is one translation unit (what users read, ``ml.compile(file_path=...)`` writes and an
    export inlines); :meth:`units` splits the same code into independent translation units (kernels
    grouped by their hash, so that a changed model changes few groups; each entry point; the
    constants), which the toolchain compiles in parallel and caches one by one.

    >>> source, _ = generate_source(graph, functions, param_names=set(), header="", dtype=Dtype.float32,
    ...                             emitters=emitters)   # doctest: +SKIP
    >>> len(source.kernels) < len(graph.nodes), len(source.units()) >= 2   # doctest: +SKIP
    (True, True)
    """

    header: list[str] = field(default_factory=list)
    constants: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (definition, declaration)
    kernels: dict[str, Kernel] = field(default_factory=dict)  # name -> kernel, in order of first use
    entries: list[Entry] = field(default_factory=list)

    def text(self) -> str:
        """All of it as one translation unit."""
        lines = [*self.header, *INCLUDES, ""]
        lines += [definition for definition, _ in self.constants.values()]
        for kernel in self.kernels.values():
            lines += ["", f"/* kernel: {kernel.label} ({kernel.calls} call site{'s' if kernel.calls != 1 else ''}) */"]
            lines.append(kernel.definition)
        lines.append("")
        lines += [entry.text for entry in self.entries]
        return "\n".join(lines)

    def kernel_parts(self, part_bytes: int = PART_BYTES) -> int:
        """How many translation units the kernels are split into: a power of two (so that a small change
        of the model rarely changes it) of about ``part_bytes`` each, at most :data:`MAX_KERNEL_PARTS`."""
        total = sum(len(k.definition) for k in self.kernels.values())
        parts = 1
        while parts < MAX_KERNEL_PARTS and parts * part_bytes < total:
            parts *= 2
        return parts

    def units(self, part_bytes: int = PART_BYTES) -> list[TranslationUnit]:
        """Independent translation units of the same code: the kernels in :meth:`kernel_parts` groups, the
        constants, one unit per entry point. A kernel's group is chosen by its hash, so each unit depends
        only on its own content: rebuilding an edited model recompiles only the units that changed, and
        models sharing kernels (the same layers at another depth) share their kernel units.

        >>> [u.label for u in source.units()]   # doctest: +SKIP
        ['kernels 1/4', 'kernels 2/4', 'kernels 3/4', 'kernels 4/4', 'constants', 'entry mithril_evaluate']
        """
        count = self.kernel_parts(part_bytes)
        groups: list[list[Kernel]] = [[] for _ in range(count)]
        for kernel in sorted(self.kernels.values(), key=lambda k: k.name):
            groups[int(kernel.name[-16:], 16) % count].append(kernel)
        units = []
        for i, group in enumerate(groups):
            if group:
                lines = [f"/* Mithril C backend: generated kernels, group {i + 1} of {count} */", *INCLUDES, ""]
                text = "\n".join(lines + [k.definition for k in group]) + "\n"
                units.append(TranslationUnit(f"kernels {i + 1}/{count}", text))
        if self.constants:
            lines = ["/* Mithril C backend: constants */", *INCLUDES, ""]
            text = "\n".join(lines + [d for d, _ in self.constants.values()]) + "\n"
            units.append(TranslationUnit("constants", text))
        for entry in self.entries:
            lines = [*self.header, *INCLUDES, ""]
            lines += [self.constants[name][1] for name in entry.constants]
            lines += [self.kernels[name].prototype for name in entry.kernels]
            units.append(TranslationUnit(f"entry {entry.symbol}", "\n".join([*lines, "", entry.text]) + "\n", False))
        return units


def generate_c(graph: Graph, functions: Sequence[Any], **options: Any) -> tuple[str, list[CFunction]]:
    """C source (one translation unit, without the runtime, which it includes) and the entry points'
    layouts: :func:`generate_source`'s code as one text (the same keyword arguments).

    >>> text, (layout,) = generate_c(graph, [fn], param_names=set(), header="Add", dtype=Dtype.float32,
    ...                              emitters=emitters)    # doctest: +SKIP
    >>> layout.symbol, "mithril_evaluate(" in text           # doctest: +SKIP
    ('mithril_evaluate', True)
    """
    source, entry_points = generate_source(graph, functions, **options)
    return source.text(), entry_points


def generate_source(
    graph: Graph,
    functions: Sequence[Any],
    *,
    param_names: set[str],
    header: str,
    dtype: Dtype,
    emitters: Mapping[str, Emitter],
    prefix: str = "mithril",
    max_parts: int = 1,
    partitioned: bool = False,
    fuse: bool = True,
) -> tuple[CSource, list[CFunction]]:
    """The generated C (:class:`CSource`) and the entry points' layouts.

    Every unit (a node, or a fused group) becomes a call of a *kernel*: a function of the pointers it
    reads and writes (plus the thread count, its scratch space, the random seed and stream, the error
    array and the number of its first check site, as it needs them) whose body is the emitter's code.
    Kernels are named by the hash of their text, so repeated layers share one kernel each.

    ``max_parts``: the most threads a parallel region uses (scratch space is laid out for that many).
    ``partitioned``: entry points take ``(args, nt, part, nparts)`` and compute only their part (for
    callers with their own thread pool, e.g. ggml custom ops); raises :class:`NotPartitionable` when some
    node cannot be split that way, or when the nodes make more than one unit (no part waits for the others
    between two units). ``fuse``: fuse elementwise chains and convolution epilogues
    (:mod:`~mithril_backend_c.fusion`).

    >>> source, layouts = generate_source(graph, [fn], param_names=set(), header="", dtype=Dtype.float32,
    ...                                   emitters=emitters)   # doctest: +SKIP
    >>> [k.calls for k in source.kernels.values()]               # doctest: +SKIP
    [12, 12, 1]
    """
    all_values: list[Value] = []
    for fn in functions:
        all_values += [*fn.inputs.values(), *fn.cotangents.values()]
        all_values += [v for group in fn.returns for v in group.values()]
    dtypes = value_dtypes(graph.nodes, all_values, dtype)
    constants: dict[int, str] = {}
    source = CSource(header=[f"/* {c_comment(line)} */" for line in header.splitlines()])
    entry_points: list[CFunction] = []
    for fn in functions:
        layout = _generate_function(
            graph, fn, param_names, dtype, dtypes, constants, source, emitters, prefix, max_parts, partitioned, fuse
        )
        entry_points.append(layout)
    return source, entry_points


def entry_declarations(fn: CFunction, prefix: str) -> str:
    """The declarations of entry point ``fn`` that its callers see, in one text for the exported header
    (``model.h``) and for Python's ``cffi`` interface (:func:`~mithril_backend_c.toolchain.load_library`):
    the argument struct, the workspace size, the check-site description and the entry point.

    >>> print(entry_declarations(fn, "mithril").splitlines()[-1])   # doctest: +SKIP
    int mithril_evaluate(const mithril_evaluate_args *a, int nt);
    """
    symbol = f"{prefix}_{fn.name}"
    return "\n".join([
        struct_text(fn, prefix),
        f"size_t {symbol}_workspace_size(void);",
        f"const char *{symbol}_check_site(long site);",
        "/* returns MT_OK (0) on success, else MT_ERR_ALLOC or MT_ERR_INDEX; nt: OpenMP threads */",
        f"int {symbol}(const {symbol}_args *a, int nt);",
    ])  # fmt: skip


def struct_text(fn: CFunction, prefix: str) -> str:
    """The ``typedef struct {...} <prefix>_<fn>_args;`` of an entry point (keys only inside comments)."""
    lines = ["typedef struct {"]
    for f in fn.inputs:
        lines.append(
            f"    const void *{f.name};  /* {c_comment(f'{f.role} {f.key!r}')}: {f.dtype.name}{list(f.shape)} */"
        )
    for group in fn.returns:
        for f in group:
            lines.append(
                f"    void *{f.name};  /* {c_comment(f'{f.role} {f.key!r}')}: {f.dtype.name}{list(f.shape)} */"
            )
    lines.append(f"    void *workspace;  /* NULL (allocated per call), or {prefix}_{fn.name}_workspace_size() bytes */")
    lines.append("    uint64_t seed;  /* random primitives draw from (seed, node) */")
    lines.append(
        "    int64_t *error;  /* NULL, or int64_t[3] set on MT_ERR_INDEX: {check site, bad index, flat position}; "
        f"{prefix}_{fn.name}_check_site(site) describes the site */"
    )
    lines.append(f"}} {prefix}_{fn.name}_args;")
    return "\n".join(lines)


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


def _check_site_function(fn: CFunction, prefix: str) -> list[str]:
    """``const char *<prefix>_<fn>_check_site(long site)``: a readable description of each index check."""
    lines = [f"const char *{prefix}_{fn.name}_check_site(long site) {{", "    switch (site) {"]
    for site, check in enumerate(fn.checks):
        text = check.describe() + (f" from input {check.key!r}" if check.key is not None else "")
        lines.append(f"    case {site}: return {c_string_literal(text)};")
    lines += ['    default: return "unknown check site";', "    }", "}"]
    return lines


def _kernel_call(
    ctx: Ctx,
    frame: KernelFrame,
    lines: list[str],
    label: str,
    scratch: int | None,
    stream: int,
    prefix: str,
    kernels: dict[str, Kernel],
) -> tuple[str, str]:
    """Register the kernel made of ``lines`` (emitted in ``frame``); its name and the statement calling
    it (``scratch``: the workspace offset of its scratch space; ``stream``: its random stream)."""
    checked = any("MT_FAIL_INDEX" in line for line in lines)
    params, args = ["int nt"], ["nt"]
    if frame.scratch:
        params.append("char *mt_scr")
        args.append(f"ws + {scratch}")
    if frame.random:
        params += ["uint64_t mt_seed", "uint64_t mt_salt"]
        args += ["a->seed", f"{stream}ULL"]
    if checked:
        params += ["int64_t *mt_error", "long mt_site0"]
        args += ["a->error", str(frame.site0)]
    if ctx.partitioned:
        params += ["long mt_part", "long mt_nparts"]
        args += ["mt_part", "mt_nparts"]
    params += [f"{ct} *p{i}" for i, (_, ct) in enumerate(frame.args)]
    args += [caller for caller, _ in frame.args]
    signature = f"({', '.join(params)})"
    body = ["    int mt_status = MT_OK;", "    (void)nt;", *("    " + line for line in lines)]
    if checked:
        body.append("mt_done:")
    body += ["    return mt_status;", "}"]
    text = "\n".join([signature + " {", *body])
    name = f"{prefix}_k{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    kernel = kernels.get(name)
    if kernel is None:
        kernel = kernels[name] = Kernel(name, f"MT_KERNEL int {name}{text}", f"MT_KERNEL int {name}{signature};", label)
    kernel.calls += 1
    call = f"{name}({', '.join(args)})"
    return name, f"if ((mt_status = {call}) != MT_OK) goto mt_done;" if checked else f"{call};"


def _generate_function(
    graph: Graph,
    fn: Any,
    param_names: set[str],
    dtype: Dtype,
    dtypes: dict[int, np.dtype],
    constants: dict[int, str],
    source: CSource,
    emitters: Mapping[str, Emitter],
    prefix: str,
    max_parts: int = 1,
    partitioned: bool = False,
    fuse: bool = True,
) -> CFunction:
    ctx = Ctx(dtype, dtypes, constants, max_parts=max_parts, partitioned=partitioned)
    used_fields: set[str] = set()
    used_kernels: dict[str, None] = {}  # in order of first call
    used_constants: dict[str, None] = {}

    def field_name(role_prefix: str, key: str) -> str:
        base = f"{role_prefix}_{c_identifier(key)}"
        name, i = base, 1
        while name in used_fields:
            name, i = f"{base}_{i}", i + 1
        used_fields.add(name)
        return name

    inputs: list[CField] = []
    body: list[str] = []
    for key, value in fn.inputs.items():
        role = "param" if key in param_names else "data"
        f = CField(field_name("in", key), key, role, _check_static(value, key), dtypes[value.id])
        inputs.append(f)
        ctx.input_keys.setdefault(value.id, key)
        if value.id not in ctx.names:
            ctx.names[value.id] = f"v{value.id}"
            body.append(f"{c_type(f.dtype)} *v{value.id} = ({c_type(f.dtype)} *)a->{f.name};")
    for key, value in fn.cotangents.items():
        f = CField(field_name("cot", key), key, "cotangent", _check_static(value, key), dtypes[value.id])
        inputs.append(f)
        if value.id not in ctx.names:
            ctx.names[value.id] = f"v{value.id}"
            body.append(f"{c_type(f.dtype)} *v{value.id} = ({c_type(f.dtype)} *)a->{f.name};")
    returns: list[list[CField]] = []
    direct: dict[int, CField] = {}  # value id -> the output field it is computed into
    for g, group in enumerate(fn.returns):
        role_prefix = ("out", "grad")[g] if g < 2 else f"ret{g}"
        fields = []
        for key, value in group.items():
            f = CField(
                field_name(role_prefix, key),
                key,
                f"return{g}" if g > 1 else ("output", "gradient")[g],
                _check_static(value, key),
                dtypes[value.id],
            )
            fields.append(f)
            producer = value.producer
            if (
                producer is not None
                and value.id not in direct
                and value.id not in ctx.names
                and producer.spec.name not in ALIAS_PRIMITIVES
            ):
                direct[value.id] = f
        returns.append(fields)

    targets = [v for group in fn.returns for v in group.values()]
    nodes = live_nodes(graph.nodes, targets)
    missing = sorted({n.spec.name for n in nodes if n.spec.name not in emitters})
    if missing:
        raise UnsupportedPrimitiveError(f"CBackend has no C emitter for {missing}")

    returned = {v.id for v in targets}
    units = plan(nodes, returned, ctx, emitters) if fuse else [Unit([n]) for n in nodes]
    if partitioned and len(units) > 1:
        # each unit is a loop split its own way (flat, by rows ...) and nothing makes a part wait for the
        # other parts between two loops: a part of the second would read values the first has not written
        raise NotPartitionable(f"{len(units)} units ({', '.join(u.label for u in units)}) run one after another")

    # liveness: the last unit index reading each storage root (aliases share their source's root)
    root: dict[int, int] = {}
    last_use: dict[int, float] = {}
    for index, unit in enumerate(units):
        for value in unit.inputs:
            r = root.get(value.id, value.id)
            last_use[r] = max(last_use.get(r, -1), index)
        node = unit.nodes[0]
        if not unit.fused and node.spec.name in ALIAS_PRIMITIVES:
            (source_value,) = [v for v in node.inputs.values() if v is not None][:1]
            root[node.output.id] = root.get(source_value.id, source_value.id)
        outputs = unit.stored if unit.fused else list(node.outputs.values())
        for value in outputs:
            r = root.get(value.id, value.id)
            if value.id in returned:
                last_use[r] = math.inf
            last_use.setdefault(r, index)

    def declare_constant(value: Value) -> None:
        # named by content: equal constants (each layer's epsilon, scale, ...) share one array
        array = np.ascontiguousarray(np.asarray(value.const).astype(dtypes[value.id]))
        name = f"{prefix}_c{hashlib.sha256(array.dtype.str.encode() + array.tobytes()).hexdigest()[:16]}"
        if name not in source.constants:
            source.constants[name] = _constant_array(name, value, dtypes[value.id])
        constants[value.id] = name
        use_constant(value)

    def use_constant(value: Value) -> None:
        name = constants[value.id]
        used_constants[name] = None
        ctx.names[value.id] = f"v{value.id}"
        ct = c_type(dtypes[value.id])
        body.append(f"{ct} *v{value.id} = ({ct} *){name};")

    release: dict[int, list[tuple[int, int]]] = {}  # unit index -> arena blocks free after it
    random_used = False
    for index, unit in enumerate(units):
        node = unit.nodes[-1]
        for value in unit.inputs:
            if value.id in ctx.names:
                continue
            if value.is_constant and value.producer is None:
                _check_static(value, value.name or f"constant %{value.id}")
                if value.id in constants:
                    use_constant(value)
                else:
                    declare_constant(value)
            else:
                raise ShapeError(
                    f"CBackend: value {value!r} read by {node.path or '<root>'} is not computed before use"
                )
        for member in unit.nodes:
            for key, value in member.outputs.items():
                _check_static(value, f"{member.path or member.spec.name}.{key}")
        stored = unit.stored if unit.fused else list(node.outputs.values())
        for value in stored:
            shape = ctx.shape(value)
            ct = c_type(dtypes[value.id])
            ctx.names[value.id] = f"v{value.id}"
            if not unit.fused and node.spec.name in ALIAS_PRIMITIVES:
                source_value = next(v for v in node.inputs.values() if v is not None)
                body.append(f"{ct} *v{value.id} = ({ct} *){ctx.p(source_value)};")
            elif value.id in direct:
                body.append(f"{ct} *v{value.id} = ({ct} *)a->{direct[value.id].name};")
            else:
                nbytes = math.prod(shape) * dtypes[value.id].itemsize
                offset = ctx.arena.alloc(nbytes)
                free_after = last_use.get(value.id, index)
                if free_after != math.inf:
                    release.setdefault(max(int(free_after), index), []).append((offset, nbytes))
                body.append(f"{ct} *v{value.id} = ({ct} *)(ws + {offset});")
        ctx.node = node
        ctx.salt = node.id
        ctx.regions = []
        random_used |= any(n.spec.random for n in unit.nodes)
        ctx.begin_kernel()
        try:
            if unit.fused:
                lines = (
                    conv_forward(ctx, unit.anchor, unit) if unit.anchor is not None else elementwise_group(ctx, unit)
                )
            else:
                lines = emitters[node.spec.name](ctx, node)
        except (ValueError, IndexError, TypeError, ZeroDivisionError) as exc:
            if isinstance(exc, MithrilError):
                raise
            shapes = {k: list(ctx.shape(v)) for k, v in node.inputs.items() if v is not None}
            raise ShapeError(
                f"the C code generator cannot handle {unit.label} (input shapes {shapes}, attributes "
                f"{dict(node.attrs)}): {exc}"
            ) from exc
        finally:
            frame = ctx.kernel
            ctx.kernel = None
        assert frame is not None
        if partitioned and (len(ctx.regions) != 1 or lines != ctx.regions[0]):
            raise NotPartitionable(f"{unit.label} does not run as independent parts")
        scratch = None
        if frame.scratch:
            scratch = ctx.arena.alloc(frame.scratch)
            ctx._scratch.append((scratch, frame.scratch))
        body.append(f"{{  /* {c_comment(unit.label)} */")
        if lines:
            label = ", ".join(n.spec.name for n in unit.nodes)
            name, call = _kernel_call(ctx, frame, lines, label, scratch, node.id, prefix, source.kernels)
            used_kernels[name] = None
            body.append("    " + call)
        body.append("}")
        ctx.end_node()
        # release storage whose last reader was this unit
        for offset, nbytes in release.pop(index, ()):
            ctx.arena.release(offset, nbytes)

    # returns that are not computed in place: copies (inputs, constants, aliases, repeated outputs)
    for group, fields in zip(fn.returns, returns):
        for (key, value), f in zip(group.items(), fields):
            if direct.get(value.id) is f:
                continue
            if value.id not in ctx.names:
                if value.is_constant:
                    if value.id in constants:
                        use_constant(value)
                    else:
                        declare_constant(value)
                else:
                    raise ShapeError(f"CBackend: output {key!r} is not computed by the graph")
            nbytes = math.prod(f.shape) * f.dtype.itemsize
            if nbytes and partitioned:
                raise NotPartitionable(f"output {key!r} would be a copy")
            if nbytes:
                body.append(f"memcpy(a->{f.name}, {ctx.p(value)}, {nbytes});")

    workspace = ctx.arena.top
    symbol = f"{prefix}_{fn.name}"
    layout = CFunction(fn.name, symbol, inputs, returns, workspace, random_used, list(ctx.checks))
    if partitioned:
        # every part runs this function on the same (caller-provided) workspace
        signature = f"int {symbol}(const {prefix}_{fn.name}_args *a, int nt, long mt_part, long mt_nparts) {{"
        prologue = [
            "    char *ws = (char *)a->workspace, *ws_own = NULL;",
            f"    if (ws == NULL && {workspace} > 0) return MT_ERR_ALLOC;",
            f"    if (mt_nparts > {ctx.max_parts}) {{",
            f"        if (mt_part >= {ctx.max_parts}) return 0;",
            f"        mt_nparts = {ctx.max_parts};",
            "    }",
        ]
    else:
        signature = f"int {symbol}(const {prefix}_{fn.name}_args *a, int nt) {{"
        prologue = [
            "    char *ws = (char *)a->workspace, *ws_own = NULL;",
            f"    if (ws == NULL && {workspace} > 0) {{",
            f"        ws = ws_own = (char *)malloc({workspace});",
            "        if (ws == NULL) return MT_ERR_ALLOC;",
            "    }",
            "    mt_blas_serial();",
        ]
    lines = [
        struct_text(layout, prefix),
        "",
        f"size_t {symbol}_workspace_size(void) {{ return {workspace}; }}",
        *_check_site_function(layout, prefix),
        "",
        signature,
        *prologue,
        "    int mt_status = MT_OK;",
        "    if (nt < 1) nt = 1;",
        "    (void)ws; (void)nt;",
    ]
    body = _drop_unused_pointers(body)
    text = "\n".join(body)
    used_constants = {name: None for name in used_constants if name in text}
    lines += ["    " + line for line in body]
    if layout.checks:
        lines.append("mt_done:")  # a failed index check jumps here, past the remaining nodes
    lines += ["    free(ws_own);", "    return mt_status;", "}", ""]
    source.entries.append(Entry(layout.symbol, "\n".join(lines), list(used_kernels), list(used_constants)))
    return layout
