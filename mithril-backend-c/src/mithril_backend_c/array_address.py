"""A held NumPy array's data address, read again in about 50 ns per call.

The generated callers (:mod:`~mithril_backend_c.program`) hold the arrays their C structs point at, and on
each call check that a held array's memory has not moved (``x.resize(..., refcheck=False)`` or
``x.__setstate__`` reallocate in place). ``x.__array_interface__`` or ``x.ctypes.data`` cost about 1 us and a
``cffi`` buffer view about 170 ns; on CPython the address is the ``data`` field of NumPy's array struct,
which :func:`address_cell` reads through a ``ctypes`` cell made once per held array. The field's offset is
verified against NumPy's own report of the address before it is used; where it cannot be (another Python
implementation, another layout), the cell asks ``__array_interface__`` instead: slower, never wrong.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

import numpy as np

__all__ = ["address_cell", "data_field_offset"]


def _reported_address(x: np.ndarray) -> int:
    return int(x.__array_interface__["data"][0])


@functools.cache
def data_field_offset() -> int | None:
    """The byte offset of the data pointer in an ``ndarray`` object on this interpreter (right after the
    object header in NumPy's C struct), or ``None`` where it cannot be read or does not match NumPy's report.

    >>> data_field_offset()  # doctest: +SKIP
    16
    """
    if sys.implementation.name != "cpython":  # id() is an address only on CPython
        return None
    offset = object.__basicsize__
    if offset + ctypes.sizeof(ctypes.c_size_t) > np.ndarray.__basicsize__:
        return None
    probes = [np.empty(n, dtype) for n, dtype in ((1, np.uint8), (7, np.float32), (1 << 12, np.float64))]
    probes.append(probes[2][3:])  # a view: its address is inside another array's memory
    for probe in probes:
        if ctypes.c_size_t.from_address(id(probe) + offset).value != _reported_address(probe):
            return None
    return offset


class _ReportedAddress:
    """The fallback cell: ``.value`` is NumPy's report of the array's current address."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    @property
    def value(self) -> int:
        return _reported_address(self._array)


def address_cell(x: np.ndarray) -> Any:
    """An object whose ``.value`` is the current data address of ``x`` (an exact ``ndarray``), valid for as
    long as the caller keeps ``x`` alive: read it only while holding ``x``.

    >>> x = np.zeros(4, np.float32)
    >>> cell = address_cell(x)
    >>> cell.value == x.ctypes.data
    True
    """
    if type(x) is not np.ndarray:
        raise TypeError(f"address_cell reads exact numpy.ndarray objects, got {type(x).__name__}")
    offset = data_field_offset()
    if offset is None:
        return _ReportedAddress(x)
    return ctypes.c_size_t.from_address(id(x) + offset)
