"""``CProgram``: generated C plus its entry points' layouts; ``load`` compiles (cached) and binds each
entry point to a thin Python caller; ``export`` writes a standalone C program.

The caller keeps one ``uint64`` argument array and one workspace per thread (``threading.local``), so
concurrent calls never share mutable memory; outputs are fresh ``np.empty`` arrays filled in place.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import toolchain
from .codegen import CFunction

__all__ = ["CProgram"]


@dataclass
class CProgram:
    """What :meth:`CBackend.generate_program` returns (``source`` is shown to users and written by
    ``ml.compile(file_path=...)``)."""

    source: str
    functions: list[CFunction]
    backend: Any

    @property
    def library_path(self) -> Path:
        return toolchain.build_library(self.source)

    def load(self, filename: str = "<mithril-c>") -> dict[str, Callable[..., Any]]:
        lib = toolchain.load_library(self.library_path)
        return {fn.name: _bind(lib, fn, self.backend) for fn in self.functions}

    def export(self, directory: str | Path, params: dict[str, np.ndarray], pm: Any = None) -> Path:
        from .export import export_program, write_example

        directory = export_program(self, Path(directory), params)
        if pm is not None:
            write_example(pm, self, directory, params)
        return directory


def _bind(lib: ctypes.CDLL, fn: CFunction, backend: Any) -> Callable[..., Any]:
    cfunc = getattr(lib, fn.symbol)
    cfunc.argtypes = [ctypes.c_void_p, ctypes.c_int]
    cfunc.restype = ctypes.c_int
    n_in = len(fn.inputs)
    sources = {"param": 0, "data": 1, "cotangent": 2}
    inputs = [(f.key, sources[f.role], f.dtype, i) for i, f in enumerate(fn.inputs)]
    groups, index = [], n_in
    for group in fn.returns:
        specs = []
        for f in group:
            specs.append((f.key, f.shape, f.dtype, index))
            index += 1
        groups.append(specs)
    ws_index, seed_index = index, index + 1
    n_fields = index + 2
    workspace = fn.workspace
    random = fn.random
    threads = int(getattr(backend, "threads", 1))
    local = threading.local()
    single = len(groups) == 1
    empty = np.empty

    def state() -> tuple[Any, int]:
        args = (ctypes.c_uint64 * n_fields)()
        ws = np.empty(workspace, dtype=np.uint8) if workspace else None
        args[ws_index] = ws.ctypes.data if ws is not None else 0
        s = (args, ctypes.addressof(args), ws)
        local.s = s
        return s

    def call(params: Any, data: Any, cotangents: Any = None) -> Any:
        s = local.__dict__.get("s") or state()
        args = s[0]
        dicts = (params, data, cotangents)
        keep = []
        for key, src, dtype, i in inputs:
            x = dicts[src][key]
            if not isinstance(x, np.ndarray) or x.dtype != dtype or not x.flags.c_contiguous:
                x = np.asarray(x, dtype=dtype, order="C")
                keep.append(x)
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
        if cfunc(s[1], threads):
            raise MemoryError(f"{fn.symbol}: could not allocate its {workspace}-byte workspace")
        del keep
        return results[0] if single else tuple(results)

    call.__name__ = fn.name
    return call
