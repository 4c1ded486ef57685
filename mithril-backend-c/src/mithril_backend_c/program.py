"""``CProgram``: generated C plus its entry points' layouts; ``load`` compiles (cached) and binds each
entry point to a thin Python caller; ``export`` writes a standalone C program.

The library is bound through ``cffi`` with the entry points' declarations (their header text). The
caller keeps one argument struct and one workspace per thread (``threading.local``), so concurrent calls
never share mutable memory; outputs are fresh ``np.empty`` arrays filled in place.
"""

from __future__ import annotations

import keyword
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from mithril.errors import ArgumentError, IndexRangeError, MithrilError, ShapeError
from mithril.extend import InputsNeedChecking, escape

from . import toolchain
from ._export import ExportResult, export_program
from .array_address import address_cell
from .context import IndexSite
from .csource import MT_ERR_ALLOC, MT_ERR_INDEX, CField, CFunction, CSource, entry_declarations
from .errors import NativeError, NativeMemoryError
from .quantize import FORMATS

__all__ = ["CProgram", "load_functions", "native_error", "status_error"]


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
    generated_from: tuple[list[Any], list[Any], Any] | None = field(default=None, repr=False, compare=False)
    """``(nodes, function specs, SourceOptions)`` the code was generated from (:meth:`quantized`)."""
    source: str = field(init=False)

    def __post_init__(self) -> None:
        self.source = self.code.text()

    def quantized(self, fmt: str) -> tuple[CSource, list[CFunction]]:
        """The code generated again with every parameter that can be (``quantize.quantizable_params``)
        passed block-quantized as ``fmt`` (``"q8_0"``, ``"q4_0"``; their fields have ``quant`` set): the
        C of an inference model with quantized weights (``mithril_models.export_program(quantize=...)``).
        Only forward functions: a model compiled with gradients is refused.

        >>> code, functions = pm.program.quantized("q4_0")            # doctest: +SKIP
        >>> [f.key for f in functions[0].inputs if f.quant]            # doctest: +SKIP
        ['weight', 'weight_1']
        """
        from .codegen import generate_source
        from .quantize import format_of, quantizable_params

        format_of(fmt, "CProgram.quantized")
        if self.generated_from is None:
            raise ArgumentError("CProgram.quantized: this program does not hold the graph it was generated from")
        nodes, specs, options = self.generated_from
        trained = [spec.name for spec in specs if spec.cotangents or spec.name != "evaluate"]
        if trained:
            raise ArgumentError(
                f"quantized weights are for inference: compile the model with inference=True (it has {trained})"
            )
        params = {k: v for spec in specs for k, v in spec.inputs.items() if k in options.param_names}
        chosen = quantizable_params(nodes, params)
        return generate_source(nodes, specs, replace(options, quantized=dict.fromkeys(chosen, fmt)))

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
        return load_functions(self.build(f"CBackend: compiling {name}"), self.functions, self.backend)

    def export(
        self,
        directory: str | Path,
        params: Mapping[str, np.ndarray],
        pm: Any = None,
        *,
        overwrite: bool = False,
        params_source: str = "given",
    ) -> ExportResult:
        """Write the standalone program (see :func:`~mithril_backend_c.export`); returns its
        :class:`~mithril_backend_c.ExportResult`."""
        return export_program(self, Path(directory), params, overwrite=overwrite, params_source=params_source, pm=pm)


def load_functions(path: Path, functions: list[CFunction], backend: Any) -> dict[str, Callable[..., Any]]:
    """Load the library at ``path`` through ``cffi``, declared with the entry points' own header text
    (:func:`~mithril_backend_c.csource.entry_declarations`), and bind each to a Python caller.

    >>> calls = load_functions(build_library(text), layouts, ml.CBackend())   # doctest: +SKIP
    >>> calls["evaluate"]({}, {"left": left, "right": right})                  # doctest: +SKIP
    {'output': array([2., 2., 2., 2.], dtype=float32)}
    """
    cdef = "\n".join(entry_declarations(fn) for fn in functions)
    native = toolchain.load_library(path, cdef)
    return {fn.name: _bind(native, fn, backend) for fn in functions}


_NOTHING_HELD = object()
"""What a thread's struct holds before its first call: ``None`` (or any value a caller passes) must not look
held, or it would skip ``attach``'s checks."""


def _bind(native: toolchain.NativeLibrary, fn: CFunction, backend: Any) -> Callable[..., Any]:
    """A Python caller of entry point ``fn``: ``call(params, data[, cotangents])`` -> output dict(s).

    Each thread has its own argument struct (``ffi.new``), workspace and error array; a call points the
    struct's fields at the inputs (checked: type, dtype, C order, alignment, shape) and at fresh ``np.empty``
    outputs. ``from_buffer`` (:meth:`~mithril_backend_c.toolchain.NativeLibrary.buffer_view`) gives an
    array's address without copying; the struct keeps only addresses,
    so each thread holds the input arrays it points at until the next call replaces them. An input passed
    again as the same array object takes a fast path only while it still has the compiled shape, dtype
    and C strides and the address checked when it was attached (a few compares: an array reshaped, retyped,
    restrided or resized in place since is checked again, like any new input). ``call.strict`` is the same
    call for :mod:`mithril.backends.direct`: it raises ``InputsNeedChecking`` where ``call`` would convert or
    refuse. ``call.inputs_checked()`` counts this thread's inputs checked and attached (the fast path adds none).
    """
    ffi, cfunc = native.ffi, getattr(native.lib, fn.symbol)
    struct = f"{fn.symbol}_args *"
    sources = {"param": 0, "data": 1, "cotangent": 2}
    inputs = [(i, f.key, sources[f.role], np.dtype(f.dtype), f.name, passed_shape(f)) for i, f in enumerate(fn.inputs)]
    workspace = fn.workspace
    threads = int(getattr(backend, "threads", 1))
    ndarray, from_buffer = np.ndarray, native.buffer_view()

    class PerThread(threading.local):
        """This thread's struct, workspace, error array and held inputs (made on its first call)."""

        def __init__(self) -> None:
            args = ffi.new(struct)
            ws = np.empty(workspace, dtype=np.uint8) if workspace else None
            error = np.zeros(3, dtype=np.int64)
            args.workspace = from_buffer(ws) if ws is not None else ffi.NULL
            args.error = ffi.cast("int64_t *", from_buffer(error))
            # the arrays the struct points at, cells reading their addresses now, the addresses checked,
            # and their from_buffer views (kept alive while the struct points at them)
            held: list[Any] = [_NOTHING_HELD] * len(inputs)  # never a caller's value: the first call attaches
            cells: list[Any] = [None] * len(inputs)
            addresses: list[int] = [0] * len(inputs)
            buffers: list[Any] = [None] * len(inputs)
            self.s = (args, ws, error, held, cells, addresses, buffers)
            self.checked = 0  # inputs checked and attached by this thread

    local = PerThread()

    def attach(i: int, x: Any, strict: bool) -> None:
        """Check input ``i`` (converted unless ``strict``), point the struct at it and hold it."""
        _, key, _, dtype, name, shape = inputs[i]
        args, _, _, held, cells, addresses, buffers = local.s
        if (
            type(x) is not ndarray
            or (x.dtype is not dtype and x.dtype != dtype)
            or not x.flags.c_contiguous
            or not x.flags.aligned
        ):
            if strict:
                raise InputsNeedChecking(key)
            x = np.asarray(x, dtype=dtype, order="C")
            if not x.flags.aligned:  # generated loops may assume elements at aligned addresses
                x = x.copy()
        if x.shape != shape:  # the C code reads exactly this many elements
            if strict:
                raise InputsNeedChecking(key)
            raise ShapeError(f"{fn.name}: {key!r} has shape {x.shape}, the generated C expects {shape}")
        buffer, cell = from_buffer(x), address_cell(x)
        setattr(args, name, buffer)
        held[i], cells[i], addresses[i], buffers[i] = x, cell, cell.value, buffer
        local.checked += 1

    namespace: dict[str, Any] = {
        "local": local, "attach": attach, "empty": np.empty, "from_buffer": from_buffer, "cfunc": cfunc,
        "threads": threads, "native_error": native_error, "fn": fn, "backend": backend,
    }  # fmt: skip
    exec(compile(caller_source(fn, namespace), f"<mithril-c:{fn.name}>", "exec"), namespace)  # our own generated code
    call, call.strict = namespace["caller"](False), namespace["caller"](True)
    call.inputs_checked = lambda: local.checked
    call.__name__ = fn.name
    return call  # type: ignore[no-any-return]


def passed_shape(f: CField) -> tuple[int, ...]:
    """The shape of the array a caller passes for field ``f``: its shape, or for a block-quantized
    parameter its blocks' bytes ``[rows, row bytes]`` (:func:`~mithril_backend_c.quantize.quantize`)."""
    if not f.quant:
        return tuple(f.shape)
    return (f.shape[0], FORMATS[f.quant].row_bytes(math.prod(f.shape[1:])))


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The strides NumPy gives a new C-ordered array of ``shape`` (an axis of size 0 does not scale the
    strides before it).

    >>> c_strides((2, 3, 4), 4)
    (48, 16, 4)
    """
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def caller_source(fn: CFunction, namespace: dict[str, Any]) -> str:
    """Python source of ``caller(strict)``, which makes the caller of entry point ``fn`` (``call``; with
    ``strict``, the form that raises ``InputsNeedChecking`` where ``call`` converts or refuses), its inputs
    and outputs written out: no loops or lookups per call beyond the ones it needs (one source compiled
    once for both forms, ``strict`` a closure constant). Keys reach
    the source only through :func:`~mithril.extend.escape.python_literal`; shapes, strides and
    dtypes are constants put in ``namespace``; struct fields are C identifiers made by ``field_name``.

    An input takes the fast path (no ``attach``) only when it is the array held since the last check and
    still has the compiled shape, dtype and C strides and the same data address (read through
    :func:`~mithril_backend_c.array_address.address_cell`, only while the array is held): an array changed
    in place since (``x.shape = ...``, ``x.dtype = ...``, ``x.strides = ...``, ``x.resize(...)``) is
    checked again.

    >>> print(caller_source(fn, {}))     # doctest: +SKIP
    def caller(strict):
        def call(params, data, cotangents=None):
            args, _, error, held, cells, addresses, _ = local.s
            x = data['left']
            if x is not held[0] or x.shape != shape_x0 or x.dtype is not dtype_x0 or x.strides != strides_x0 or \
                    cells[0].value != addresses[0]:   # (one line in the source)
                attach(0, x, strict)
            ...
            return {'output': y0_0}
        return call
    """
    dicts = {"param": "params", "data": "data", "cotangent": "cotangents"}
    lines = [
        "def call(params, data, cotangents=None):",
        "    args, _, error, held, cells, addresses, _ = local.s",
    ]
    for i, f in enumerate(fn.inputs):
        dtype = np.dtype(f.dtype)
        shape = passed_shape(f)
        namespace[f"shape_x{i}"], namespace[f"dtype_x{i}"] = shape, dtype
        namespace[f"strides_x{i}"] = c_strides(shape, dtype.itemsize)
        lines += [
            f"    x = {dicts[f.role]}[{escape.python_literal(f.key)}]",
            f"    if x is not held[{i}] or x.shape != shape_x{i} or x.dtype is not dtype_x{i} "
            f"or x.strides != strides_x{i} or cells[{i}].value != addresses[{i}]:",
            f"        attach({i}, x, strict)",
        ]
    results = []
    for g, group in enumerate(fn.returns):
        items = []
        for o, f in enumerate(group):
            if not (f.name.isidentifier() and not keyword.iskeyword(f.name)):
                raise ValueError(f"{fn.name}: struct field {f.name!r} is not an identifier")  # field_name makes them
            y = f"y{g}_{o}"
            namespace[f"shape_{y}"], namespace[f"dtype_{y}"] = tuple(f.shape), np.dtype(f.dtype)
            lines += [f"    {y} = empty(shape_{y}, dtype_{y})", f"    args.{f.name} = from_buffer({y})"]
            items.append(f"{escape.python_literal(f.key)}: {y}")
        results.append("{" + ", ".join(items) + "}")
    if fn.random:
        lines.append("    args.seed = int(backend.rng.integers(0, 1 << 63))")
    returned = results[0] if len(results) == 1 else "(" + ", ".join(results) + ",)"
    lines += [
        "    status = cfunc(args, threads)",
        "    if status:",
        "        raise native_error(fn, status, error)",
        f"    return {returned}",
    ]
    body = "".join(f"    {line}\n" for line in lines)
    return f"def caller(strict):\n{body}    return call\n"


def native_error(fn: CFunction, status: int, error: Any) -> MithrilError:
    """The Mithril error for a nonzero return ``status`` of generated function ``fn`` (``error``: the
    ``int64[3]`` it filled: check site, bad value, flat position); see :func:`status_error`.

    >>> native_error(fn, MT_ERR_ALLOC, np.zeros(3, np.int64))  # doctest: +SKIP
    NativeMemoryError('evaluate: the generated C could not allocate its 4096-byte workspace')
    """
    return status_error(fn.name, status, error, fn.checks, fn.workspace)


def status_error(
    where: str, status: int, error: Sequence[int], checks: Sequence[IndexSite] = (), workspace: int = 0
) -> MithrilError:
    """The Mithril error for a nonzero return ``status`` of generated code (``where``: the function's
    name; ``error``: check site, bad value, flat position; ``checks``: the sites its check numbers refer
    to; ``workspace``: the bytes it failed to allocate). An index error names the primitive and its path,
    the value, its position (in the input key when the indices are one) and the valid range.

    >>> status_error("evaluate", MT_ERR_INDEX, [0, 7, 1])
    IndexRangeError('evaluate: the generated C met index 7 at position 1 out of range')
    """
    if status == MT_ERR_ALLOC:
        return NativeMemoryError(
            f"{where}: the generated C could not allocate its {workspace}-byte workspace (malloc failed)"
        )
    if status == MT_ERR_INDEX:
        site, value, position = (int(v) for v in error[:3])
        if 0 <= site < len(checks):
            check = checks[site]
            at = f"at flat position {position}"
            if check.shape and 0 <= position < math.prod(check.shape):
                at = f"at position {tuple(int(i) for i in np.unravel_index(position, check.shape))}"
            source = f"{check.key!r}" if check.key is not None else f"the computed {check.operand!r} (not a data key)"
            return IndexRangeError(
                f"{where}: {source} holds index {value} {at}, out of range for {check.primitive} at "
                f"{check.path or '<root>'} (valid: 0 <= index < {check.bound}); the generated C stopped "
                "before reading or writing out of bounds"
            )
        return IndexRangeError(f"{where}: the generated C met index {value} at position {position} out of range")
    return NativeError(f"{where}: the generated C returned the unknown error code {status} (expected 0)")
