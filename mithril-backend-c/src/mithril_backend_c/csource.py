"""Generated C as data: the argument structs of the entry points (:class:`CField`, :class:`CFunction`),
the distinct kernels, the constants and the entry points of a library (:class:`CSource`), and their text,
as one translation unit (:meth:`CSource.text`) or several compiled in parallel (:meth:`CSource.units`).

Every user-controlled string (keys, the header) reaches the text only through
:mod:`mithril.extend.escape` (``c_comment`` for comments, ``c_string_literal`` for strings; field names
are made by ``c_identifier``).

Example:
    >>> source = CSource()
    >>> source.text(includes="none").splitlines()
    ['']
    >>> "#include <math.h>" in source.text()
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
from mithril.extend import escape

from .context import C_TYPES, IndexSite
from .options import Includes
from .partitioning import entry_head

__all__ = [
    "INCLUDES",
    "MT_ERR_ALLOC",
    "MT_ERR_INDEX",
    "MT_OK",
    "CField",
    "CFunction",
    "CSource",
    "Entry",
    "Kernel",
    "TranslationUnit",
    "constant_array",
    "entry_declarations",
    "merge_sources",
    "struct_text",
]  # fmt: skip

MT_OK = 0
"""Return code of a generated function that succeeded (``runtime.h``)."""
MT_ERR_ALLOC = 1
"""Return code of a generated function that could not allocate its workspace (``runtime.h``)."""
MT_ERR_INDEX = 2
"""Return code of a generated function that met an index outside its range (``runtime.h``)."""

INCLUDES = (
    "#include <float.h>",
    "#include <math.h>",
    "#include <stdint.h>",
    "#include <stdlib.h>",
    "#include <string.h>",
    '#include "runtime.h"',
)
"""The ``#include`` lines every translation unit starts with."""

_INCLUDED: dict[str, tuple[str, ...]] = {"all": INCLUDES, "system": INCLUDES[:-1], "none": ()}

PART_BYTES = 8 << 10
"""About this many bytes of kernel definitions go into one translation unit of :meth:`CSource.units`
(small enough that the kernels of a model spread over the cores; each unit also parses the headers)."""
MAX_KERNEL_PARTS = 64
"""At most this many translation units of kernels."""


@dataclass
class CField:
    """One pointer in an entry point's argument struct."""

    name: str  # C field name
    key: str  # Mithril key (input, cotangent, output or parameter name)
    role: str  # "param", "data", "cotangent", or "return<i>"
    shape: tuple[int, ...]
    dtype: np.dtype
    quant: str = ""  # a parameter passed block-quantized: its format ("q8_0", "q4_0"); dtype is then uint8


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

    @property
    def fields(self) -> list[CField]:
        """Every field of the argument struct, in its order: the inputs, then each group of returns."""
        return [*self.inputs, *(f for group in self.returns for f in group)]

    def renamed(self, name: str) -> CFunction:
        """The same entry point named ``name`` (its symbol ``<prefix>_<name>``)."""
        return replace(self, name=name, symbol=f"{self.prefix}_{name}")


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
    """One entry point: its layout, its body (the statements between the prologue and the epilogue),
    the kernels and constants it refers to, and whether it computes one part per call (partitioned, at
    most ``max_parts`` parts); :attr:`text` is its C (argument struct, workspace size, check-site names,
    the function)."""

    function: CFunction
    body: list[str]
    kernels: list[str]
    constants: list[str]
    partitioned: bool = False
    max_parts: int = 1

    @property
    def symbol(self) -> str:
        return self.function.symbol

    @cached_property
    def text(self) -> str:
        fn, prefix, symbol = self.function, self.function.prefix, self.function.symbol
        signature, prologue = entry_head(symbol, fn.workspace, partitioned=self.partitioned, max_parts=self.max_parts)
        lines = [
            struct_text(fn, prefix),
            "",
            f"size_t {symbol}_workspace_size(void) {{ return {fn.workspace}; }}",
            *_check_site_function(fn, prefix),
            "",
            signature,
            *prologue,
            "    int mt_status = MT_OK;",
            "    if (nt < 1) nt = 1;",
            "    (void)ws; (void)nt;",
            *("    " + line for line in self.body),
        ]
        if fn.checks:
            lines.append("mt_done:")  # a failed index check jumps here, past the remaining nodes
        lines += ["    free(ws_own);", "    return mt_status;", "}", ""]
        return "\n".join(lines)

    def renamed(self, name: str) -> Entry:
        """The same entry point named ``name`` (symbol, argument struct and helper functions)."""
        return replace(self, function=self.function.renamed(name))


@dataclass
class CSource:
    """Generated C: constants, the distinct kernels and the entry points that call them.

    :meth:`text` is one translation unit (what users read, ``ml.compile(file_path=...)`` writes and an
    export inlines); :meth:`units` splits the same code into independent translation units (kernels
    grouped by their hash, so that a changed model changes few groups; each entry point; the
    constants), which the toolchain compiles in parallel and caches one by one.

    >>> source, _ = generate_source(graph.nodes, functions, SourceOptions())   # doctest: +SKIP
    >>> len(source.kernels) < len(graph.nodes), len(source.units()) >= 2   # doctest: +SKIP
    (True, True)
    """

    header: list[str] = field(default_factory=list)
    constants: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (definition, declaration)
    kernels: dict[str, Kernel] = field(default_factory=dict)  # name -> kernel, in order of first use
    entries: list[Entry] = field(default_factory=list)

    def text(self, includes: Includes = "all") -> str:
        """All of it as one translation unit, starting with the ``#include`` lines ``includes`` names."""
        lines = [*self.header, *_INCLUDED[includes], ""]
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

    def renamed(self, names: Mapping[str, str]) -> CSource:
        """A copy whose entry points named in ``names`` (function name -> new name) are renamed: symbol,
        argument struct and helper functions (``mithril_evaluate`` -> ``mithril_slots64_evaluate``)."""
        entries = [e.renamed(names[e.function.name]) if e.function.name in names else e for e in self.entries]
        return CSource(list(self.header), dict(self.constants), dict(self.kernels), entries)


def merge_sources(sources: Sequence[CSource], header: Sequence[str] | None = None) -> CSource:
    """One source holding every entry point of ``sources`` (their symbols must differ: see
    :meth:`CSource.renamed`), each distinct constant and kernel once (they are named by the hash of their
    text, so sources share what does not differ); ``header``: its comment lines (default: the first's).

    >>> merge_sources([CSource(header=["/* a */"]), CSource()]).header
    ['/* a */']
    """
    merged = CSource(header=list(sources[0].header if header is None else header) if sources else [])
    for source in sources:
        merged.constants.update(source.constants)
        for name, kernel in source.kernels.items():
            merged.kernels.setdefault(name, kernel)
        merged.entries += source.entries
    return merged


def constant_array(name: str, const: object, dtype: np.dtype) -> tuple[str, str]:
    """``(definition, declaration)`` of a constant array: shared by the translation units of a library
    (hidden, read-only), declared ``extern`` in those that read it.

    >>> constant_array("c0", [1.5, 2.0], np.dtype("float32"))[0]
    'MT_HIDDEN const float c0[2] = {0x1.8000000000000p+0,0x1.0000000000000p+1};'
    """
    array = np.asarray(const).astype(dtype).ravel()
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


def entry_declarations(fn: CFunction, prefix: str | None = None) -> str:
    """The declarations of entry point ``fn`` that its callers see, in one text for the exported header
    (``model.h``) and for Python's ``cffi`` interface (:func:`~mithril_backend_c.toolchain.load_library`):
    the argument struct, the workspace size, the check-site description and the entry point
    (``prefix``: the symbols' prefix, default ``fn.prefix``).

    >>> print(entry_declarations(fn).splitlines()[-1])   # doctest: +SKIP
    int mithril_evaluate(const mithril_evaluate_args *a, int nt);
    """
    prefix = fn.prefix if prefix is None else prefix
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
            f"    const void *{f.name};  /* {escape.c_comment(f'{f.role} {f.key!r}')}: {f.quant or f.dtype.name}"
            f"{list(f.shape)} */"
        )
    for group in fn.returns:
        for f in group:
            lines.append(
                f"    void *{f.name};  /* {escape.c_comment(f'{f.role} {f.key!r}')}: {f.dtype.name}{list(f.shape)} */"
            )
    lines.append(f"    void *workspace;  /* NULL (allocated per call), or {prefix}_{fn.name}_workspace_size() bytes */")
    lines.append("    uint64_t seed;  /* random primitives draw from (seed, node) */")
    lines.append(
        "    int64_t *error;  /* NULL, or int64_t[3] set on MT_ERR_INDEX: {check site, bad index, flat position}; "
        f"{prefix}_{fn.name}_check_site(site) describes the site */"
    )
    lines.append(f"}} {prefix}_{fn.name}_args;")
    return "\n".join(lines)


def _check_site_function(fn: CFunction, prefix: str) -> list[str]:
    """``const char *<prefix>_<fn>_check_site(long site)``: a readable description of each index check."""
    lines = [f"const char *{prefix}_{fn.name}_check_site(long site) {{", "    switch (site) {"]
    for site, check in enumerate(fn.checks):
        text = check.describe() + (f" from input {check.key!r}" if check.key is not None else "")
        lines.append(f"    case {site}: return {escape.c_string_literal(text)};")
    lines += ['    default: return "unknown check site";', "    }", "}"]
    return lines
