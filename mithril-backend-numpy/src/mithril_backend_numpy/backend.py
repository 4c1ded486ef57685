"""``NumpyBackend``: the reference backend. Arrays are ``np.ndarray``; gradients come from the symbolic
backward graph (no autograd).

Example:
    >>> from mithril.types import Dtype
    >>> backend = NumpyBackend(dtype=Dtype.float64)
    >>> backend.array([1, 2]).dtype, backend.array([1.5]).dtype
    (dtype('int64'), dtype('float64'))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from mithril.extend import Backend, NumpyArrays, dtype_table
from mithril.types import Dtype, Kind

from . import _program

__all__ = ["NumpyBackend"]


class NumpyBackend(NumpyArrays, Backend[np.ndarray]):
    """Backend computing with plain NumPy on the CPU, in float16, float32 (default) or float64."""

    backend_type: ClassVar[str] = "numpy"
    supported_dtypes: ClassVar[tuple[Dtype, ...]] = (Dtype.float16, Dtype.float32, Dtype.float64)
    native_dtypes = dtype_table(np, supported_dtypes, np.dtype)
    native_dtype = Backend.dtype_from_table
    xp: ClassVar[Any] = np

    def array(self, data: Any, dtype: Dtype | Kind | None = None) -> np.ndarray:
        """An ``np.ndarray`` from data; floats get the backend dtype, ints int64, bools bool.

        An explicit ``dtype`` (an ``ml.Dtype`` or a kind string) wins. Arrays that already have the
        target dtype are not copied.

        >>> NumpyBackend().array(3.0).dtype
        dtype('float32')
        """
        values = np.asarray(data)
        target = self.target_dtype(values.dtype.kind, dtype, values, data)
        return values if target is None else values.astype(target, copy=False)

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is a NumPy array (or NumPy scalar)."""
        return isinstance(value, (np.ndarray, np.generic))  # reductions may return NumPy scalars

    def generate_program(self, graph: Any, functions: Any, *, param_names: set[str], header: str) -> Any:
        """Core's generated Python, where elementwise ops write into intermediates nothing reads
        afterwards instead of allocating (see :mod:`mithril_backend_numpy._program`)."""
        reusing = _program.reusing_graph(graph, functions)
        return super().generate_program(reusing, functions, param_names=param_names, header=header)

    def implementation(self, primitive: str) -> Callable[..., Any]:
        """The implementation of ``primitive``; ``add__into_left`` is ``add`` writing into ``left``."""
        return _program.into(primitive) if "__into_" in primitive else super().implementation(primitive)
