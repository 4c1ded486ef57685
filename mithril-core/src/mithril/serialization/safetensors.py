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

import functools
import json
import math
import os
import re
import struct
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, BinaryIO

from ..errors import ArgumentError, CheckpointError
from ..lazy_numpy import np
from ..progress import task
from .files import write_file_atomically

__all__ = ["DTYPES", "SafetensorsFile", "parse_json", "read_safetensors_index", "save_safetensors"]

_CODES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}  # fmt: skip


class _DtypeTable(Mapping[str, "np.dtype[Any]"]):
    """safetensors dtype name -> NumPy dtype, the dtypes made when first read (``import mithril`` does not
    import NumPy)."""

    def __getitem__(self, name: str) -> np.dtype[Any]:
        return np.dtype(_CODES[name])

    def __iter__(self) -> Iterator[str]:
        return iter(_CODES)

    def __len__(self) -> int:
        return len(_CODES)


DTYPES: Mapping[str, np.dtype[Any]] = _DtypeTable()
"""safetensors dtype name -> NumPy dtype of the stored bytes (BF16 is read as uint16, then widened)."""


@functools.cache
def _names() -> dict[np.dtype[Any], str]:
    """NumPy dtype -> safetensors name (uint16 is U16: BF16 is only read)."""
    return {np.dtype(code): name for name, code in _CODES.items() if name != "BF16"}


_MAX_HEADER = 100 * 2**20
_MAX_DEPTH = 16  # a valid header nests 3 deep (file, tensor, shape): deeper JSON is refused before it is parsed
_MAX_DIMS = 32  # the most dimensions every NumPy version can hold
_METADATA = "__metadata__"
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.S)
"""A JSON string, or an unclosed one up to the end of the text: every match attempt succeeds, so removing
strings is one linear pass (a pattern that must find the closing quote scanned to the end again from every
quote of ``{"\\"\\"...``: quadratic)."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _nesting(raw: bytes, chunk: int = 1 << 20) -> int:
    """How deep the arrays and objects of the JSON text ``raw`` nest (brackets inside strings left out),
    counted a chunk at a time (a 100 MB header needs a few MB of counts)."""
    codes = np.frombuffer(_STRINGS.sub(b"", raw), dtype=np.uint8)
    depth = deepest = 0
    for start in range(0, codes.size, chunk):
        part = codes[start : start + chunk]
        steps = np.isin(part, (ord("["), ord("{"))).astype(np.int32) - np.isin(part, (ord("]"), ord("}")))
        running = np.cumsum(steps, dtype=np.int64) + depth
        deepest, depth = max(deepest, int(running.max())), int(running[-1])
    return deepest


def parse_json(raw: bytes, path: str | os.PathLike[str], what: str) -> Any:
    """The JSON value of ``raw`` (the ``what`` of the file ``path``), refused with a :class:`CheckpointError`
    naming both when it is not UTF-8 JSON, repeats a key of one object or nests deeper than any checkpoint
    header does (which would only exhaust the parser's recursion).

    >>> parse_json(b'{"a": [1, 2]}', "x.json", "index")
    {'a': [1, 2]}
    >>> parse_json(b'{"a": 1, "a": 2}', "x.json", "index")
    Traceback (most recent call last):
    ...
    mithril.errors.CheckpointError: x.json: corrupt index (key 'a' twice in one object)
    """
    if _nesting(raw) > _MAX_DEPTH:
        raise CheckpointError(f"{path}: corrupt {what} (JSON nested deeper than {_MAX_DEPTH} levels)")
    try:
        return json.loads(raw, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise CheckpointError(f"{path}: corrupt {what} (key {exc.key!r} twice in one object)") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, ints over 4300 digits
        raise CheckpointError(f"{path}: corrupt {what} ({exc})") from None


def _shown(value: Any) -> str:
    """A header value as it is in the file (JSON), cut to 100 characters."""
    text = json.dumps(value)
    return text if len(text) <= 100 else text[:100] + "..."


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0  # not a bool, not a float


def _bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


class SafetensorsFile:
    """A validated ``.safetensors`` file: :meth:`keys`, :meth:`shape`, :meth:`read` one tensor at a time.

    Every field of the header is checked when the file is opened (types, dtype names, shapes an array can
    hold, offsets inside the data that hold exactly their tensor and do not overlap); any problem is one
    :class:`CheckpointError` naming the file and the tensor.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as f:
                head = f.read(8)
                if len(head) < 8:
                    raise CheckpointError(
                        f"{self.path}: not a safetensors file ({size} bytes; the 8-byte header length is missing)"
                    )
                (header_len,) = struct.unpack("<Q", head)
                if header_len > min(size - 8, _MAX_HEADER):
                    raise CheckpointError(
                        f"{self.path}: not a safetensors file or truncated (header of {header_len} bytes announced, "
                        f"file has {size})"
                    )
                raw = f.read(header_len)
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc.strerror or exc}") from None
        header = parse_json(raw, self.path, "safetensors header")
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        self.metadata: dict[str, str] = self._metadata(header.pop(_METADATA, None))
        self._data_start = 8 + header_len
        data_len = size - self._data_start
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            self._entries[name] = self._validate(name, entry, data_len)
        self._check_overlaps()

    def _metadata(self, metadata: Any) -> dict[str, str]:
        if metadata is None:
            return {}
        if not isinstance(metadata, dict):
            raise CheckpointError(f"{self.path}: {_METADATA} must be an object of str -> str, got {_shown(metadata)}")
        for key, value in metadata.items():
            if not isinstance(value, str):
                raise CheckpointError(f"{self.path}: {_METADATA} must map str to str; got {key!r}: {_shown(value)}")
        return metadata

    def _validate(self, name: str, entry: Any, data_len: int) -> tuple[str, tuple[int, ...], int, int]:
        where = f"{self.path}: tensor {name!r}"
        fields = ("dtype", "shape", "data_offsets")
        if not isinstance(entry, dict) or not all(field in entry for field in fields):
            raise CheckpointError(
                f"{where}: corrupt header entry {_shown(entry)}; expected an object with {', '.join(fields)}"
            )
        dtype, shape, offsets = (entry[field] for field in fields)
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise CheckpointError(f"{where}: unsupported dtype {_shown(dtype)}; supported: {', '.join(DTYPES)}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise CheckpointError(f"{where}: shape {_shown(shape)} must be a list of non-negative integers")
        if len(shape) > _MAX_DIMS:
            raise CheckpointError(f"{where}: shape has {len(shape)} dimensions, at most {_MAX_DIMS}")
        itemsize = DTYPES[dtype].itemsize
        if math.prod(d for d in shape if d) * itemsize > sys.maxsize:  # NumPy's limit, zero dims or not
            raise CheckpointError(f"{where}: shape {_shown(shape)} is too large for an array")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(map(_is_count, offsets))
            or offsets[0] > offsets[1]
        ):
            raise CheckpointError(
                f"{where}: data_offsets {_shown(offsets)} must be [begin, end], integers with 0 <= begin <= end"
            )
        begin, end = offsets
        expected = math.prod(shape) * itemsize
        if end - begin != expected:
            raise CheckpointError(f"{where}: offsets {[begin, end]} do not hold {dtype}{shape} ({expected} bytes)")
        if end > data_len:
            raise CheckpointError(f"{where}: the file is truncated (tensor ends at byte {end}, data has {data_len})")
        return dtype, tuple(shape), begin, end

    def _check_overlaps(self) -> None:
        spans = sorted((begin, end, name) for name, (_, _, begin, end) in self._entries.items() if end > begin)
        last_end, last_name, last_begin = 0, "", 0
        for begin, end, name in spans:
            if begin < last_end:
                raise CheckpointError(
                    f"{self.path}: tensor {name!r}: bytes [{begin}, {end}) overlap tensor {last_name!r} at "
                    f"[{last_begin}, {last_end})"
                )
            last_begin, last_end, last_name = begin, end, name

    def _entry(self, key: str) -> tuple[str, tuple[int, ...], int, int]:
        entry = self._entries.get(key)
        if entry is None:
            held = ", ".join(map(repr, list(self._entries)[:10])) + (" ..." if len(self._entries) > 10 else "")
            raise CheckpointError(f"{self.path}: no tensor {key!r}; it holds {held or 'none'}")
        return entry

    def keys(self) -> list[str]:
        return list(self._entries)

    def shape(self, key: str) -> tuple[int, ...]:
        return self._entry(key)[1]

    def nbytes(self, key: str) -> int:
        _, _, begin, end = self._entry(key)
        return end - begin

    def read(self, key: str) -> np.ndarray:
        """The tensor ``key`` as a fresh NumPy array (BF16 widened to float32)."""
        dtype, shape, begin, end = self._entry(key)
        array = np.empty(shape, dtype=DTYPES[dtype])
        try:
            with open(self.path, "rb") as f:
                f.seek(self._data_start + begin)
                got = f.readinto(memoryview(array.reshape(-1)).cast("B")) if array.size else 0  # type: ignore[arg-type]
        except OSError as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc.strerror or exc}") from None
        if got != end - begin:
            raise CheckpointError(f"{self.path}: tensor {key!r} is truncated ({got} of {end - begin} bytes)")
        if dtype == "BF16":
            return _bfloat16_to_float32(array)
        return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _check_names(tensors: Mapping[Any, Any], metadata: Any, where: str) -> None:
    """Refuse what the format cannot hold: a tensor named ``__metadata__``, names or metadata that are not str."""
    for name in tensors:
        if not isinstance(name, str):
            raise ArgumentError(f"{where}: tensor names must be str, got {name!r} ({type(name).__name__})")
        if name == _METADATA:
            raise ArgumentError(
                f"{where}: the tensor name {_METADATA!r} is reserved for the file's metadata; rename it"
            )
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ArgumentError(f"{where}: metadata must be a dict of str -> str, got {type(metadata).__name__}")
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ArgumentError(
                f"{where}: metadata must map str to str; got {key!r}: {value!r} ({type(key).__name__}: "
                f"{type(value).__name__})"
            )


def save_safetensors(
    path: str | os.PathLike[str], tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None
) -> None:
    """Write ``tensors`` (NumPy arrays or anything ``np.asarray`` takes) as a ``.safetensors`` file at exactly
    ``path``; a failed write (missing directory, full disk) raises :class:`CheckpointError` naming it and
    leaves no partial file (:func:`~mithril.serialization.files.write_file_atomically`). A tensor named
    ``__metadata__``, or metadata that is not str -> str, raises :class:`ArgumentError`."""
    where = f"save_safetensors({path})"
    _check_names(tensors, metadata, where)
    arrays = {name: np.asarray(value, order="C") for name, value in tensors.items()}
    header: dict[str, Any] = {_METADATA: dict(metadata)} if metadata else {}
    offset = 0
    for name, array in arrays.items():
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder not in ("|", "<") else array.dtype
        if np.dtype(dtype) not in _names():
            raise CheckpointError(f"{where}: tensor {name!r} has unsupported dtype {array.dtype}")
        header[name] = {
            "dtype": _names()[np.dtype(dtype)],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned

    def write(f: BinaryIO) -> None:
        with task(f"writing {Path(path).name}", total=offset, unit="B") as advance:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for array in arrays.values():
                # memoryview of a little-endian C array: written without a bytes copy of every tensor
                little = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
                f.write(little.reshape(-1).view(np.uint8))  # type: ignore[call-overload]
                advance(array.nbytes)

    write_file_atomically(path, write, where=where)


def _relative_shard(name: Any, key: str, index: Path) -> str:
    """``name`` when it is a file name inside the index's folder (no absolute path, no ``..``)."""
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{index}: weight_map[{key!r}] must be a shard file name (str), got {_shown(name)}")
    for flavour in (PurePosixPath(name), PureWindowsPath(name)):
        if flavour.is_absolute() or flavour.drive or flavour.root or ".." in flavour.parts:
            raise CheckpointError(
                f"{index}: shard {name!r} of {key!r} must be a file name relative to {index.parent} without '..'"
            )
    return name


def read_safetensors_index(index: str | os.PathLike[str]) -> dict[str, SafetensorsFile]:
    """Tensor name -> its opened shard, from a sharded checkpoint's ``model.safetensors.index.json``.

    The index is checked whole before a tensor is read: ``weight_map`` is an object of str -> shard file
    name, every shard lies in the index's folder (no absolute name, no ``..``) and holds every tensor the
    index maps to it; each problem is a :class:`CheckpointError` naming the index, the shard and the key.
    """
    index = Path(index)
    try:
        raw = index.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read the safetensors index {index}: {exc.strerror or exc}") from None
    content = parse_json(raw, index, "safetensors index")
    weight_map = content.get("weight_map") if isinstance(content, dict) else None
    if not isinstance(weight_map, dict):
        got = type(weight_map).__name__ if weight_map is not None else "no weight_map"
        raise CheckpointError(f"{index}: weight_map must be an object of tensor name -> shard file, got {got}")
    names = {key: _relative_shard(name, key, index) for key, name in weight_map.items()}
    shards = {name: SafetensorsFile(index.parent / name) for name in sorted(set(names.values()))}
    held = {name: set(shard.keys()) for name, shard in shards.items()}
    for key, name in names.items():
        if key not in held[name]:
            raise CheckpointError(f"{index}: shard {shards[name].path} lacks {key!r}, which the index maps to it")
    return {key: shards[name] for key, name in names.items()}
