"""``CProgram``: generated C plus its entry points' layouts; ``load`` compiles (cached) and binds each
entry point to a thin Python caller; ``export`` writes a standalone C program.

The caller keeps one ``uint64`` argument array and one workspace per thread (``threading.local``), so
concurrent calls never share mutable memory; outputs are fresh ``np.empty`` arrays filled in place.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from mithril.errors import IndexRangeError, MithrilError, ShapeError

from . import toolchain
from .codegen import MT_ERR_ALLOC, MT_ERR_INDEX, CFunction, CSource
from .errors import NativeError, NativeMemoryError

__all__ = ["CProgram", "native_error"]


@dataclass
class CProgram:
    """What :meth:`CBackend.generate_program` returns: the generated C (``code``; its one-file text
    ``source`` is shown to users and written by ``ml.compile(file_path=...)`` and by exports) and the entry
    points' layouts. The library is built from ``code``'s translation units (compiled in parallel, cached
    one by one: :func:`~mithril_backend_c.toolchain.build_units`).

    >>> pm.program.library_path.suffix, "mithril_evaluate(" in pm.program.source   # doctest: +SKIP
    ('.so', True)
    """

    code: CSource
    functions: list[CFunction]
    backend: Any
    source: str = field(init=False)

    def __post_init__(self) -> None:
        self.source = self.code.text()

    @property
    def library_path(self) -> Path:
        return self.build()

    def build(self, description: str = "CBackend: compiling generated C", *, verbose: bool | None = None) -> Path:
        """The compiled library (from the cache when it is there); ``description`` names the work in the
        progress shown while it compiles (``verbose``: see :func:`~mithril_backend_c.toolchain.build_units`)."""
        return toolchain.build_units(self.code.units(), description, verbose=verbose)

    def load(self, filename: str = "<mithril-c>") -> dict[str, Callable[..., Any]]:
        """Build (or fetch) the library and bind every entry point; ``filename`` names the model in the
        progress shown during a long compile (``<mithril:GPT>`` -> ``CBackend: compiling GPT (7 parts + runtime)``,
        then the steps done and the elapsed time)."""
        name = filename[len("<mithril:") : -1] if filename.startswith("<mithril:") else filename.strip("<>")
        lib = toolchain.load_library(self.build(f"CBackend: compiling {name}"))
        return {fn.name: _bind(lib, fn, self.backend) for fn in self.functions}

    def export(
        self,
        directory: str | Path,
        params: Mapping[str, np.ndarray],
        pm: Any = None,
        *,
        overwrite: bool = False,
        params_source: str = "given",
    ) -> Any:
        """Write the standalone program (see :mod:`~mithril_backend_c.export`); returns its
        :class:`~mithril_backend_c.export.ExportResult`."""
        from .export import export_program

        return export_program(self, Path(directory), params, overwrite=overwrite, params_source=params_source, pm=pm)


def _bind(lib: ctypes.CDLL, fn: CFunction, backend: Any) -> Callable[..., Any]:
    cfunc = getattr(lib, fn.symbol)
    cfunc.argtypes = [ctypes.c_void_p, ctypes.c_int]
    cfunc.restype = ctypes.c_int
    n_in = len(fn.inputs)
    sources = {"param": 0, "data": 1, "cotangent": 2}
    inputs = [(f.key, sources[f.role], f.dtype, i, f.shape) for i, f in enumerate(fn.inputs)]
    groups, index = [], n_in
    for group in fn.returns:
        specs = []
        for f in group:
            specs.append((f.key, f.shape, f.dtype, index))
            index += 1
        groups.append(specs)
    ws_index, seed_index, error_index = index, index + 1, index + 2
    n_fields = index + 3
    workspace = fn.workspace
    random = fn.random
    threads = int(getattr(backend, "threads", 1))
    local = threading.local()
    single = len(groups) == 1
    empty = np.empty

    def state() -> tuple[Any, int, Any, Any]:
        args = (ctypes.c_uint64 * n_fields)()
        ws = np.empty(workspace, dtype=np.uint8) if workspace else None
        error = np.zeros(3, dtype=np.int64)
        args[ws_index] = ws.ctypes.data if ws is not None else 0
        args[error_index] = error.ctypes.data
        s = (args, ctypes.addressof(args), ws, error)
        local.s = s
        return s

    def call(params: Any, data: Any, cotangents: Any = None) -> Any:
        s = local.__dict__.get("s") or state()
        args = s[0]
        dicts = (params, data, cotangents)
        keep = []
        for key, src, dtype, i, shape in inputs:
            x = dicts[src][key]
            if not isinstance(x, np.ndarray) or x.dtype != dtype or not x.flags.c_contiguous:
                x = np.asarray(x, dtype=dtype, order="C")
                keep.append(x)
            if x.shape != shape:  # the C code reads exactly this many elements
                raise ShapeError(f"{fn.name}: {key!r} has shape {x.shape}, the generated C expects {shape}")
            args[i] = x.ctypes.data
        results = []
        for specs in groups:
            out = {}
            for key, shape, dtype, i in specs:
                y = out[key] = empty(shape, dtype)
                args[i] = y.ctypes.data
            results.append(out)
        if random:
            args[seed_index] = int(backend.rng.integers(0, 1 << 63))
        status = cfunc(s[1], threads)
        if status:
            raise native_error(fn, status, s[3])
        del keep
        return results[0] if single else tuple(results)

    call.__name__ = fn.name
    return call


def native_error(fn: CFunction, status: int, error: Any) -> MithrilError:
    """The Mithril error for a nonzero return ``status`` of generated function ``fn`` (``error``: the
    ``int64[3]`` it filled: check site, bad value, flat position). An index error names the primitive and
    its path, the value, its position (in the input key when the indices are one) and the valid range.

    >>> native_error(fn, MT_ERR_ALLOC, np.zeros(3, np.int64))  # doctest: +SKIP
    NativeMemoryError('evaluate: the generated C could not allocate its 4096-byte workspace')
    """
    if status == MT_ERR_ALLOC:
        return NativeMemoryError(
            f"{fn.name}: the generated C could not allocate its {fn.workspace}-byte workspace (malloc failed)"
        )
    if status == MT_ERR_INDEX:
        site, value, position = (int(v) for v in error[:3])
        if 0 <= site < len(fn.checks):
            check = fn.checks[site]
            where = f"at flat position {position}"
            if check.shape and 0 <= position < math.prod(check.shape):
                where = f"at position {tuple(int(i) for i in np.unravel_index(position, check.shape))}"
            source = f"{check.key!r}" if check.key is not None else f"the computed {check.operand!r} (not a data key)"
            return IndexRangeError(
                f"{fn.name}: {source} holds index {value} {where}, out of range for {check.primitive} at "
                f"{check.path or '<root>'} (valid: 0 <= index < {check.bound}); the generated C stopped "
                "before reading or writing out of bounds"
            )
        return IndexRangeError(f"{fn.name}: the generated C met index {value} at position {position} out of range")
    return NativeError(f"{fn.name}: the generated C returned the unknown error code {status} (expected 0)")
