"""``CBackend``: compiles the flat graph (forward and symbolic backward) to C, builds it with -O3 and
OpenMP (plus a BLAS when one is found), and calls it through cffi. Arrays are NumPy arrays.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Add
    >>> backend = ml.CBackend(dtype=ml.float64, threads=1)                        # doctest: +SKIP
    >>> pm = ml.compile(Add(), backend, shapes={"left": [4], "right": [4]})       # doctest: +SKIP
    >>> pm.evaluate({}, {"left": backend.ones(4), "right": backend.ones(4)})     # doctest: +SKIP
    {'output': array([2., 2., 2., 2.])}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from mithril.extend import NumpyArrays, ThreadedBackend
from mithril.types import Dtype, Kind

from .codegen import generate_source
from .options import SourceOptions
from .program import CProgram

__all__ = ["CBackend"]


class CBackend(NumpyArrays, ThreadedBackend[np.ndarray]):
    """Backend generating C; ``threads`` is the OpenMP thread count of each call (default: all cores).

    Every value's shape must be known at compile time: pass ``ml.compile(shapes=...)``.
    """

    backend_type: ClassVar[str] = "c"
    supports_autograd: ClassVar[bool] = False
    codegen: ClassVar[str] = "c"
    supported_dtypes: ClassVar[tuple[Dtype, ...]] = (Dtype.float32, Dtype.float64)

    def native_dtype(self, dtype: Dtype | Kind | None = None) -> np.dtype:
        """``None``/``"float"`` -> the backend float dtype; ``"int"`` -> int64; ``"bool"`` -> bool."""
        resolved = self.resolve_dtype(dtype)
        if resolved in (Dtype.bfloat16, Dtype.float16):
            raise TypeError(f"CBackend cannot represent {resolved.value}; use float32 or float64")
        native: np.dtype = np.dtype(resolved.value)
        return native

    def array(self, data: Any, dtype: Dtype | Kind | None = None) -> np.ndarray:
        """A C-contiguous ``np.ndarray``; floats get the backend dtype, ints int64, bools bool."""
        if dtype is not None:
            return np.asarray(data, dtype=self.native_dtype(dtype), order="C")
        values = np.asarray(data)
        kind = values.dtype.kind
        if kind == "f":
            return np.asarray(values, dtype=self.native_dtype(), order="C")
        if kind in "iu":
            return np.asarray(values, dtype=np.int64, order="C")
        if kind == "b":
            return np.asarray(values, order="C")
        raise TypeError(f"CBackend.array: unsupported data of dtype {values.dtype} ({type(data).__name__})")

    def generate_program(self, graph: Any, functions: Sequence[Any], *, param_names: set[str], header: str) -> CProgram:
        """C source for every function plus a loader (see :class:`~mithril_backend_c.program.CProgram`)."""
        options = SourceOptions(
            dtype=self.dtype, param_names=frozenset(param_names), header=header, max_parts=self.threads,
            emitters=self._impls,
        )  # fmt: skip
        source, entry_points = generate_source(graph.nodes, functions, options)
        return CProgram(source, entry_points, self, (list(graph.nodes), list(functions), options))

    def evaluate_constant(self, primitive: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
        """No folding at compile time (constants are embedded in the C source instead)."""
        return NotImplemented
