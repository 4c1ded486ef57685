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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mithril.compiler.codegen.escape import c_comment, c_identifier, c_string_literal
from mithril.compiler.graph import Graph, Node, Value
from mithril.compiler.passes.pruning import live_nodes
from mithril.errors import DtypeError, MithrilError, ShapeError
from mithril.types import Dtype

__all__ = [
    "CFunction", "CField", "CSource", "Ctx", "Entry", "IndexSite", "Kernel", "KernelFrame", "TranslationUnit",
    "c_type", "entry_declarations", "omp", "generate_c", "generate_source", "ALIAS_PRIMITIVES", "PAR_THRESHOLD",
    "NotPartitionable", "MT_ERR_ALLOC", "MT_ERR_INDEX",
]  # fmt: skip

MT_ERR_ALLOC = 1
"""Return code of a generated function that could not allocate its workspace (``runtime.h``)."""
MT_ERR_INDEX = 2
"""Return code of a generated function that met an index outside its range (``runtime.h``)."""

C_TYPES = {
    "float32": "float",
    "float64": "double",
    "int64": "int64_t",
    "int32": "int32_t",
    "int16": "int16_t",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "bool": "uint8_t",
}
_C_TYPE_OF: dict[np.dtype, str] = {np.dtype(name): ct for name, ct in C_TYPES.items()}


def c_type(dtype: np.dtype) -> str:
    """The C type of a NumPy dtype (``C_TYPES`` looked up by dtype: ``dtype.name`` is slow in NumPy).

    >>> c_type(np.dtype("float32"))
    'float'
    """
    return _C_TYPE_OF.get(dtype) or C_TYPES[dtype.name]


def omp(directive: str) -> str:
    """An OpenMP directive as generated code writes it: ``MT_OMP("omp ...")`` (``runtime.h``), which is
    ``_Pragma`` under OpenMP and nothing without it, so the code compiles warning-free either way
    (``-Wall -Wextra`` warns of an unknown ``#pragma``).

    >>> omp("simd")
    'MT_OMP("omp simd")'
    """
    return f'MT_OMP("omp {directive}")'


ALIAS_PRIMITIVES = frozenset({"reshape", "flatten", "squeeze", "unsqueeze", "reshape_like"})
"""Primitives whose output is the input's memory read with another shape (no copy)."""
PAR_THRESHOLD = 1 << 16
"""Loops over at least this many elements get an OpenMP ``parallel for``."""
ALIGN = 64


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


@dataclass(frozen=True)
class IndexSite:
    """One index check of a generated function: ``primitive`` at ``path`` reads the ``operand`` input as
    indices into an axis of ``bound`` elements. ``value_id`` is the graph value holding the indices (or,
    through reshape-like aliases, the value whose memory they are: flat positions agree), ``key`` the
    function input it is, if any, and ``shape`` that value's shape (to turn a flat position into an index).

    >>> IndexSite("embedding", "wte", "input", 50, 3, "tokens", (2, 4)).describe()
    "embedding at wte: 'input' (valid: 0 <= index < 50)"
    """

    primitive: str
    path: str
    operand: str
    bound: int
    value_id: int
    key: str | None
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.primitive} at {self.path or '<root>'}: {self.operand!r} (valid: 0 <= index < {self.bound})"


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


def float_literal(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    text = repr(value)
    return f"({text})" if text.startswith("-") else text


def literal(value: Any, dtype: np.dtype) -> str:
    """A C literal for a Python/NumPy scalar stored as ``dtype``."""
    if dtype.kind == "f":
        return float_literal(float(value))
    if dtype.kind == "b":
        return "1" if bool(value) else "0"
    return f"INT64_C({int(value)})"


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides that read an array of ``shape`` broadcast to ``out_shape`` (0 on broadcast axes)."""
    own = contiguous_strides(shape)
    pad = len(out_shape) - len(shape)
    return tuple(0 if i < pad or (shape[i - pad] == 1 and n != 1) else own[i - pad] for i, n in enumerate(out_shape))


def view_layout(
    shape: Sequence[int], view: Callable[[np.ndarray], np.ndarray]
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``(offset, strides, shape)`` in elements of ``view(x)`` for a C-contiguous ``x`` of ``shape``:
    NumPy computes the layout of any basic-indexing / transpose / broadcast view for us.

    An index that selects one element (``x[()]`` of a 0-d ``x``, ``x[1, 2]`` of a 2-d one) gives a NumPy
    scalar, not a view: its offset is then read from an array holding each element's flat position.

    >>> view_layout((3, 4), lambda a: a[1])
    (4, (1,), (4,))
    >>> view_layout((3, 4), lambda a: a[1, 2])
    (6, (), ())
    """
    base = np.empty(tuple(shape), dtype=np.uint8)
    result = view(base)
    if not isinstance(result, np.ndarray):  # one element: a copy, its address says nothing
        positions = np.arange(base.size, dtype=np.int64).reshape(base.shape)
        return int(view(positions)), (), ()
    offset = result.__array_interface__["data"][0] - base.__array_interface__["data"][0] if result.size else 0
    return offset, tuple(result.strides), tuple(result.shape)


class _Arena:
    """First-fit allocator over the workspace (offsets known at compile time)."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []  # (offset, size), sorted
        self.top = 0

    def alloc(self, nbytes: int) -> int:
        nbytes = max(ALIGN, (nbytes + ALIGN - 1) // ALIGN * ALIGN)
        for i, (offset, size) in enumerate(self.free):
            if size >= nbytes:
                if size == nbytes:
                    del self.free[i]
                else:
                    self.free[i] = (offset + nbytes, size - nbytes)
                return offset
        if self.free and self.free[-1][0] + self.free[-1][1] == self.top:  # grow the last free block
            offset, _ = self.free.pop()
            self.top = offset + nbytes
            return offset
        offset, self.top = self.top, self.top + nbytes
        return offset

    def release(self, offset: int, nbytes: int) -> None:
        nbytes = max(ALIGN, (nbytes + ALIGN - 1) // ALIGN * ALIGN)
        self.free.append((offset, nbytes))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for off, size in self.free:
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((off, size))
        self.free = merged


@dataclass
class _Storage:
    var: str
    offset: int | None = None  # arena offset, None when not in the arena
    nbytes: int = 0
    last_use: float = -1


@dataclass
class KernelFrame:
    """What emitting one kernel used: its pointer parameters (value id -> ``p<i>``, and the caller's
    pointer and C type of each, in order), the scratch bytes it needs, whether it draws random numbers,
    and the number (in the entry point) of its first index check site."""

    site0: int
    params: dict[int, str] = field(default_factory=dict)
    args: list[tuple[str, str]] = field(default_factory=list)
    scratch: int = 0
    random: bool = False


class Ctx:
    """What an emitter sees: value names, shapes, C types, literals, scratch space and loop helpers."""

    def __init__(
        self,
        dtype: Dtype,
        value_dtypes: Mapping[int, np.dtype],
        constants: Mapping[int, str],
        *,
        max_parts: int = 1,
        partitioned: bool = False,
    ) -> None:
        self.dtype = np.dtype(dtype.value)
        self.max_parts = max(1, int(max_parts))  # most parts a parallel region is split into
        self.partitioned = partitioned  # the function runs one part (mt_part of mt_nparts) per call
        self.regions: list[list[str]] = []  # parallel regions emitted for the current node
        self.real = C_TYPES[dtype.value]
        self.sfx = "f32" if dtype is Dtype.float32 else "f64"
        self._value_dtypes = value_dtypes
        self._constants = constants
        self.names: dict[int, str] = {}
        self._counter = 0
        self.arena = _Arena()
        self._scratch: list[tuple[int, int]] = []
        self.node: Node | None = None
        self.salt = 0  # per-node stream of random primitives
        self.checks: list[IndexSite] = []  # index checks emitted so far (site = position in this list)
        self.input_keys: dict[int, str] = {}  # value id -> key of the function input it is
        self._shapes: dict[int, tuple[int, ...]] = {}  # value id -> static shape (asked for many times)
        self.kernel: KernelFrame | None = None  # the kernel being emitted (see :meth:`begin_kernel`)

    # -- values ------------------------------------------------------------------------------------
    def np_dtype(self, value: Value) -> np.dtype:
        return self._value_dtypes[value.id]

    def ct(self, value: Value) -> str:
        return c_type(self._value_dtypes[value.id])

    def shape(self, value: Value) -> tuple[int, ...]:
        shape = self._shapes.get(value.id)
        if shape is None:
            static = value.shape.static()
            assert static is not None
            shape = self._shapes[value.id] = tuple(static)
        return shape

    def size(self, value: Value) -> int:
        return math.prod(self.shape(value))

    def p(self, value: Value) -> str:
        """The C pointer variable holding ``value``: inside a kernel, its parameter (``p0``, ``p1``, ...
        in order of first use, so that the same computation on other values is the same text)."""
        frame = self.kernel
        if frame is None:
            return self.names[value.id]
        name = frame.params.get(value.id)
        if name is None:
            caller = self.names[value.id]  # a KeyError here: the value is not computed yet
            name = frame.params[value.id] = f"p{len(frame.params)}"
            frame.args.append((caller, self.ct(value)))
        return name

    def lit(self, value: Value | None) -> str | None:
        """A literal for a scalar constant (folded into expressions), else ``None``."""
        if value is None or not value.is_constant or value.producer is not None:
            return None
        const = np.asarray(value.const)
        if const.size != 1:
            return None
        return literal(const.reshape(()).item(), self.np_dtype(value))

    def elem(self, value: Value, index: str) -> str:
        lit = self.lit(value)
        return lit if lit is not None else f"{self.p(value)}[{index}]"

    def fresh(self, prefix: str = "t") -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def scratch(self, count: int, ctype: str | None = None) -> str:
        """A temporary array of ``count`` elements alive while the current node runs (a workspace slice;
        inside a kernel, a slice of its ``mt_scr`` parameter)."""
        ctype = ctype or self.real
        nbytes = count * {"float": 4, "double": 8}.get(ctype, 8)
        frame = self.kernel
        if frame is not None:
            offset = frame.scratch
            frame.scratch += max(ALIGN, (nbytes + ALIGN - 1) // ALIGN * ALIGN)
            return f"(({ctype} *)(mt_scr + {offset}))"
        offset = self.arena.alloc(nbytes)
        self._scratch.append((offset, nbytes))
        return f"(({ctype} *)(ws + {offset}))"

    def end_node(self) -> None:
        for offset, nbytes in self._scratch:
            self.arena.release(offset, nbytes)
        self._scratch = []

    def random_stream(self) -> tuple[str, str]:
        """C expressions ``(seed, stream)`` that the current node's random draws use (``mt_uniform``)."""
        frame = self.kernel
        if frame is not None:
            frame.random = True
            return "mt_seed", "mt_salt"
        return "a->seed", f"{self.salt}ULL"

    # -- kernels -----------------------------------------------------------------------------------
    def begin_kernel(self) -> None:
        """Emit the next unit as a kernel: pointers become parameters, scratch space a slice of
        ``mt_scr``, check sites and local names count from 0 (see :class:`KernelFrame`)."""
        self.kernel = KernelFrame(site0=len(self.checks))
        self._counter = 0

    def end_kernel(self) -> KernelFrame:
        frame, self.kernel = self.kernel, None
        assert frame is not None
        return frame

    # -- checks ------------------------------------------------------------------------------------
    def check_indices(self, index: Value, bound: int, operand: str) -> list[str]:
        """Lines that make the generated function return ``MT_ERR_INDEX`` (``a->error`` = site, value,
        flat position) unless every element of ``index`` is in ``[0, bound)``. They run serially before
        the node's own loops (a branch-free pass over the indices, then a search only on failure), so
        they may sit in no OpenMP region; an emitter puts them first.

        >>> ctx.check_indices(idx, 50, "input")[-2]  # doctest: +SKIP
        '            if ((uint64_t)(int64_t)v3[k] >= (uint64_t)50) MT_FAIL_INDEX(0, v3[k], k);'
        """
        node = self.node
        source = index
        while source.producer is not None and source.producer.spec.name in ALIAS_PRIMITIVES:
            source = next(v for v in source.producer.inputs.values() if v is not None)
        site = len(self.checks) - (self.kernel.site0 if self.kernel is not None else 0)
        self.checks.append(
            IndexSite(
                node.spec.name if node is not None else "?",
                node.path if node is not None else "",
                operand,
                int(bound),
                source.id,
                self.input_keys.get(source.id),
                self.shape(source),
            )
        )
        n = self.size(index)
        if n == 0:
            return []
        p = self.p(index)
        return [
            "{  /* index check */",
            "    int mt_bad = 0;",
            f"    {omp('simd reduction(|:mt_bad)')}",
            f"    for (long k = 0; k < {n}; k++) mt_bad |= (uint64_t)(int64_t){p}[k] >= (uint64_t){int(bound)};",
            "    if (mt_bad)",
            f"        for (long k = 0; k < {n}; k++)",
            f"            if ((uint64_t)(int64_t){p}[k] >= (uint64_t){int(bound)}) MT_FAIL_INDEX({site}, {p}[k], k);",
            "}",
        ]

    # -- loops -------------------------------------------------------------------------------------
    @staticmethod
    def par(count: int, extra: str = "") -> str:
        """An OpenMP ``parallel for`` line (:func:`omp`) for a loop doing ``count`` units of work, or ``""``."""
        if count < PAR_THRESHOLD:
            return ""
        return omp(f"parallel for{extra} num_threads(nt) if(nt > 1)")

    def parallel(self, body: Sequence[str], work: int) -> list[str]:
        """``body`` run as part ``part`` of ``nparts`` (C variables in its scope), each part doing its own
        share of the work: one OpenMP thread per part (at most ``max_parts``, none when ``work`` is small),
        or, in a partitioned function, the part the caller asked for (ggml runs each part on its own
        thread). An emitter whose lines are exactly one such region can run inside a ggml custom op on
        all of ggml's threads."""
        inner = ["    " + line for line in body]
        if self.partitioned:
            head = ["{", "    const long part = mt_part, nparts = mt_nparts;"]
        elif work < PAR_THRESHOLD or self.max_parts <= 1:
            head = ["{", "    const long part = 0, nparts = 1;"]
        else:
            head = [
                omp(f"parallel num_threads(nt < {self.max_parts} ? nt : {self.max_parts}) if(nt > 1)"),
                "{",
                "    long part = 0, nparts = 1;",
                "    MT_PART(part, nparts);",
            ]
        lines = [*head, "    (void)part; (void)nparts;", *inner, "}"]
        self.regions.append(lines)
        return lines

    def parallel_loops(
        self,
        shape: Sequence[int],
        operands: Sequence[tuple[int, Sequence[int]]],
        body: Callable[[list[str]], list[str]],
    ) -> list[str]:
        """:meth:`loops` inside :meth:`parallel`: each part takes a near-equal slice of the outermost loop."""
        if math.prod(shape) == 0:
            return self.parallel([], 0)
        dims = self._merged_dims(shape, operands) or [(1, [0 for _ in operands])]
        names = [self.fresh("i") for _ in dims]
        lines = ["long lo, hi;", f"mt_part_range({dims[0][0]}, part, nparts, 1, &lo, &hi);"]
        for depth, ((n, _), name) in enumerate(zip(dims, names)):
            if depth == len(dims) - 1 and n >= 8:
                lines.append(omp("simd"))
            bounds = ("lo", "hi") if depth == 0 else ("0", str(n))
            lines.append(f"for (long {name} = {bounds[0]}; {name} < {bounds[1]}; {name}++) {{")
        lines += ["    " + line for line in body(self._indices(operands, dims, names))]
        lines += ["}"] * len(dims)
        return self.parallel(lines, math.prod(shape))

    @staticmethod
    def _merged_dims(
        shape: Sequence[int], operands: Sequence[tuple[int, Sequence[int]]]
    ) -> list[tuple[int, list[int]]]:
        """Loop dims of ``shape`` (unit axes dropped, contiguous runs merged) with each operand's stride."""
        dims: list[tuple[int, list[int]]] = []
        for axis, n in enumerate(shape):
            if n == 1:
                continue
            strides = [s[axis] for _, s in operands]
            if dims and all(a == b * n for a, b in zip(dims[-1][1], strides)):
                dims[-1] = (dims[-1][0] * n, strides)
            else:
                dims.append((n, strides))
        return dims

    @staticmethod
    def _indices(
        operands: Sequence[tuple[int, Sequence[int]]], dims: Sequence[tuple[int, list[int]]], names: Sequence[str]
    ) -> list[str]:
        indices = []
        for j, (offset, _) in enumerate(operands):
            terms = [str(offset)] if offset else []
            for (_, strides), name in zip(dims, names):
                s = strides[j]
                if s == 1:
                    terms.append(name)
                elif s:
                    terms.append(f"{name} * {s}")
            indices.append(" + ".join(terms) or "0")
        return indices

    def loops(
        self,
        shape: Sequence[int],
        operands: Sequence[tuple[int, Sequence[int]]],
        body: Callable[[list[str]], list[str]],
        *,
        simd: bool = True,
        parallel: bool = True,
    ) -> list[str]:
        """Nested loops over ``shape``; ``operands`` are ``(offset, strides)`` in elements, and ``body``
        gets one C index expression per operand. Unit axes are dropped and contiguous runs merged."""
        dims = self._merged_dims(shape, operands)
        if math.prod(shape) == 0:
            return []
        lines: list[str] = []
        total = math.prod(shape)
        names = [self.fresh("i") for _ in dims]
        for depth, ((n, _), name) in enumerate(zip(dims, names)):
            innermost = depth == len(dims) - 1
            pragma = self.par(total) if depth == 0 and parallel else ""
            if pragma and innermost and simd:
                pragma = pragma.replace("omp parallel for", "omp parallel for simd")
            elif not pragma and innermost and simd and n >= 8:
                pragma = omp("simd")
            if pragma:
                lines.append(pragma)
            lines.append(f"for (long {name} = 0; {name} < {n}; {name}++) {{")
        lines += ["    " + line for line in body(self._indices(operands, dims, names))]
        lines += ["}"] * len(dims)
        return lines

    def map(
        self, out: Value, inputs: Sequence[Value], expr: Callable[..., str], *, out_index_offset: int = 0
    ) -> list[str]:
        """``out[i] = expr(in_0[i'], in_1[i''], ...)`` with NumPy broadcasting of the inputs."""
        shape = self.shape(out)
        operands: list[tuple[int, Sequence[int]]] = [(out_index_offset, contiguous_strides(shape))]
        for value in inputs:
            operands.append((0, broadcast_strides(self.shape(value), shape)))
        ct = self.ct(out)

        def body(idx: list[str]) -> list[str]:
            args = [self.elem(v, i) for v, i in zip(inputs, idx[1:])]
            return [f"{self.p(out)}[{idx[0]}] = ({ct})({expr(*args)});"]

        if self.partitioned:  # one part of the loops per call (ggml runs each part on its own thread)
            return self.parallel_loops(shape, operands, body)
        return self.loops(shape, operands, body)

    def fill(self, out: Value, value: str, count: int | None = None, ptr: str | None = None) -> list[str]:
        n = self.size(out) if count is None else count
        target = ptr or self.p(out)
        if n == 0:
            return []
        lines = [self.par(n, " simd")] if self.par(n) else []
        name = self.fresh("i")
        return [line for line in lines if line] + [
            f"for (long {name} = 0; {name} < {n}; {name}++) {target}[{name}] = {value};"
        ]

    def copy_view(
        self,
        dst: str,
        dst_layout: tuple[int, Sequence[int]],
        src: str,
        src_layout: tuple[int, Sequence[int]],
        shape: Sequence[int],
        cast: str = "",
    ) -> list[str]:
        """Strided copy ``dst[view] = src[view]`` of ``shape`` elements."""
        return self.loops(shape, [dst_layout, src_layout], lambda idx: [f"{dst}[{idx[0]}] = {cast}{src}[{idx[1]}];"])


Emitter = Callable[[Ctx, Node], list[str]]


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
    node cannot be split that way. ``fuse``: fuse elementwise chains and convolution epilogues
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
    from .fusion import Unit, plan

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
        from mithril.errors import UnsupportedPrimitiveError

        raise UnsupportedPrimitiveError(f"CBackend has no C emitter for {missing}")

    returned = {v.id for v in targets}
    units = plan(nodes, returned, ctx, emitters) if fuse else [Unit([n]) for n in nodes]

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
                from .emitters import nn
                from .fusion import elementwise_group

                lines = (
                    nn.conv_forward(ctx, unit.anchor, unit) if unit.anchor is not None else elementwise_group(ctx, unit)
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
