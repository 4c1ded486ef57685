"""C kernels for the primitives (or cases) ggml has no op for, run as ggml custom ops.

A primitive call that no native builder can express becomes a ggml custom op (``ggml_custom_4d``) whose
callback is a *C function*: the C backend's emitter for that primitive generates the kernel (a one-node
kernel from :func:`mithril_backend_c.kernels.kernel_source` with the node's static shapes and attributes),
and a small generated wrapper with ggml's custom-op signature

    typedef void (*ggml_custom_op_t)(struct ggml_tensor * dst, int ith, int nth, void * userdata);

reads the ``src`` tensors' data, converts ggml's storage (ints I32, bools F32 0/1) to the C backend's
(ints int64, bools uint8) where needed, calls the kernel and writes ``dst``. ggml computes the graph
without the GIL (``ggml_backend_graph_compute`` is a plain ctypes call of ggml-python's bindings), so
these ops never enter Python. The kernels' library and the slots are bound through ``cffi``.

Kernels report failures instead of crashing: the C backend's index checks (``embedding_grad``,
``gather``, class targets ...) and failed allocations make the kernel return a nonzero code, which the
wrapper stores in its :class:`Slot` (with the site, value and position of a bad index); the program
raises the matching Mithril error after the compute (:meth:`CKernels.error`). Native ``ggml_get_rows``
(which aborts the process on an index out of range) reads its indices through :meth:`CKernels.guard`, a
kernel that checks them, reports the first bad one and passes a valid index (0) on in its place.

All kernels of one compiled program go into one C source, compiled once by
:func:`mithril_backend_c.kernels.build_library` (content-hash disk cache, file lock, atomic write).
Since the graph is built before the library exists, the op's callback is a fixed trampoline
(``mithril_ggml_call``, in its own tiny cached library) and its ``userdata`` a :class:`Slot` whose ``fn``
is filled with the kernel's address once the program's library is loaded. Random kernels read a fresh
``seed`` from their slot, drawn from the backend's generator before every compute.

The wrapper only reads ``struct ggml_tensor`` fields (``data``, ``src``), declared by the ``ggml.h``
shipped with ggml-python; it calls no libggml function, so nothing links a second libggml.

Most kernels run on thread ``ith == 0`` only, with one OpenMP thread, while the other ggml threads wait
at the node's barrier. *Partitioned* kernels (:meth:`CKernels.partitioned`: convolutions with their fused
elementwise epilogue, fused elementwise chains, pooling) run on every ggml thread, each computing its own
part (``kernel_source(partitioned=True)``); their scratch space lives in the custom op's own result tensor,
after the output, so ggml's allocator provides it and no thread allocates memory.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import cffi
import numpy as np
from mithril_backend_c import kernels

from ._lib import load_ggml

__all__ = ["CKernels", "Slot", "c_emitters", "ggml_include_dir", "new_slot", "slot_address"]

_CTYPES = {
    "float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t", "int16": "int16_t",
    "int8": "int8_t", "uint8": "uint8_t", "bool": "uint8_t",
}  # fmt: skip


_CODE_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*', re.S)


def _code_identity(text: str, name: str) -> str:
    """``text`` with its comments dropped (node paths, shapes), ``name`` (the identifier its own
    identifiers start with) made generic and its local pointers (``v<value id>``) numbered in order: two call
    sites whose kernels have the same identity run the same code, so one compiled copy serves both. String
    literals (check-site descriptions) stay part of it.

    >>> _code_identity('int mg3_k(float *v7) { /* add @ h.3 */ return mg30_k(v7); }', "mg3")
    'int @_k(float *v0) {  return mg30_k(v0); }'
    """
    code = _CODE_TOKENS.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else "", text)
    code = _renamed(code, name, "@")
    locals_: dict[str, str] = {}  # the C emitter's pointers v<value id>, renamed in order of appearance
    return re.sub(r"\bv\d+\b", lambda m: locals_.setdefault(m.group(0), f"v{len(locals_)}"), code)


def _renamed(code: str, name: str, new: str) -> str:
    """``code`` with the identifier ``name``, alone or as the start of ``name_...``, replaced by ``new``
    (a scan, not a regular expression: a pattern per name would be compiled for every kernel).

    >>> _renamed("mg3_k(mg3, mg30_k, xmg3)", "mg3", "@")
    '@_k(@, mg30_k, xmg3)'
    """
    parts, start, size = [], 0, len(name)
    found = code.find(name)
    while found >= 0:
        end = found + size
        before = code[found - 1] if found else " "
        after = code[end] if end < len(code) else " "
        if not (before.isalnum() or before == "_") and (after == "_" or not after.isalnum()):
            parts += [code[start:found], new]
            start = end
        found = code.find(name, end)
    return "".join(parts) + code[start:]


_SLOT_C = "typedef struct { void *fn; uint64_t seed; int64_t status; int64_t error[3]; } mithril_ggml_slot;"


@functools.cache
def _slot_ffi() -> Any:
    """The ``cffi`` interface of the slots (the same declaration the generated C includes)."""
    ffi = cffi.FFI()
    ffi.cdef(_SLOT_C)
    return ffi


Slot = Any
"""``userdata`` of a C custom op (a ``cffi`` ``mithril_ggml_slot *``, made by :func:`new_slot`): the kernel
to call (filled after the library is built), the seed of a random kernel, and the kernel's report:
``status`` (0, or the C backend's ``MT_ERR_*`` code) and ``error`` (check site, bad index, flat position)
when it is ``MT_ERR_INDEX``."""


def new_slot() -> Slot:
    """A zeroed slot (no kernel yet)."""
    return _slot_ffi().new("mithril_ggml_slot *")


def slot_address(slot: Slot) -> int:
    """The address of ``slot``, the ``userdata`` ggml passes to the custom op (the slot must stay alive as
    long as the graph: builders keep it in their ``callbacks``)."""
    return int(_slot_ffi().cast("uintptr_t", slot))


def _kernel_declaration(symbol: str) -> str:
    """The ``cffi`` declaration of a custom-op kernel (``struct ggml_tensor *`` passed as ``void *``)."""
    return f"void {symbol}(void *dst, int ith, int nth, void *userdata);"


_TRAMPOLINE = """/* mithril-backend-ggml: the ggml custom-op callback of every C kernel */
#include <stdint.h>
struct ggml_tensor;
typedef void (*mithril_ggml_kernel)(struct ggml_tensor *dst, int ith, int nth, void *slot);
typedef struct { mithril_ggml_kernel fn; uint64_t seed; int64_t status; int64_t error[3]; } mithril_ggml_slot;
void mithril_ggml_call(struct ggml_tensor *dst, int ith, int nth, void *userdata) {
    const mithril_ggml_slot *slot = (const mithril_ggml_slot *)userdata;
    if (slot->fn) slot->fn(dst, ith, nth, userdata);
}
"""


def ggml_include_dir() -> Path:
    """The headers installed with ggml-python (``site-packages/include``), holding ``ggml.h``."""
    ggml = load_ggml()
    here = ggml.__file__
    candidates = [Path(here).parent / "include", Path(here).parent.parent / "include"] if here else []
    candidates += [Path(p) / "include" for p in sys.path if p]
    for path in candidates:
        if (path / "ggml.h").is_file():
            return path
    raise FileNotFoundError("ggml.h not found: the ggml-python package should install it under site-packages/include")


@functools.cache
def _header_line() -> str:
    """``#include`` of ggml.h by absolute path, plus its hash (so the kernel cache key follows the header)."""
    header = ggml_include_dir() / "ggml.h"
    digest = hashlib.sha256(header.read_bytes()).hexdigest()[:16]
    return f'#include "{header}"  /* sha256 {digest} */'


@functools.cache
def trampoline() -> int:
    """The address of ``mithril_ggml_call`` (its library is built once and cached on disk)."""
    native = kernels.load_library(kernels.build_library(_TRAMPOLINE), _kernel_declaration("mithril_ggml_call"))
    _LIBRARIES.append(native)
    return native.address("mithril_ggml_call")


_LIBRARIES: list[Any] = []  # loaded kernel libraries stay loaded for the life of the process


@functools.cache
def c_emitters() -> Mapping[str, Any]:
    """The C backend's emitter table (``lambda``, a Python callable, has none)."""
    return kernels.emitter_table()


def _ggml_ctype(kind: str) -> str:
    return "int32_t" if kind == "int" else "float"


class Partitioned:
    """A kernel that every ggml thread runs on its own part: the slot, and the bytes of scratch space the
    custom op's result tensor holds after the output (``offset`` = where the scratch starts)."""

    def __init__(self, slot: Slot, offset: int, workspace: int) -> None:
        self.slot, self.offset, self.workspace = slot, offset, workspace


class CKernels:
    """The C custom ops of one program: collected while its graphs are built, compiled by :meth:`link`."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads  # ggml threads a partitioned kernel is laid out for
        self.sources: list[str] = []
        self.slots: list[tuple[Slot, str]] = []  # (slot, kernel symbol)
        self.random_slots: list[Slot] = []
        self.checks: dict[int, list[Any]] = {}  # id(slot) -> the IndexSites its kernel's error sites refer to
        self._symbols: dict[tuple[int, int], tuple[str, list[Any]]] = {}  # (node id, output) -> (symbol, checks)
        self._kernels: dict[int, str] = {}  # node id -> kernel prefix
        self._identities: dict[str, str] = {}  # _code_identity of emitted code -> its prefix, or its symbol
        self._prefixes = 0
        self.library: Any = None

    def supports(self, node: Any) -> bool:
        return node.spec.name in c_emitters()

    def partitioned(self, nodes: Sequence[Any], inputs: Sequence[Any], output: Any) -> Partitioned | None:
        """A kernel computing ``output`` from ``inputs`` (float values, in the custom op's source order)
        through ``nodes`` (one node, or a fused group: see :func:`mithril_backend_c.kernels.plan_fusion`),
        split over ggml's threads; ``None`` when the C code cannot be split that way."""
        prefix = self._new_prefix()
        head = nodes[0]
        label = f"{head.spec.name}{' @ ' + head.path if head.path else ''}"  # escaped by kernel_source
        try:
            kernel = kernels.kernel_source(
                nodes, inputs, [output], prefix=prefix, header=label, max_parts=self.threads, partitioned=True,
                emitters=c_emitters(),
            )  # fmt: skip
        except kernels.NotPartitionable:
            return None
        layout = kernel.function
        out_bytes = math.prod(layout.returns[0][0].shape) * 4
        offset = (out_bytes + 63) // 64 * 64 if layout.workspace else out_bytes
        symbol = f"{prefix}_part"
        lines = [
            f"void {symbol}(struct ggml_tensor *dst, int ith, int nth, void *userdata) {{",
            "    mithril_ggml_slot *slot = (mithril_ggml_slot *)userdata;",
            f"    {prefix}_kernel_args a;",
            "    memset(&a, 0, sizeof a);",
            "    a.seed = slot->seed;",
        ]
        lines += [f"    a.{field.name} = dst->src[{i}]->data;" for i, field in enumerate(layout.inputs)]
        lines.append(f"    a.{layout.returns[0][0].name} = dst->data;")
        if layout.workspace:
            lines.append(f"    a.workspace = (char *)dst->data + {offset};")
        lines += [
            f"    int rc = {prefix}_kernel(&a, 1, ith, nth);",
            "    if (rc) __atomic_store_n(&slot->status, (int64_t)rc, __ATOMIC_RELAXED);",
            "}",
        ]
        symbol = self._once(f"{kernel.text}\n" + "\n".join(lines), prefix, symbol)
        slot = new_slot()
        self.slots.append((slot, symbol))
        self.checks[id(slot)] = layout.checks
        if any(n.spec.random for n in nodes):
            self.random_slots.append(slot)
        return Partitioned(slot, offset, layout.workspace)

    def slot(self, node: Any, inputs: Sequence[tuple[Any, str]], index: int) -> Slot:
        """The slot of output ``index`` of ``node``; ``inputs`` are ``(value, ggml kind)`` of the custom op's
        sources, in order (the node's present inputs, each stored as the ggml builder stored it)."""
        key = (node.id, index)
        entry = self._symbols.get(key)
        if entry is None:
            entry = self._symbols[key] = self._emit(node, inputs, index)
        symbol, checks = entry
        slot = new_slot()
        self.slots.append((slot, symbol))
        self.checks[id(slot)] = checks
        if node.spec.random:
            self.random_slots.append(slot)
        return slot

    def guard(self, count: int, bound: int, site: Any) -> Slot:
        """The slot of a kernel copying ``count`` I32 indices (its one source) to its I32 result, each
        checked against ``[0, bound)``: the first bad one is reported (``MT_ERR_INDEX``, described by
        the :class:`~mithril_backend_c.kernels.IndexSite` ``site``) and replaced by 0, so the native op
        reading the result (``ggml_get_rows``) never sees it. ``bound`` must be at least 1."""
        symbol = f"mg_guard{len(self.slots)}"
        self.sources.append(
            "\n".join(
                [
                    f"void {symbol}(struct ggml_tensor *dst, int ith, int nth, void *userdata) {{",
                    "    mithril_ggml_slot *slot = (mithril_ggml_slot *)userdata;",
                    "    (void)nth;",
                    "    if (ith != 0) return;",
                    "    const int32_t *s = (const int32_t *)dst->src[0]->data;",
                    "    int32_t *d = (int32_t *)dst->data;",
                    f"    for (long k = 0; k < {int(count)}; k++) {{",
                    "        int32_t j = s[k];",
                    f"        if ((uint32_t)j >= (uint32_t){int(bound)}) {{",
                    "            if (!slot->status) {",
                    "                slot->status = MT_ERR_INDEX;",
                    "                slot->error[0] = 0; slot->error[1] = j; slot->error[2] = k;",
                    "            }",
                    "            j = 0;",
                    "        }",
                    "        d[k] = j;",
                    "    }",
                    "}",
                ]
            )
        )
        slot = new_slot()
        self.slots.append((slot, symbol))
        self.checks[id(slot)] = [site]
        return slot

    def error(self, slots: Sequence[Slot], where: str, names: Mapping[int, str]) -> Exception | None:
        """The Mithril error for the first of ``slots`` whose kernel reported one in the last compute
        (``where``: the function's name; ``names``: value id -> key of the function's inputs), or
        ``None``. Index errors name the primitive and its path, the value, its position, the input key
        when the indices are one, and the valid range (:func:`mithril_backend_c.kernels.status_error`)."""
        for slot in slots:
            if slot.status:
                sites = [replace(site, key=names.get(site.value_id)) for site in self.checks.get(id(slot), [])]
                return kernels.status_error(where, int(slot.status), list(slot.error), sites)
        return None

    # -- code generation -------------------------------------------------------------------------
    def _new_prefix(self) -> str:
        self._prefixes += 1
        return f"mg{self._prefixes - 1}"

    def _emit(self, node: Any, inputs: Sequence[tuple[Any, str]], index: int) -> tuple[str, list[Any]]:
        prefix = self._kernels.get(node.id)
        fresh = prefix is None
        if prefix is None:
            prefix = self._new_prefix()
        kernel = kernels.kernel_source(
            [node], [value for value, _ in inputs], list(node.outputs.values()), prefix=prefix,
            header=f"{node.spec.name}{' @ ' + node.path if node.path else ''}", emitters=c_emitters(),
        )  # fmt: skip
        layout = kernel.function
        if fresh:  # no #include lines: the program's source has them once
            self._kernels[node.id] = prefix = self._once(kernel.text, prefix, prefix)
        out_value = list(node.outputs.values())[index]
        symbol = f"{prefix}_out{index}_{len(self.slots)}"
        wrapper = self._wrapper(symbol, prefix, layout, inputs, index, out_value)
        return self._once(wrapper, symbol, symbol), layout.checks

    def _once(self, text: str, name: str, result: str) -> str:
        """Append ``text`` (code whose own identifiers start with ``name``) to the program's source and give
        ``result``, unless code of the same identity is already there: then give what that call gave."""
        identity = _code_identity(text, name)
        known = self._identities.get(identity)
        if known is not None:
            return known
        self.sources.append(text)
        self._identities[identity] = result
        return result

    @staticmethod
    def _wrapper(symbol: str, prefix: str, layout: Any, inputs: Sequence[tuple[Any, str]], index: int, out: Any) -> str:
        """The custom-op function: convert the sources to the kernel's types (buffers are malloc'ed; a
        failed allocation is reported as ``MT_ERR_ALLOC``), run the kernel, record a nonzero return code
        (and its error details) in the slot, convert the result."""
        lines = [
            f"void {symbol}(struct ggml_tensor *dst, int ith, int nth, void *userdata) {{",
            "    (void)nth;",
            "    if (ith != 0) return;",
            "    mithril_ggml_slot *slot = (mithril_ggml_slot *)userdata;",
            f"    {prefix}_kernel_args a;",
            "    memset(&a, 0, sizeof a);",
            "    a.seed = slot->seed;",
            "    a.error = slot->error;",
            "    int rc = MT_OK;",
        ]
        buffers: list[str] = []  # declarations of the conversion buffers
        names: list[str] = []
        setup: list[str] = []
        after: list[str] = []
        for i, (field, (_, kind)) in enumerate(zip(layout.inputs, inputs, strict=True)):
            count = math.prod(field.shape)
            want = _CTYPES[field.dtype.name]
            have = _ggml_ctype(kind)
            src = f"dst->src[{i}]->data"
            if want == have and kind != "bool":
                setup.append(f"    a.{field.name} = {src};")
                continue
            buf = f"b{i}"
            convert = f"({want})(s[k] != 0)" if kind == "bool" else f"({want})s[k]"
            buffers.append(f"    {want} *{buf} = ({want} *)malloc({max(count, 1)} * sizeof({want}));")
            names.append(buf)
            setup += [
                f"    {{ const {have} *s = (const {have} *){src};",
                f"      for (long k = 0; k < {count}; k++) {buf}[k] = {convert}; }}",
                f"    a.{field.name} = {buf};",
            ]
        kind = out.kind or "float"
        for j, field in enumerate(layout.returns[0]):
            count = math.prod(field.shape)
            want = _CTYPES[field.dtype.name]
            buf = f"r{j}"
            if j == index and want == _ggml_ctype(kind) and kind != "bool":
                setup.append(f"    a.{field.name} = dst->data;")
                continue
            buffers.append(f"    {want} *{buf} = ({want} *)malloc({max(count, 1)} * sizeof({want}));")
            names.append(buf)
            setup.append(f"    a.{field.name} = {buf};")
            if j == index:
                have = _ggml_ctype(kind)
                convert = f"({have})({buf}[k] != 0)" if kind == "bool" else f"({have}){buf}[k]"
                after.append(
                    f"    {{ {have} *d = ({have} *)dst->data; for (long k = 0; k < {count}; k++) d[k] = {convert}; }}"
                )
        lines += buffers
        if names:
            lines.append(f"    if ({' || '.join(f'!{n}' for n in names)}) {{ rc = MT_ERR_ALLOC; goto done; }}")
        lines += setup
        lines.append(f"    rc = {prefix}_kernel(&a, 1);")
        lines.append("    if (rc) goto done;")
        lines += after
        lines.append("done:")
        lines.append("    if (rc) slot->status = rc;")
        lines += [f"    free({name});" for name in names]
        lines.append("}")
        return "\n".join(lines)

    # -- build -----------------------------------------------------------------------------------
    def source(self) -> str:
        head = [
            "/* mithril-backend-ggml: C kernels of ggml custom ops (generated by mithril-backend-c's emitters) */",
            *kernels.INCLUDES,
            _header_line(),
            _SLOT_C,
            "",
        ]
        return "\n".join(head + self.sources) + "\n"

    def link(self) -> None:
        """Compile (or fetch from the cache) the program's kernels and point every slot at its kernel."""
        if not self.slots:
            return
        symbols = sorted({symbol for _, symbol in self.slots})
        cdef = "\n".join(["void mt_blas_serial(void);", *map(_kernel_declaration, symbols)])
        self.library = kernels.load_library(kernels.build_library(self.source()), cdef)
        _LIBRARIES.append(self.library)
        self.library.lib.mt_blas_serial()  # before ggml's threads run kernels: BLAS stays on the calling thread
        ffi = _slot_ffi()
        for slot, symbol in self.slots:
            slot.fn = ffi.cast("void *", self.library.address(symbol))

    def reset(self, slots: Sequence[Slot]) -> None:
        """Clear the reports of ``slots`` before a compute."""
        for slot in slots:
            slot.status = 0

    def reseed(self, rng: np.random.Generator) -> None:
        """Fresh seeds for the random kernels (called before every compute)."""
        for slot in self.random_slots:
            slot.seed = int(rng.integers(0, 1 << 63))
