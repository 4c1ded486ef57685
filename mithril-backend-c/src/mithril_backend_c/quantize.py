"""Block-quantized weights in ggml's ``q8_0`` and ``q4_0`` layouts: the NumPy quantizer, its inverse, and
which parameters of a graph can be stored that way.

A quantized tensor ``[rows, k]`` (``k`` a multiple of 32; a convolution weight ``[O, C, kh, kw]`` is
``[O, C * kh * kw]``) is ``rows`` rows of ``k / 32`` blocks; each block is a little-endian IEEE half scale
``d`` followed by the block's 32 values:

- ``q8_0`` (34 bytes a block): 32 signed bytes ``q``, value ``d * q``; ``d = max|x| / 127``,
  ``q = round(x / d)`` rounded to nearest with ties away from zero;
- ``q4_0`` (18 bytes a block): 16 bytes, value ``j`` in the low nibble of byte ``j`` and value ``j + 16``
  in its high nibble, value ``d * (nibble - 8)``; ``d = -m / 8`` with ``m`` the block's value of largest
  magnitude (the first one), nibble ``min(15, trunc(x / d + 8.5))``.

The arithmetic is float32 throughout (``1 / d`` computed first, then multiplied), so the C runtime's
``mt_quantize_weights`` and ggml's own quantizer give the same bytes (the tests compare all three).

Example:
    >>> import numpy as np
    >>> blocks = quantize(np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32), "q8_0")
    >>> blocks.shape, blocks.dtype
    ((2, 34), dtype('uint8'))
    >>> float(np.abs(dequantize(blocks, "q8_0", (2, 32)) - np.linspace(-1, 1, 64).reshape(2, 32)).max()) < 0.004
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mithril.errors import ArgumentError

__all__ = [
    "BLOCK", "FORMATS", "QuantFormat", "dequantize", "format_of", "quantizable_params", "quantize",
    "quantized_nbytes", "reads_quantized",
]  # fmt: skip

BLOCK = 32
"""Values per block (ggml's ``QK8_0`` / ``QK4_0``)."""


@dataclass(frozen=True)
class QuantFormat:
    """A block format: ``name``, ``code`` (ggml's type number, also the C runtime's ``MT_Q8_0``/``MT_Q4_0``)
    and ``block_bytes`` (the scale and the values of one block)."""

    name: str
    code: int
    block_bytes: int

    def row_bytes(self, k: int) -> int:
        """Bytes of one row of ``k`` values.

        >>> FORMATS["q8_0"].row_bytes(64)
        68
        """
        return k // BLOCK * self.block_bytes


FORMATS = {"q8_0": QuantFormat("q8_0", 8, 34), "q4_0": QuantFormat("q4_0", 2, 18)}
"""The block formats by name."""

_CHUNK = 1 << 20  # values quantized per step (bounds the temporary memory of large tensors)


def format_of(name: Any, where: str = "quantize") -> QuantFormat:
    """The :class:`QuantFormat` called ``name``; an ``ArgumentError`` naming the accepted ones otherwise.

    >>> format_of("q4_0").block_bytes
    18
    """
    found = FORMATS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ArgumentError(f"{where}: unknown quantization {name!r}; accepted: {', '.join(map(repr, FORMATS))}")
    return found


def _rows(array: Any, where: str) -> np.ndarray:
    """``array`` as float32 rows ``[rows, k]`` (the last axis, or a convolution's ``C * kh * kw``)."""
    values = np.asarray(array, dtype=np.float32)
    if values.ndim < 2 or values.shape[-1] == 0:
        raise ArgumentError(f"{where}: needs a tensor of at least 2 dims, got shape {list(values.shape)}")
    rows = values.reshape(values.shape[0], -1)
    if rows.shape[1] % BLOCK:
        raise ArgumentError(
            f"{where}: rows of {rows.shape[1]} values are not whole blocks of {BLOCK} (shape {list(values.shape)})"
        )
    return rows


def _round_half_away(v: np.ndarray) -> np.ndarray:
    t = np.trunc(v)
    rounded: np.ndarray = t + np.sign(v) * (np.abs(v - t) >= 0.5)
    return rounded


def _magnitudes(blocks: np.ndarray) -> np.ndarray:
    """``|x|`` with NaN as 0 (NaN values are ignored when choosing a block's scale, and quantized to 0)."""
    magnitude = np.abs(blocks)
    return np.where(np.isnan(magnitude), np.float32(0), magnitude)


def _q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    d = _magnitudes(blocks).max(axis=1) / np.float32(127)
    with np.errstate(divide="ignore"):
        inverse = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _round_half_away(blocks * inverse[:, None])
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = np.clip(np.nan_to_num(q), -127, 127).astype(np.int8).view(np.uint8)


def _q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    largest = blocks[np.arange(blocks.shape[0]), _magnitudes(blocks).argmax(axis=1)]
    largest = np.where(np.isnan(largest), np.float32(0), largest)  # a block of NaN only: scale -0
    d = largest / np.float32(-8)
    with np.errstate(divide="ignore"):
        inverse = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    shifted = blocks * inverse[:, None] + np.float32(8.5)  # two float32 roundings, as the C code
    q = np.clip(np.trunc(np.nan_to_num(shifted)), 0, 15).astype(np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, : BLOCK // 2] | (q[:, BLOCK // 2 :] << 4)


def quantize(array: Any, fmt: str) -> np.ndarray:
    """``array`` (``[rows, ...]``, each row a whole number of blocks) as ``uint8 [rows, row_bytes]`` of
    ``fmt`` blocks (see the module docstring).

    >>> quantize(np.ones((1, 32), np.float32), "q4_0")[0, :4].tolist()   # d = -1/8 as a half, then nibbles 0
    [0, 176, 0, 0]
    """
    form = format_of(fmt)
    rows = _rows(array, "quantize")
    blocks = rows.reshape(-1, BLOCK)
    out = np.empty((blocks.shape[0], form.block_bytes), dtype=np.uint8)
    step = _CHUNK // BLOCK
    fill = _q8_0 if form.name == "q8_0" else _q4_0
    with np.errstate(invalid="ignore", over="ignore"):
        for first in range(0, blocks.shape[0], step):
            fill(blocks[first : first + step], out[first : first + step])
    return out.reshape(rows.shape[0], -1)


def dequantize(blocks: Any, fmt: str, shape: Sequence[int]) -> np.ndarray:
    """The float32 values of quantized ``blocks`` (:func:`quantize`'s result) as an array of ``shape``.

    >>> dequantize(quantize(np.full((1, 32), 127.0, np.float32), "q8_0"), "q8_0", (1, 32))[0, :3].tolist()
    [127.0, 127.0, 127.0]
    """
    form = format_of(fmt, "dequantize")
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1, form.block_bytes)
    d = raw[:, :2].copy().view("<f2").astype(np.float32)
    if form.name == "q8_0":
        values = raw[:, 2:].view(np.int8).astype(np.float32)
    else:
        nibbles = np.concatenate([raw[:, 2:] & 15, raw[:, 2:] >> 4], axis=1)
        values = nibbles.astype(np.float32) - np.float32(8)
    return (values * d).reshape(tuple(shape))


def quantized_nbytes(shape: Sequence[int], fmt: str) -> int:
    """Bytes of a tensor of ``shape`` quantized as ``fmt``.

    >>> quantized_nbytes((768, 2304), "q8_0")
    1880064
    """
    k = int(np.prod(shape[1:])) if len(shape) > 1 else 0
    return int(shape[0]) * format_of(fmt).row_bytes(k) if len(shape) > 1 else 0


_READERS = {"linear": "weight", "embedding": "weight", "conv2d": "weight"}
"""Primitive -> the input whose operand may be a quantized tensor."""


def reads_quantized(node: Any, key: str, shape: tuple[int, ...]) -> bool:
    """Whether ``node`` reading a parameter of ``shape`` as its input ``key`` has a quantized kernel.

    >>> reads_quantized(linear_node, "weight", (96, 64))       # doctest: +SKIP
    True
    """
    if _READERS.get(node.spec.name) != key or len(shape) < 2:
        return False
    if node.spec.name == "conv2d":
        return len(shape) == 4 and node.attrs.get("groups", 1) == 1 and int(np.prod(shape[1:])) % BLOCK == 0
    return len(shape) == 2 and shape[1] % BLOCK == 0


def quantizable_params(nodes: Iterable[Any], params: Mapping[str, Any]) -> list[str]:
    """The keys of ``params`` (key -> graph value) that every reader among ``nodes`` reads as the weight of
    a ``linear``, an ``embedding`` or an ungrouped ``conv2d``, with rows of whole blocks: the parameters
    a model compiled with quantized weights stores quantized (the others stay float32). The C backend's
    export and the GGML backend choose with this one rule, so they quantize the same tensors.

    >>> quantizable_params([], {})
    []
    """
    readers: dict[int, list[tuple[Any, str]]] = {}
    for node in nodes:
        for key, value in node.inputs.items():
            if value is not None:
                readers.setdefault(value.find().id, []).append((node, key))
    chosen = []
    for name, value in params.items():
        shape = value.shape.static()
        found = readers.get(value.find().id, [])
        if shape is not None and found and all(reads_quantized(n, k, tuple(shape)) for n, k in found):
            chosen.append(name)
    return chosen
