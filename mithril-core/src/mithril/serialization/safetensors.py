"""Reading and writing the ``.safetensors`` format with NumPy alone (never pickle).

The format: an 8-byte little-endian header length ``n``, ``n`` bytes of JSON (``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {...}}``), then the raw little-endian tensor bytes. Every
field is validated before a byte of data is read, so a truncated or foreign file gives an error naming
the path and what is wrong instead of garbage. Tensors are read one at a time with ``readinto`` into a
fresh array: no memory map stays resident, so loading costs about one copy of the weights.

Example:
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> save_safetensors(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    >>> SafetensorsFile(path).read("w").tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..progress import task

__all__ = ["SafetensorsFile", "save_safetensors", "DTYPES"]

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}  # fmt: skip
"""safetensors dtype name -> NumPy dtype of the stored bytes (BF16 is read as uint16, then widened)."""

_NAMES = {dtype: name for name, dtype in DTYPES.items() if name not in ("BF16", "U16")} | {np.dtype("<u2"): "U16"}
_MAX_HEADER = 100 * 2**20


def _bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


class SafetensorsFile:
    """A validated ``.safetensors`` file: :meth:`keys`, :meth:`shape`, :meth:`read` one tensor at a time."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as f:
                head = f.read(8)
                if len(head) < 8:
                    raise CheckpointError(f"{self.path}: not a safetensors file ({size} bytes; the 8-byte header length is missing)")
                (header_len,) = struct.unpack("<Q", head)
                if header_len > min(size - 8, _MAX_HEADER):
                    raise CheckpointError(
                        f"{self.path}: not a safetensors file or truncated (header of {header_len} bytes announced, file has {size})"
                    )
                raw = f.read(header_len)
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc.strerror or exc}") from None
        try:
            header = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{self.path}: corrupt safetensors header ({exc})") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        self.metadata: dict[str, str] = header.pop("__metadata__", None) or {}
        self._data_start = 8 + header_len
        data_len = size - self._data_start
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            self._entries[name] = self._validate(name, entry, data_len)

    def _validate(self, name: str, entry: Any, data_len: int) -> tuple[str, tuple[int, ...], int, int]:
        where = f"{self.path}: tensor {name!r}"
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise CheckpointError(f"{where}: corrupt header entry {entry!r}") from None
        if dtype not in DTYPES:
            raise CheckpointError(f"{where}: unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
        if not all(isinstance(d, int) and d >= 0 for d in shape) or not all(isinstance(o, int) for o in (begin, end)):
            raise CheckpointError(f"{where}: corrupt shape {list(shape)} or offsets {[begin, end]}")
        expected = math.prod(shape) * DTYPES[dtype].itemsize
        if not 0 <= begin <= end or end - begin != expected:
            raise CheckpointError(f"{where}: offsets {[begin, end]} do not hold {dtype}{list(shape)} ({expected} bytes)")
        if end > data_len:
            raise CheckpointError(f"{where}: the file is truncated (tensor ends at byte {end}, data has {data_len})")
        return dtype, shape, begin, end

    def keys(self) -> list[str]:
        return list(self._entries)

    def shape(self, key: str) -> tuple[int, ...]:
        return self._entries[key][1]

    def nbytes(self, key: str) -> int:
        _, _, begin, end = self._entries[key]
        return end - begin

    def read(self, key: str) -> np.ndarray:
        """The tensor ``key`` as a fresh NumPy array (BF16 widened to float32)."""
        dtype, shape, begin, end = self._entries[key]
        array = np.empty(shape, dtype=DTYPES[dtype])
        with open(self.path, "rb") as f:
            f.seek(self._data_start + begin)
            got = f.readinto(memoryview(array.reshape(-1)).cast("B")) if array.size else 0
        if got != end - begin:
            raise CheckpointError(f"{self.path}: tensor {key!r} is truncated ({got} of {end - begin} bytes)")
        if dtype == "BF16":
            return _bfloat16_to_float32(array)
        return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def save_safetensors(path: str | os.PathLike[str], tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> None:
    """Write ``tensors`` (NumPy arrays or anything ``np.asarray`` takes) as a ``.safetensors`` file at exactly
    ``path``; a failed write (missing directory, full disk) raises :class:`CheckpointError` naming it and
    leaves no partial file."""
    arrays = {name: np.asarray(value, order="C") for name, value in tensors.items()}
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, array in arrays.items():
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder not in ("|", "<") else array.dtype
        if np.dtype(dtype) not in _NAMES:
            raise CheckpointError(f"save_safetensors({path}): tensor {name!r} has unsupported dtype {array.dtype}")
        header[name] = {"dtype": _NAMES[np.dtype(dtype)], "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned
    target = Path(path)
    partial = target.with_name(target.name + ".partial")  # written whole, then renamed: never a half file
    try:
        with open(partial, "wb") as f, task(f"writing {target.name}", total=offset, unit="B") as advance:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for array in arrays.values():
                # memoryview of a little-endian C array: written without a bytes copy of every tensor
                little = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
                f.write(little.reshape(-1).view(np.uint8))
                advance(array.nbytes)
        os.replace(partial, target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise CheckpointError(f"save_safetensors({path}): cannot write {target}: {exc.strerror or exc}") from None
