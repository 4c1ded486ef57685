"""The C backend's public kernel-compiling API: what other packages use to turn graph nodes into C and C
into loaded libraries (the GGML backend runs such kernels as custom ops; ``mithril_models.export_program``
writes standalone programs). Everything else in ``mithril_backend_c`` is private to it.

- Generating C: :class:`SourceOptions` (dtype, symbol prefix, threads, partitioned, the ``#include`` lines
  ...), :func:`kernel_source` (a node or a fused group of nodes as one kernel entry point),
  :func:`generate_c` / :func:`generate_source` (whole functions of a graph), :func:`plan_fusion` (how the
  C backend groups nodes), :func:`emitter_table`, :data:`ELEMENTWISE_PRIMITIVES`,
  :data:`ALIAS_PRIMITIVES`; the result as data: :class:`CSource`, :class:`CFunction` (an entry point's
  argument struct: :class:`CField`), :class:`IndexSite` (one index check), :class:`FusionUnit`;
  :class:`NotPartitionable`.
- Building and loading: :data:`INCLUDES`, :func:`build_library`, :func:`load_library`
  (:class:`NativeLibrary`), :func:`load_functions` (Python callers of entry points); the return codes
  :data:`MT_OK`, :data:`MT_ERR_ALLOC`, :data:`MT_ERR_INDEX` and :func:`status_error` (the Mithril error
  of a nonzero one).
- Standalone programs: :func:`compiled_source` (the C of a model compiled with ``CBackend``),
  :func:`merge_sources` and :meth:`CSource.renamed` (several models' entry points in one library),
  :func:`standalone_source` (``model.c``, runtime inlined), :func:`model_header` (``model.h``),
  :func:`entry_declarations`.
- Quantized weights (ggml's ``q8_0``/``q4_0`` blocks): :data:`FORMATS`, :func:`quantize` (NumPy),
  :func:`dequantize`, :func:`quantized_nbytes`, :func:`quantizable_params` (which parameters a model can
  store that way), :func:`quantizer` (the C runtime's quantizer, for per-call quantization);
  ``compiled_source(pm, quantize=...)`` and ``SourceOptions(quantized=...)`` generate the C that reads them.
- Errors: :class:`NativeError`, :class:`NativeMemoryError`, :class:`CacheError`, :class:`CCompileError`.

Example (``relu`` of 4 floats as a kernel; building it needs a C compiler)::

    from mithril_backend_c import kernels
    kernel = kernels.kernel_source([node], [node.inputs["input"]], [node.output], prefix="k0")
    kernel.function.symbol                      # 'k0_kernel', called as k0_kernel(&args, threads)
    library = kernels.load_library(kernels.build_library("\\n".join([*kernels.INCLUDES, kernel.text])),
                                   kernels.entry_declarations(kernel.function))
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mithril.errors import ArgumentError
from mithril.extend import FunctionSpec, Node, Value
from mithril.types import Dtype

from .codegen import generate_c, generate_source
from .context import ALIAS_PRIMITIVES, Ctx, Emitter, IndexSite
from .csource import (
    INCLUDES,
    MT_ERR_ALLOC,
    MT_ERR_INDEX,
    MT_OK,
    CField,
    CFunction,
    CSource,
    entry_declarations,
    merge_sources,
)
from .emitters import emitter_table
from .emitters.elementwise import EXPRESSIONS
from .emitters.fused import Unit as FusionUnit
from .errors import CacheError, NativeError, NativeMemoryError
from .fusion import plan
from .layout import value_dtypes
from .options import Includes, SourceOptions
from .partitioning import NotPartitionable
from .program import CProgram, load_functions, status_error
from .quantize import FORMATS, QuantFormat, dequantize, quantizable_params, quantize, quantized_nbytes
from .standalone import model_header, standalone_source
from .toolchain import CCompileError, NativeLibrary, build_library, load_library

__all__ = [
    "ALIAS_PRIMITIVES",
    "ELEMENTWISE_PRIMITIVES",
    "FORMATS",
    "INCLUDES",
    "MT_ERR_ALLOC",
    "MT_ERR_INDEX",
    "MT_OK",
    "CCompileError",
    "CField",
    "CFunction",
    "CSource",
    "CacheError",
    "Emitter",
    "FusionUnit",
    "Includes",
    "IndexSite",
    "KernelSource",
    "NativeError",
    "NativeLibrary",
    "NativeMemoryError",
    "NotPartitionable",
    "QuantFormat",
    "SourceOptions",
    "build_library",
    "compiled_source",
    "dequantize",
    "emitter_table",
    "entry_declarations",
    "generate_c",
    "generate_source",
    "kernel_source",
    "load_functions",
    "load_library",
    "merge_sources",
    "model_header",
    "plan_fusion",
    "quantizable_params",
    "quantize",
    "quantized_nbytes",
    "quantizer",
    "standalone_source",
    "status_error",
]  # fmt: skip

ELEMENTWISE_PRIMITIVES = frozenset(EXPRESSIONS)
"""The elementwise primitives: the ones fusion chains (each a C expression of its operands)."""


@dataclass(frozen=True)
class KernelSource:
    """A kernel as C: ``text``, its definitions (without ``#include`` lines: the file that holds it starts
    with :data:`INCLUDES`), and ``function``, its entry point ``<prefix>_kernel``: inputs ``in_x0``,
    ``in_x1`` ..., outputs ``out_y0`` ... in its argument struct ``<prefix>_kernel_args``."""

    text: str
    function: CFunction


def kernel_source(
    nodes: Sequence[Node],
    inputs: Sequence[Value],
    outputs: Sequence[Value],
    *,
    prefix: str,
    header: str = "",
    dtype: Dtype = Dtype.float32,
    max_parts: int = 1,
    partitioned: bool = False,
    emitters: Mapping[str, Emitter] | None = None,
) -> KernelSource:
    """The C of one kernel computing ``outputs`` from ``inputs`` through ``nodes`` (one node, or a fused
    group of nodes: :func:`plan_fusion`), with every shape static. Its entry point is called as
    ``<prefix>_kernel(&args, nt)``, or, ``partitioned``, ``<prefix>_kernel(&args, nt, part, nparts)``
    computing one part (raises :class:`NotPartitionable` when the code cannot be split that way; at most
    ``max_parts`` parts). ``header``: text for a comment on top (escaped); ``emitters``: default
    :func:`emitter_table`.

    >>> kernel = kernel_source([node], [node.inputs["input"]], [node.output], prefix="k0")   # doctest: +SKIP
    >>> kernel.function.symbol, [f.name for f in kernel.function.inputs]                      # doctest: +SKIP
    ('k0_kernel', ['in_x0'])
    """
    spec = FunctionSpec(
        name="kernel",
        inputs={f"x{i}": value for i, value in enumerate(inputs)},
        cotangents={},
        returns=[{f"y{j}": value for j, value in enumerate(outputs)}],
    )
    options = SourceOptions(
        dtype=dtype, header=header, prefix=prefix, max_parts=max_parts, partitioned=partitioned,
        emitters=emitters, includes="none",
    )  # fmt: skip
    text, (function,) = generate_c(list(nodes), [spec], options)
    return KernelSource(text, function)


def plan_fusion(
    nodes: Sequence[Node],
    returned: set[int],
    *,
    dtype: Dtype = Dtype.float32,
    emitters: Mapping[str, Emitter] | None = None,
    single_output: bool = False,
) -> list[FusionUnit]:
    """The C backend's grouping of ``nodes`` (in order) into units: lone nodes, elementwise chains and
    convolutions with their elementwise epilogue (:attr:`FusionUnit.fused`); ``returned``: the ids of the
    values the caller reads. ``single_output``: cut groups so that each stores only its last result.

    >>> [unit.label for unit in plan_fusion(graph.nodes, {output.id})]   # doctest: +SKIP
    ['conv2d @ conv1 + add, relu', 'max_pool2d @ pool']
    """
    ctx = Ctx(dtype, value_dtypes(nodes, [], dtype))
    table = emitters if emitters is not None else emitter_table()
    return plan(nodes, returned, ctx, table, single_output=single_output)


_QUANTIZER = (
    "void mithril_quantize(int format, const float *x, void *y, long rows, long k, int nt) "
    "{ mt_quantize_weights(format, x, y, rows, k, nt); }\n"
)


@functools.cache
def quantizer() -> Callable[[str, np.ndarray, int, int], None]:
    """The C runtime's weight quantizer (``mt_quantize_weights``, the bytes of :func:`quantize`, threaded)
    as ``quantize_into(fmt, rows, address, threads)``: ``rows`` (float32 ``[rows, k]``, C order) quantized
    into the memory at ``address`` (``rows * row_bytes(k)`` bytes, e.g. a ggml tensor's data). Built once.

    >>> out = np.empty((2, 34), np.uint8)                                                  # doctest: +SKIP
    >>> quantizer()("q8_0", np.ones((2, 32), np.float32), out.ctypes.data, 1)              # doctest: +SKIP
    """
    native = load_library(build_library("\n".join([*INCLUDES, _QUANTIZER])),
                          "void mithril_quantize(int, const float *, void *, long, long, int);")  # fmt: skip

    def quantize_into(fmt: str, rows: np.ndarray, address: int, threads: int) -> None:
        if rows.dtype != np.float32 or rows.ndim != 2 or not rows.flags.c_contiguous or rows.shape[1] % 32:
            got = f"{rows.dtype}{list(rows.shape)}"
            raise ArgumentError(f"quantizer: needs C-contiguous float32 rows of whole blocks, got {got}")
        ffi = native.ffi
        native.lib.mithril_quantize(FORMATS[fmt].code, ffi.cast("const float *", rows.ctypes.data),
                                    ffi.cast("void *", address), rows.shape[0], rows.shape[1], threads)  # fmt: skip

    return quantize_into


def compiled_source(pm: Any, quantize: str | None = None) -> tuple[CSource, list[CFunction]]:
    """The generated C of a model compiled with ``CBackend`` and its entry points' layouts; with
    ``quantize`` (``"q8_0"``, ``"q4_0"``; an inference model) the C with the weights that can be
    (:func:`quantizable_params`) passed block-quantized (their fields' ``quant`` says which).

    >>> source, functions = compiled_source(ml.compile(model, ml.CBackend(), shapes=shapes))  # doctest: +SKIP
    >>> [f.symbol for f in functions]                                                         # doctest: +SKIP
    ['mithril_evaluate']
    """
    program = getattr(pm, "program", None)
    if not isinstance(program, CProgram):
        backend = type(getattr(pm, "backend", pm)).__name__
        raise ArgumentError(f"compiled_source needs a model compiled with ml.CBackend(), not {backend}")
    if quantize is not None:
        return program.quantized(quantize)
    return program.code, list(program.functions)
