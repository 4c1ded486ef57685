"""The weights file of an exported program: a small header naming every tensor's dtype and shape, a
checksum, then the raw little-endian data at 64-byte aligned offsets (mmap-able; the C reader is
``templates/weights.h``, which documents the byte layout).

Example:
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "weights.bin")
    >>> write_weights(path, [Tensor("w", np.ones((2, 3), np.float32)), Tensor("input", shape=(1, 3), role=INPUT)])
    384
    >>> [(t.name, t.shape) for t in read_weights(path)]
    [('w', (2, 3)), ('input', (1, 3))]
"""

from __future__ import annotations

import math
import os
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from mithril.errors import ArgumentError, CheckpointError
from mithril.extend import write_file_atomically

__all__ = ["INPUT", "QUANTIZED", "WEIGHT", "Tensor", "checksum", "read_weights", "write_weights"]

MAGIC = b"MTWEIGHT"
VERSION = 1
HEADER = 64
ENTRY = 128
NAME = 48
MAX_DIMS = 6
ALIGN = 64
WEIGHT, INPUT = 0, 1
DTYPES: dict[np.dtype, int] = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int64): 3}
"""NumPy dtype -> the dtype code of the file (``MTW_F32``, ``MTW_F64``, ``MTW_I64`` in weights.h)."""
QUANTIZED = {"q8_0": (4, 34), "q4_0": (5, 18)}
"""Block format -> (dtype code ``MTW_Q8_0``/``MTW_Q4_0``, bytes per block of 32 values): ggml's layouts
(see :mod:`mithril_backend_c.quantize`). Such a tensor of shape ``[rows, ...]`` holds ``rows`` rows of
``prod(shape[1:]) / 32`` blocks."""
_ENTRY = struct.Struct(f"<{NAME}s4I{MAX_DIMS}QQQ")
_HEADER = struct.Struct("<8sIIQQQ24x")
_FLOAT32 = np.dtype(np.float32)
_INT64_MAX = 2**63 - 1


def _quantized_nbytes(shape: Sequence[int], quant: str) -> int:
    """Bytes of a tensor of ``shape`` in block format ``quant``."""
    return int(shape[0]) * math.prod(shape[1:]) // 32 * QUANTIZED[quant][1] if len(shape) > 1 else 0


@dataclass(frozen=True)
class Tensor:
    """One entry of the file: a weight with its data, or a data input of the program (shape only). A
    block-quantized weight (``quant``: a key of :data:`QUANTIZED`) has its blocks as ``data`` (uint8) and
    its logical ``shape``.

    >>> Tensor("input", shape=(1, 3, 8, 8), role=INPUT).nbytes
    0
    >>> Tensor("w", np.zeros((2, 34), np.uint8), shape=(2, 32), quant="q8_0").nbytes
    68
    """

    name: str
    data: np.ndarray | None = None
    shape: tuple[int, ...] | None = None
    role: int = WEIGHT
    dtype: np.dtype = _FLOAT32
    quant: str = ""

    @property
    def code(self) -> int:
        """The dtype code of the file (:data:`DTYPES`, :data:`QUANTIZED`)."""
        return QUANTIZED[self.quant][0] if self.quant else DTYPES[np.dtype(self.dtype)]

    def __post_init__(self) -> None:
        if self.quant:
            self._check_quantized()
            return
        if self.data is not None:
            object.__setattr__(self, "data", np.ascontiguousarray(self.data))
            object.__setattr__(self, "shape", tuple(int(d) for d in self.data.shape))
            object.__setattr__(self, "dtype", self.data.dtype)
        if self.shape is None:
            raise ArgumentError(f"weights file: tensor {self.name!r} needs data or a shape")
        if (self.role == WEIGHT) != (self.data is not None):
            raise ArgumentError(f"weights file: tensor {self.name!r}: a weight has data, an input has none")
        encoded = self.name.encode()
        if not encoded or len(encoded) >= NAME or b"\0" in encoded:
            raise ArgumentError(f"weights file: tensor name {self.name!r} must be 1..{NAME - 1} bytes without NUL")
        if np.dtype(self.dtype) not in DTYPES:
            raise ArgumentError(
                f"weights file: tensor {self.name!r} has dtype {self.dtype}, expected one of {[str(d) for d in DTYPES]}"
            )
        if len(self.shape) > MAX_DIMS:
            raise ArgumentError(f"weights file: tensor {self.name!r} has {len(self.shape)} dims, at most {MAX_DIMS}")

    def _check_quantized(self) -> None:
        if self.quant not in QUANTIZED or self.data is None or self.shape is None or self.role != WEIGHT:
            raise ArgumentError(
                f"weights file: quantized tensor {self.name!r} needs a format of {sorted(QUANTIZED)}, its blocks "
                f"and its shape (got {self.quant!r})"
            )
        object.__setattr__(self, "data", np.ascontiguousarray(self.data, dtype=np.uint8))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(np.uint8))
        want = _quantized_nbytes(self.shape, self.quant)
        if len(self.shape) < 2 or math.prod(self.shape[1:]) % 32 or self.data.nbytes != want:
            raise ArgumentError(
                f"weights file: quantized tensor {self.name!r} of shape {list(self.shape)} needs rows of whole blocks "
                f"and {want} bytes of {self.quant} blocks, got {self.data.nbytes}"
            )
        if len(self.shape) > MAX_DIMS or not self.name.encode() or len(self.name.encode()) >= NAME:
            raise ArgumentError(f"weights file: tensor {self.name!r}: name or dims out of range")

    @property
    def dims(self) -> tuple[int, ...]:
        """``shape``, always known once built (given, or that of ``data``)."""
        assert self.shape is not None  # __post_init__ refuses a tensor without data or a shape
        return self.shape

    @property
    def nbytes(self) -> int:
        return 0 if self.data is None else int(self.data.nbytes)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def checksum(data: bytes | memoryview | np.ndarray, start: int = 0) -> int:
    """The file's checksum of a data region: ``sum(w[i] * (2 i + 1)) mod 2**64`` over its 64-bit words
    (``start``: the index of the first word in the whole region; a partial last word is zero-padded).

    >>> checksum(np.array([1, 1], dtype="<u8"))
    4
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size % 8:
        raw = np.concatenate([raw, np.zeros(8 - raw.size % 8, dtype=np.uint8)])
    words = raw.view("<u8")
    total = np.uint64(0)
    chunk = 1 << 22
    with np.errstate(over="ignore"):
        for first in range(0, words.size, chunk):
            part = words[first : first + chunk]
            index = np.arange(start + first, start + first + part.size, dtype=np.uint64)
            total = total + np.sum(part * (index * np.uint64(2) + np.uint64(1)), dtype=np.uint64)
    return int(total)


def _write_data(handle: BinaryIO, tensors: Sequence[Tensor], offsets: list[int], data_offset: int, end: int) -> int:
    """Write the data of ``tensors`` at ``offsets`` (the file's length becomes ``end``); returns their checksum."""
    total = 0
    for tensor, offset in zip(tensors, offsets, strict=True):
        if tensor.data is None:
            continue
        raw = tensor.data.astype(tensor.data.dtype.newbyteorder("<"), copy=False).reshape(-1).view(np.uint8)
        handle.seek(offset)
        handle.write(raw.data)
        total += checksum(raw, (offset - data_offset) // 8)
    handle.truncate(end)
    return total % (1 << 64)


def write_weights(path: str | Path, tensors: Sequence[Tensor]) -> int:
    """Write ``tensors`` (in order) as a weights file, one tensor at a time; returns its size in bytes. The
    file is replaced whole (:func:`mithril.extend.write_file_atomically`: never written through a symlink).

    >>> import tempfile, os
    >>> write_weights(os.path.join(tempfile.mkdtemp(), "w.bin"), [Tensor("b", np.zeros(4, np.float32))])
    256
    """
    data_offset = _aligned(HEADER + ENTRY * len(tensors))
    offsets, end = [], data_offset
    for tensor in tensors:
        offsets.append(end if tensor.data is not None else 0)
        end = _aligned(end + tensor.nbytes) if tensor.data is not None else end
    entries = b"".join(
        _ENTRY.pack(
            t.name.encode(), t.role, t.code, len(t.dims), 0,
            *(list(t.dims) + [0] * (MAX_DIMS - len(t.dims))), offset, t.nbytes,
        )
        for t, offset in zip(tensors, offsets, strict=True)
    )  # fmt: skip

    def write(handle: BinaryIO) -> None:
        total = _write_data(handle, tensors, offsets, data_offset, end)
        handle.seek(0)
        handle.write(_HEADER.pack(MAGIC, VERSION, len(tensors), data_offset, end, total) + entries)

    write_file_atomically(path, write, where="write_weights")
    return end


def read_weights(path: str | Path) -> list[Tensor]:
    """The tensors of a weights file (data as read-only memory maps), after the checks of the C reader
    (``templates/weights.h``): the header, every entry (name, role, dtype, shape, and data inside the file,
    aligned and in order) and the checksum. A file that fails one raises :class:`CheckpointError` naming it.

    >>> read_weights("/nonexistent")   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    mithril.errors.CheckpointError: cannot read the weights file /nonexistent: No such file or directory
    """
    try:
        size = os.path.getsize(path)
        raw = np.memmap(path, dtype=np.uint8, mode="r") if size >= HEADER else None
    except OSError as exc:
        raise CheckpointError(f"cannot read the weights file {path}: {exc.strerror or exc}") from None
    if raw is None:
        raise CheckpointError(f"{path}: {size} bytes, shorter than the {HEADER}-byte header of a weights file")
    count, data_offset, expected = _checked_header(path, raw)
    tensors, next_free = [], data_offset
    for i in range(count):
        tensor, next_free = _checked_entry(path, raw, i, next_free)
        tensors.append(tensor)
    if checksum(raw[data_offset:]) != expected:
        raise CheckpointError(f"{path}: the checksum of the data differs from the header's (damaged file)")
    return tensors


def _checked_header(path: str | Path, raw: np.ndarray) -> tuple[int, int, int]:
    """``(count, data_offset, checksum)`` of the file header, checked as ``mtw_open`` checks it."""
    magic, version, count, data_offset, size, expected = _HEADER.unpack(raw[:HEADER].tobytes())
    want_offset = _aligned(HEADER + ENTRY * count)
    detail = ""
    if magic != MAGIC:
        detail = f"it does not start with {MAGIC.decode()} (got {magic!r})"
    elif version != VERSION:
        detail = f"format version {version}, this reader reads version {VERSION}"
    elif size != raw.size:
        detail = f"its header says {size} bytes, the file has {raw.size} (truncated or extended?)"
    elif data_offset != want_offset or data_offset > raw.size or (raw.size - data_offset) % 8:
        detail = f"its data starts at {data_offset}, expected {want_offset} with whole 8-byte words after it"
    if detail:
        raise CheckpointError(f"{path}: not a weights file: {detail}")
    return count, data_offset, expected


def _checked_entry(path: str | Path, raw: np.ndarray, i: int, next_free: int) -> tuple[Tensor, int]:
    """Entry ``i`` as a :class:`Tensor` and the end of its data, checked as ``mtw_check_entry`` checks it."""
    fields = _ENTRY.unpack(raw[HEADER + i * ENTRY : HEADER + (i + 1) * ENTRY].tobytes())
    raw_name, role, code, ndim = fields[:4]
    dims, (offset, nbytes) = fields[5 : 5 + MAX_DIMS], fields[5 + MAX_DIMS :]
    end = raw_name.find(b"\0")
    try:
        name = raw_name[:end].decode() if end > 0 else ""
    except UnicodeDecodeError:
        name = ""
    if not name:
        raise CheckpointError(f"{path}: tensor {i}: its name is empty or not NUL-terminated UTF-8 ({raw_name!r})")
    where = f"{path}: tensor {i} ({name!r})"
    if role not in (WEIGHT, INPUT):
        raise CheckpointError(f"{where}: role {role}; expected {WEIGHT} (weight) or {INPUT} (input)")
    dtype = next((d for d, c in DTYPES.items() if c == code), None)
    quant = next((q for q, (c, _) in QUANTIZED.items() if c == code), "")
    if dtype is None and not quant:
        names = [*(f"{c} ({d})" for d, c in DTYPES.items()), *(f"{c} ({q})" for q, (c, _) in QUANTIZED.items())]
        known = ", ".join(names)
        raise CheckpointError(f"{where}: dtype code {code}; known: {known}")
    if ndim > MAX_DIMS:
        raise CheckpointError(f"{where}: {ndim} dims, at most {MAX_DIMS}")
    shape = tuple(dims[:ndim])
    if any(d > _INT64_MAX for d in shape):
        raise CheckpointError(f"{where}: shape {list(shape)} has a dimension beyond 2**63 - 1")
    if role == INPUT and quant:
        raise CheckpointError(f"{where}: an input cannot be quantized ({quant})")
    if quant:
        return _quantized_entry(raw, (name, where), shape, quant, offset, nbytes, next_free)
    assert dtype is not None
    if role == INPUT:
        if offset or nbytes:
            raise CheckpointError(f"{where}: an input claims {nbytes} bytes of data at offset {offset}, expected none")
        return Tensor(name, shape=shape, role=INPUT, dtype=dtype), next_free
    if math.prod(d for d in shape if d) * dtype.itemsize > sys.maxsize:  # NumPy's limit, zero dims or not
        raise CheckpointError(f"{where}: shape {list(shape)} is too large for an array")
    want = math.prod(shape) * dtype.itemsize
    if nbytes != want or offset % ALIGN or offset < next_free or offset + nbytes > raw.size:
        raise CheckpointError(
            f"{where}: {nbytes} bytes at offset {offset}; expected {want} bytes ({dtype}{list(shape)}) at a "
            f"{ALIGN}-byte aligned offset after the previous tensor (from byte {next_free}), inside the file's "
            f"{raw.size} bytes"
        )
    data = raw[offset : offset + nbytes].view(dtype.newbyteorder("<")).reshape(shape)
    return Tensor(name, data), offset + nbytes


def _quantized_entry(
    raw: np.ndarray,
    named: tuple[str, str],
    shape: tuple[int, ...],
    quant: str,
    offset: int,
    nbytes: int,
    next_free: int,
) -> tuple[Tensor, int]:
    """A quantized weight's entry (``named``: its name, and where it is for errors) as a :class:`Tensor`
    (its blocks as a read-only map) and its end."""
    name, where = named
    if len(shape) < 2 or math.prod(shape[1:]) % 32 or math.prod(shape) > sys.maxsize:
        raise CheckpointError(f"{where}: a {quant} tensor needs rows of whole blocks of 32, got shape {list(shape)}")
    want = _quantized_nbytes(shape, quant)
    if nbytes != want or offset % ALIGN or offset < next_free or offset + nbytes > raw.size:
        raise CheckpointError(
            f"{where}: {nbytes} bytes at offset {offset}; expected {want} bytes ({quant}{list(shape)}) at a "
            f"{ALIGN}-byte aligned offset after the previous tensor (from byte {next_free}), inside the file's "
            f"{raw.size} bytes"
        )
    blocks = raw[offset : offset + nbytes].reshape(shape[0], -1)
    return Tensor(name, blocks, shape=shape, quant=quant), offset + nbytes
