"""``NumpyBackend``: the reference backend. Arrays are ``np.ndarray``; gradients come from the symbolic
backward graph (no autograd).

Example:
    >>> from mithril.types import Dtype
    >>> backend = NumpyBackend(dtype=Dtype.float64)
    >>> backend.array([1, 2]).dtype, backend.array([1.5]).dtype
    (dtype('int64'), dtype('float64'))
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from mithril.backends.backend import Backend
from mithril.errors import DtypeError
from mithril.types import Dtype, Kind

__all__ = ["NumpyBackend"]


class NumpyBackend(Backend):
    """Backend computing with plain NumPy on the CPU, in float16, float32 (default) or float64."""

    backend_type: ClassVar[str] = "numpy"
    supports_autograd: ClassVar[bool] = False
    codegen: ClassVar[str] = "python"
    supported_dtypes: ClassVar[tuple[Dtype, ...]] = (Dtype.float16, Dtype.float32, Dtype.float64)

    def native_dtype(self, dtype: Dtype | Kind | None = None) -> np.dtype:
        """``None`` or ``"float"`` -> the backend float dtype; ``"int"`` -> int64; ``"bool"`` -> bool.

        >>> NumpyBackend().native_dtype("int")
        dtype('int64')
        """
        resolved = self.resolve_dtype(dtype)
        if resolved is Dtype.bfloat16:
            raise DtypeError("NumpyBackend cannot represent bfloat16; use float16, float32 or float64")
        return np.dtype(resolved.value)

    def array(self, data: Any, dtype: Dtype | Kind | None = None) -> np.ndarray:
        """An ``np.ndarray`` from data; floats get the backend dtype, ints int64, bools bool.

        An explicit ``dtype`` (an ``ml.Dtype`` or a kind string) wins. Arrays that already have the
        target dtype are not copied.

        >>> NumpyBackend().array(3.0).dtype
        dtype('float32')
        """
        if dtype is not None:
            return np.asarray(data, dtype=self.native_dtype(dtype))
        values = np.asarray(data)
        kind = values.dtype.kind
        if kind == "f":
            target = self.native_dtype()
        elif kind in "iu":
            target = np.dtype(np.int64)
        elif kind == "b":
            return values
        else:
            raise DtypeError(f"NumpyBackend.array: unsupported data of dtype {values.dtype} ({type(data).__name__})")
        return values.astype(target, copy=False)

    def to_numpy(self, array: Any) -> np.ndarray:
        """The array itself (NumPy arrays are already NumPy)."""
        return np.asarray(array)

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is a NumPy array (or NumPy scalar)."""
        return isinstance(value, (np.ndarray, np.generic))  # reductions may return NumPy scalars

    def generate_program(self, graph: Any, functions: Any, *, param_names: set[str], header: str) -> Any:
        """Core's generated Python, where elementwise ops write into intermediates nothing reads
        afterwards instead of allocating (see :mod:`mithril_backend_numpy._program`)."""
        from ._program import generate_program

        return generate_program(self, graph, functions, param_names=param_names, header=header)
