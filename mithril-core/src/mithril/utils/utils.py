"""Time slots of variable-length sequences, as Mithril's ``mithril.utils.utils`` publishes them.

The recurrent models (``ManyToOne``, ``EncoderDecoder``...) take one input per time step: ``input0``,
``input1``, ... . A batch of sequences of different lengths is given to them sorted by length, longest first,
so that time step ``t`` holds only the sequences longer than ``t``, as the first rows: slot ``input<t>`` has
shape ``(number of sequences longer than t, 1, *features)``. :func:`pack_data_into_time_slots` builds these
slots from a list of samples; :func:`unpack_time_slot_data` joins per-step outputs back into one array.

Example:
    >>> import mithril as ml
    >>> backend = ml.NumpyBackend()
    >>> short, long = backend.array([[1.0], [2.0]]), backend.array([[3.0], [4.0], [5.0]])
    >>> slots, data_sorted = pack_data_into_time_slots([(short,), (long,)], backend, key=("input",))
    >>> [slots[f"input{t}"][:, 0, 0].tolist() for t in range(3)]
    [[3.0, 1.0], [4.0, 2.0], [5.0]]
    >>> unpack_time_slot_data(backend, slots, max_length=3, max_size=2, output_dim=1, key="input")[:, :, 0].tolist()
    [[3.0, 4.0, 5.0], [1.0, 2.0, 0.0]]
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

from ..backends.backend import Backend
from ..errors import ArgumentError
from ..lazy_numpy import np
from ..types import DataType

__all__ = ["pack_data_into_time_slots", "unpack_time_slot_data"]

_PACK = "pack_data_into_time_slots"
_UNPACK = "unpack_time_slot_data"


@overload
def pack_data_into_time_slots(
    data: Sequence[Sequence[DataType]],
    backend: Backend[DataType],
    lengths: Sequence[int] | DataType | None = None,
    key: tuple[str, ...] | str = ("input",),
    index: int = 0,
    return_indices: Literal[False] = False,
    sorted_data: bool = False,
) -> tuple[dict[str, DataType], list[Sequence[DataType]]]: ...


@overload
def pack_data_into_time_slots(
    data: Sequence[Sequence[DataType]],
    backend: Backend[DataType],
    lengths: Sequence[int] | DataType | None = None,
    key: tuple[str, ...] | str = ("input",),
    index: int = 0,
    *,
    return_indices: Literal[True],
    sorted_data: bool = False,
) -> tuple[tuple[int, ...], dict[str, DataType], list[Sequence[DataType]]]: ...


def pack_data_into_time_slots(
    data: Sequence[Sequence[DataType]],
    backend: Backend[DataType],
    lengths: Sequence[int] | DataType | None = None,
    key: tuple[str, ...] | str = ("input",),
    index: int = 0,
    return_indices: bool = False,
    sorted_data: bool = False,
) -> tuple[Any, ...]:
    """Time slots of the sequences ``sample[index]`` of the samples in ``data`` (each a tuple of arrays, a
    sequence of shape ``(length, *features)``).

    The samples are sorted by length, longest first (a stable sort: equal lengths keep their order; with
    ``sorted_data=True`` they must already be in that order). Slot ``f"{key[0]}{t}"`` stacks step ``t`` of the
    sequences longer than ``t``, in that order, with shape ``(count, 1, *features)``. ``lengths`` (default:
    each sequence's first dimension) packs only the first ``lengths[i]`` steps of sample ``i``.

    Returns ``(slots, data_sorted)``, or ``(indices, slots, data_sorted)`` with ``return_indices=True``:
    ``indices[j]`` is the position in ``data`` of the ``j``-th sorted sample (pass it to
    :func:`unpack_time_slot_data` to restore the original order).

    Example:
        >>> import mithril as ml
        >>> b = ml.NumpyBackend()
        >>> data = [(b.array([[1.0]]),), (b.array([[2.0], [3.0]]),)]
        >>> indices, slots, data_sorted = pack_data_into_time_slots(data, b, return_indices=True)
        >>> indices, {k: v.tolist() for k, v in slots.items()}
        ((1, 0), {'input0': [[[2.0]], [[1.0]]], 'input1': [[[3.0]]]})
    """
    samples = list(data)
    if not samples:
        raise ArgumentError(f"{_PACK}: data must be a non-empty list of samples (tuples of arrays)")
    name = _slot_name(key)
    sequences = []
    for position, sample in enumerate(samples):
        if not isinstance(sample, (tuple, list)) or not -len(sample) <= index < len(sample):
            raise ArgumentError(
                f"{_PACK}: sample {position} has no array at index {index} (got {type(sample).__name__})"
            )
        sequence = sample[index]
        if not backend.is_array(sequence) or len(backend.shape_of(sequence)) == 0:
            raise ArgumentError(f"{_PACK}: sample {position}[{index}] must be a {type(backend).__name__} array of "
                                f"shape (length, *features), got {type(sequence).__name__}")
        sequences.append(sequence)
    measured = [int(backend.shape_of(s)[0]) for s in sequences]
    sizes = measured if lengths is None else _lengths(backend, lengths, measured)

    if sorted_data:
        if any(a < b for a, b in itertools.pairwise(sizes)):
            raise ArgumentError(f"{_PACK}: sorted_data=True, but the lengths {sizes} are not in decreasing order")
        order = list(range(len(samples)))
    else:
        order = sorted(range(len(samples)), key=lambda i: sizes[i], reverse=True)  # stable: ties keep their order
    longest = sizes[order[0]]

    padded = []
    for i in order:
        sequence = sequences[i] if sizes[i] == measured[i] else sequences[i][: sizes[i]]
        if sizes[i] < longest:
            width = ((0, longest - sizes[i]),) + ((0, 0),) * (len(backend.shape_of(sequence)) - 1)
            sequence = backend.pad(sequence, pad_width=width)
        padded.append(sequence)
    stacked = backend.stack(padded)  # (samples, longest, *features), longest sequences first
    slots = {}
    for t in range(longest):
        count = sum(1 for i in order if sizes[i] > t)
        slots[f"{name}{t}"] = stacked[:count, t][:, None]
    data_sorted = [samples[i] for i in order]
    if return_indices:
        return tuple(order), slots, data_sorted
    return slots, data_sorted


def unpack_time_slot_data(
    backend: Backend[DataType],
    data: Mapping[str, DataType],
    max_length: int,
    max_size: int,
    output_dim: int,
    key: str = "decoder_out",
    indices: Sequence[int] | None = None,
) -> DataType:
    """One array of shape ``(max_size, steps, output_dim)`` from the time slots ``data[f"{key}{t}"]``
    (``t < max_length``; missing steps are skipped), each of shape ``(count, 1, output_dim)`` with
    ``count <= max_size``: rows a slot lacks are zeros. With ``indices`` (from
    :func:`pack_data_into_time_slots`) the rows come back in the order of the samples before sorting.

    Example:
        >>> import mithril as ml
        >>> b = ml.NumpyBackend()
        >>> slots = {"output0": b.array([[[1.0]], [[2.0]]]), "output1": b.array([[[3.0]]])}
        >>> unpack_time_slot_data(b, slots, max_length=2, max_size=2, output_dim=1, key="output")[:, :, 0].tolist()
        [[1.0, 3.0], [2.0, 0.0]]
        >>> unpack_time_slot_data(b, slots, 2, 2, 1, key="output", indices=[1, 0])[:, :, 0].tolist()
        [[2.0, 0.0], [1.0, 3.0]]
    """
    parts = []
    for t in range(max_length):
        slot = data.get(f"{key}{t}")
        if slot is None:
            continue
        shape = tuple(backend.shape_of(slot))
        if not shape or shape[0] > max_size:
            raise ArgumentError(
                f"{_UNPACK}: slot {key}{t} has shape {shape}; its rows must be at most max_size={max_size}"
            )
        if shape[0] < max_size:
            slot = backend.pad(slot, pad_width=((0, max_size - shape[0]),) + ((0, 0),) * (len(shape) - 1))
        parts.append(slot)
    if not parts:
        found = sorted(str(k) for k in data)
        raise ArgumentError(f"{_UNPACK}: none of {key}0 ... {key}{max_length - 1} is in data (keys: {found})")
    joined = parts[0] if len(parts) == 1 else backend.concat(parts, axis=-1)
    result: DataType = backend.reshape(joined, shape=(max_size, -1, output_dim))
    if indices is None:
        return result
    positions = [int(i) for i in indices]
    if sorted(positions) != list(range(max_size)):
        raise ArgumentError(f"{_UNPACK}: indices must be a permutation of range({max_size}), got {list(indices)}")
    restore = sorted(range(len(positions)), key=positions.__getitem__)  # the sorted row of each original sample
    reordered: DataType = result[backend.array(restore)]  # type: ignore[index]
    return reordered


def _slot_name(key: tuple[str, ...] | str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (tuple, list)) and key and isinstance(key[0], str):
        return key[0]
    raise ArgumentError(f"{_PACK}: key must be a slot name or a tuple whose first item is one, got {key!r}")


def _lengths(backend: Backend[Any], lengths: Any, measured: list[int]) -> list[int]:
    values = np.asarray(backend.to_numpy(lengths) if backend.is_array(lengths) else lengths).reshape(-1)
    if values.dtype.kind not in "iu" or len(values) != len(measured):
        raise ArgumentError(f"{_PACK}: lengths must be {len(measured)} ints (one per sample), got {lengths!r}")
    sizes = [int(v) for v in values]
    for i, (size, full) in enumerate(zip(sizes, measured, strict=True)):
        if not 0 < size <= full:
            raise ArgumentError(f"{_PACK}: lengths[{i}] = {size}, but sample {i} has {full} steps (give 1 to {full})")
    return sizes
