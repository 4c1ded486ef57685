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

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["INPUT", "WEIGHT", "Tensor", "checksum", "read_weights", "write_weights"]

MAGIC = b"MTWEIGHT"
VERSION = 1
HEADER = 64
ENTRY = 128
NAME = 48
MAX_DIMS = 6
ALIGN = 64
WEIGHT, INPUT = 0, 1
DTYPES = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int64): 3}
"""NumPy dtype -> the dtype code of the file (``MTW_F32``, ``MTW_F64``, ``MTW_I64`` in weights.h)."""
_ENTRY = struct.Struct(f"<{NAME}s4I{MAX_DIMS}QQQ")
_HEADER = struct.Struct("<8sIIQQQ24x")
_FLOAT32 = np.dtype(np.float32)


@dataclass(frozen=True)
class Tensor:
    """One entry of the file: a weight with its data, or a data input of the program (shape only).

    >>> Tensor("input", shape=(1, 3, 8, 8), role=INPUT).nbytes
    0
    """

    name: str
    data: np.ndarray | None = None
    shape: tuple[int, ...] | None = None
    role: int = WEIGHT
    dtype: np.dtype = _FLOAT32

    def __post_init__(self) -> None:
        if self.data is not None:
            object.__setattr__(self, "data", np.ascontiguousarray(self.data))
            object.__setattr__(self, "shape", tuple(int(d) for d in self.data.shape))
            object.__setattr__(self, "dtype", self.data.dtype)
        if self.shape is None:
            raise ValueError(f"weights file: tensor {self.name!r} needs data or a shape")
        if (self.role == WEIGHT) != (self.data is not None):
            raise ValueError(f"weights file: tensor {self.name!r}: a weight has data, an input has none")
        encoded = self.name.encode()
        if not encoded or len(encoded) >= NAME or b"\0" in encoded:
            raise ValueError(f"weights file: tensor name {self.name!r} must be 1..{NAME - 1} bytes without NUL")
        if np.dtype(self.dtype) not in DTYPES:
            raise ValueError(
                f"weights file: tensor {self.name!r} has dtype {self.dtype}, expected one of {[str(d) for d in DTYPES]}"
            )
        if len(self.shape) > MAX_DIMS:
            raise ValueError(f"weights file: tensor {self.name!r} has {len(self.shape)} dims, at most {MAX_DIMS}")

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


def write_weights(path: str | Path, tensors: Sequence[Tensor]) -> int:
    """Write ``tensors`` (in order) as a weights file, one tensor at a time; returns its size in bytes.

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
            t.name.encode(), t.role, DTYPES[np.dtype(t.dtype)], len(t.shape), 0,
            *(list(t.shape) + [0] * (MAX_DIMS - len(t.shape))), offset, t.nbytes,
        )
        for t, offset in zip(tensors, offsets)
    )  # fmt: skip
    total = 0
    with open(path, "wb") as handle:
        handle.seek(data_offset)
        for tensor, offset in zip(tensors, offsets):
            if tensor.data is None:
                continue
            raw = tensor.data.astype(tensor.data.dtype.newbyteorder("<"), copy=False).reshape(-1).view(np.uint8)
            handle.seek(offset)
            handle.write(memoryview(raw))
            total += checksum(raw, (offset - data_offset) // 8)
        handle.truncate(end)
        handle.seek(0)
        handle.write(_HEADER.pack(MAGIC, VERSION, len(tensors), data_offset, end, total % (1 << 64)) + entries)
    return end


def read_weights(path: str | Path) -> list[Tensor]:
    """The tensors of a weights file (data as read-only memory maps), after checking its header and checksum.

    >>> read_weights("/nonexistent")   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: ...
    """
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if raw.size < HEADER:
        raise ValueError(f"{path}: {raw.size} bytes, shorter than the {HEADER}-byte header of a weights file")
    magic, version, count, data_offset, size, expected = _HEADER.unpack(raw[:HEADER].tobytes())
    if magic != MAGIC or version != VERSION or size != raw.size or data_offset > size:
        raise ValueError(
            f"{path}: not a version-{VERSION} weights file of {raw.size} bytes "
            f"(magic {magic!r}, version {version}, header size {size})"
        )
    if checksum(raw[data_offset:]) != expected:
        raise ValueError(f"{path}: the checksum of the data differs from the header's (damaged file)")
    by_code = {code: dtype for dtype, code in DTYPES.items()}
    tensors = []
    for i in range(count):
        fields = _ENTRY.unpack(raw[HEADER + i * ENTRY : HEADER + (i + 1) * ENTRY].tobytes())
        name, role, code, ndim = fields[0].rstrip(b"\0").decode(), *fields[1:4]
        shape, (offset, nbytes) = tuple(fields[5 : 5 + ndim]), fields[5 + MAX_DIMS :]
        dtype = by_code[code]
        if role == INPUT:
            tensors.append(Tensor(name, shape=shape, role=INPUT, dtype=dtype))
        else:
            data = raw[offset : offset + nbytes].view(dtype.newbyteorder("<")).reshape(shape)
            tensors.append(Tensor(name, data))
    return tensors
