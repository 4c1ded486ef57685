"""The emit context: what a C emitter sees and the helpers it writes code with.

:class:`Ctx` names the values (pointers, shapes, C types, literals), lays out scratch space, records
index checks and writes loop nests; the free functions turn dtypes, scalars and NumPy layouts into C.
This module is the lowest layer of the C backend: the emitters (:mod:`~mithril_backend_c.emitters`),
the fusion planner (:mod:`~mithril_backend_c.fusion`) and the code generator
(:mod:`~mithril_backend_c.codegen`, which drives them) import it, and it imports none of them.

Example:
    >>> import numpy as np
    >>> c_type(np.dtype("float32")), omp("simd"), broadcast_strides((3, 1), (2, 3, 4))
    ('float', 'MT_OMP("omp simd")', (0, 1, 0))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mithril.extend import Node, Value
from mithril.types import Dtype

__all__ = [
    "ALIAS_PRIMITIVES",
    "ALIGN",
    "C_TYPES",
    "PAR_THRESHOLD",
    "Ctx",
    "Emitter",
    "IndexSite",
    "KernelFrame",
    "broadcast_strides",
    "c_type",
    "contiguous_strides",
    "float_literal",
    "literal",
    "node_input",
    "omp",
    "view_layout",
]  # fmt: skip

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


ALIAS_PRIMITIVES = frozenset({"reshape", "flatten", "squeeze", "unsqueeze", "reshape_like", "at_least_1d"})
"""Primitives whose output is the input's memory read with another shape (no copy)."""
PAR_THRESHOLD = 1 << 16
"""Loops over at least this many elements get an OpenMP ``parallel for``."""
ALIGN = 64
"""Every block of the workspace (and of a kernel's scratch space) starts at a multiple of this many bytes."""


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


def node_input(node: Node, key: str) -> Value:
    """The value of ``node``'s input ``key``, one the primitive requires (``Node.inputs`` holds ``None``
    only for an absent optional input: read those from ``node.inputs`` itself)."""
    value = node.inputs[key]
    assert value is not None, f"{node.spec.name}: required input {key!r} is absent"
    return value


class Ctx:
    """What an emitter sees: value names, shapes, C types, literals, scratch space and loop helpers."""

    def __init__(
        self,
        dtype: Dtype,
        value_dtypes: Mapping[int, np.dtype],
        *,
        max_parts: int = 1,
        partitioned: bool = False,
        quantized: Mapping[int, str] | None = None,
    ) -> None:
        self.dtype = np.dtype(dtype.value)
        self.quantized = dict(quantized or {})  # value id -> block format of a parameter passed quantized
        self.max_parts = max(1, int(max_parts))  # most parts a parallel region is split into
        self.partitioned = partitioned  # the function runs one part (mt_part of mt_nparts) per call
        self.regions: list[list[str]] = []  # parallel regions emitted for the current node
        self.real = C_TYPES[dtype.value]
        self.sfx = "f32" if dtype is Dtype.float32 else "f64"
        self._value_dtypes = value_dtypes
        self.names: dict[int, str] = {}  # value id -> the C pointer holding it (set once it is computed)
        self._counter = 0
        self.node: Node | None = None
        self.salt = 0  # per-node stream of random primitives
        self.checks: list[IndexSite] = []  # index checks emitted so far (site = position in this list)
        self._checked: dict[int, int] = {}  # value id -> the tightest bound an earlier check holds it to
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
        """A temporary array of ``count`` elements alive while the current unit runs: a slice of the
        kernel's ``mt_scr`` parameter (the workspace space the allocator gives the kernel)."""
        ctype = ctype or self.real
        nbytes = count * {"float": 4, "double": 8}.get(ctype, 8)
        frame = self.kernel
        if frame is None:
            raise RuntimeError("Ctx.scratch: scratch space belongs to a kernel; call begin_unit first")
        offset = frame.scratch
        frame.scratch += max(ALIGN, (nbytes + ALIGN - 1) // ALIGN * ALIGN)
        return f"(({ctype} *)(mt_scr + {offset}))"

    def random_stream(self) -> tuple[str, str]:
        """C expressions ``(seed, stream)`` that the current node's random draws use (``mt_uniform``)."""
        frame = self.kernel
        if frame is not None:
            frame.random = True
            return "mt_seed", "mt_salt"
        return "a->seed", f"{self.salt}ULL"

    # -- kernels -----------------------------------------------------------------------------------
    def begin_unit(self, node: Node) -> None:
        """Emit the next unit as a kernel (see :meth:`begin_kernel`); ``node`` is its last node (the one
        index checks name, and whose id is the unit's random stream)."""
        self.node = node
        self.salt = node.id
        self.regions = []
        self.begin_kernel()

    def begin_kernel(self) -> None:
        """Emit the next unit as a kernel: pointers become parameters, scratch space a slice of
        ``mt_scr``, check sites and local names count from 0 (see :class:`KernelFrame`)."""
        self.kernel = KernelFrame(site0=len(self.checks))
        self._counter = 0

    def end_kernel(self) -> KernelFrame:
        """The frame of the kernel emitted since :meth:`begin_kernel` (pointers are names again)."""
        frame, self.kernel = self.kernel, None
        assert frame is not None
        return frame

    # -- checks ------------------------------------------------------------------------------------
    def check_indices(self, index: Value, bound: int, operand: str) -> list[str]:
        """Lines that make the generated function return ``MT_ERR_INDEX`` (``a->error`` = site, value,
        flat position) unless every element of ``index`` is in ``[0, bound)``. They run serially before
        the node's own loops (a branch-free pass over the indices, then a search only on failure), so
        they may sit in no OpenMP region; an emitter puts them first. A value an earlier check of this
        function already held to a bound no larger is not checked again (the function's units run in
        order, and a failed check returns): the 24 KV-cache writes of a GPT-2 chunk step check their
        ``start`` once.

        >>> ctx.check_indices(idx, 50, "input")[-2]  # doctest: +SKIP
        '            if ((uint64_t)(int64_t)v3[k] >= (uint64_t)50) MT_FAIL_INDEX(0, v3[k], k);'
        """
        node = self.node
        source = index
        while source.producer is not None and source.producer.spec.name in ALIAS_PRIMITIVES:
            source = next(v for v in source.producer.inputs.values() if v is not None)
        held = self._checked.get(source.id)
        if held is not None and held <= bound:
            return []
        self._checked[source.id] = int(bound)
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
        """An OpenMP ``parallel for`` line (:func:`omp`) for a loop doing ``count`` units of work, or ``""``.
        Its ``if`` names ``parallel``: a bare ``if`` applies to every construct of the combined directive, so
        ``parallel for simd ... if(nt > 1)`` would not vectorise on one thread."""
        if count < PAR_THRESHOLD:
            return ""
        return omp(f"parallel for{extra} num_threads(nt) if(parallel: nt > 1)")

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
        for depth, ((n, _), name) in enumerate(zip(dims, names, strict=True)):
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
            if dims and all(a == b * n for a, b in zip(dims[-1][1], strides, strict=True)):
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
            for (_, strides), name in zip(dims, names, strict=True):
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
        for depth, ((n, _), name) in enumerate(zip(dims, names, strict=True)):
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
            # every operand loaded unconditionally into a local first: GCC 12 with -O3 -mavx2 miscompiles
            # ``out[i] = c[j] ? x[i] : 0.0`` (a conditional load in a vectorised, broadcast loop)
            pairs = enumerate(zip(inputs, idx[1:], strict=True))
            loads = [f"{self.ct(v)} mt_in{k} = {self.elem(v, i)};" for k, (v, i) in pairs]
            value = expr(*(f"mt_in{k}" for k in range(len(inputs))))
            return ["{", *loads, f"{self.p(out)}[{idx[0]}] = ({ct})({value});", "}"]

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
