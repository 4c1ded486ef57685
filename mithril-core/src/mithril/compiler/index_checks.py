"""Range checks of integer indices given as run-time data (token ids for ``embedding``, class targets for
``cross_entropy``, ``gather`` indices), run by ``PhysicalModel.evaluate`` before any backend code.

Out-of-range indices are undefined behaviour in native code (C reads or writes out of bounds, ggml aborts
the process) and silently wrong elsewhere (NumPy wraps negative indices, JAX returns NaN), so every
backend gets the same clear error instead. Only data inputs reaching an index slot through shape-only
primitives are checked here; the cost is one min/max over each such array per call.

Example:
    >>> IndexCheck("input", "embedding at wte", 50, None).describe()
    'embedding at wte (valid: 0 <= index < 50)'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import IndexRangeError
from ..lazy_numpy import np
from .graph import Graph, Node, Value

__all__ = ["IndexCheck", "check_indices", "find_index_checks"]


def _update_rows(node: Node) -> int | None:
    """The rows ``dynamic_update_slice`` writes from its ``start``: its update's size along the axis."""
    update = node.inputs.get("update")
    dims = None if update is None else update.shape.ints()
    return None if dims is None else dims[int(node.attrs["axis"])]


# primitive -> (index input, indexed input, axis of the indexed input that bounds the index, the entries of
# that axis each index reaches: 1, or from a start the rows it writes (None: not known at compile time))
INDEX_SLOTS: dict[str, tuple[str, str, Callable[[Node], int], Callable[[Node], int | None]]] = {
    "embedding": ("input", "weight", lambda node: 0, lambda node: 1),
    "cross_entropy": ("target", "input", lambda node: 1, lambda node: 1),
    "gather": ("index", "input", lambda node: int(node.attrs["axis"]), lambda node: 1),
    "dynamic_update_slice": ("start", "input", lambda node: int(node.attrs["axis"]), _update_rows),
}
_PASS_THROUGH = frozenset(
    {"reshape", "flatten", "transpose", "swapaxes", "squeeze", "unsqueeze", "broadcast_to", "index", "concat"}
)


@dataclass(frozen=True)
class IndexCheck:
    """Data input ``key`` indexes ``what``: valid indices are ``0 <= i < size`` (``size`` known at compile
    time, or read from input ``size_from = (name, axis)`` at run time)."""

    key: str
    what: str
    size: int | None
    size_from: tuple[str, int] | None
    length_axis: int | None = None  # the indices are ``positions`` of this axis of ``key``: check its length

    def describe(self, size: int | None = None) -> str:
        return f"{self.what} (valid: 0 <= index < {self.size if size is None else size})"


def _source_inputs(value: Value) -> list[tuple[Value, int | None]]:
    """The graph inputs ``value`` is made of through shape-only primitives, each with ``None``, or with the
    axis whose ``positions`` the indices are (none when the indices are otherwise computed)."""
    producer = value.producer
    if producer is None:
        return [(value, None)]
    if producer.spec.name == "positions":
        source = producer.inputs["input"]
        if source is None or source.producer is not None:
            return []
        return [(source, int(producer.attrs["axis"]))]  # may be negative: read from the array at run time
    if producer.spec.name not in _PASS_THROUGH:
        return []
    return [pair for inp in producer.inputs.values() if inp is not None for pair in _source_inputs(inp)]


def find_index_checks(graph: Graph, inputs: Mapping[str, Value], data_keys: set[str]) -> list[IndexCheck]:
    """Every (data input, index slot) pair of ``graph``."""
    names = {v.id: name for name, v in inputs.items()}
    checks: list[IndexCheck] = []
    for node in graph.nodes:
        slot = INDEX_SLOTS.get(node.spec.name)
        if slot is None or (node.spec.name == "cross_entropy" and not node.attrs.get("categorical", True)):
            continue
        index_key, indexed_key, axis_of, reach_of = slot
        index, indexed = node.inputs.get(index_key), node.inputs.get(indexed_key)
        reach = reach_of(node)
        if index is None or indexed is None or index.kind != "int" or reach is None:
            continue
        axis = axis_of(node)
        dims = indexed.shape.ints()
        size = dims[axis] if dims is not None and -len(dims) <= axis < len(dims) else None
        if reach != 1:  # the valid starts leave room for the rows after them (a run-time size cannot)
            if size is None:
                continue
            size -= reach - 1
        size_from = (names[indexed.id], axis) if size is None and indexed.id in names else None
        if size is None and size_from is None:
            continue
        what = f"{node.spec.name} at {node.path or '<root>'}"
        for source, length_axis in _source_inputs(index):
            key = names.get(source.id)
            if key in data_keys:
                checks.append(IndexCheck(key, what, size, size_from, length_axis))
    return checks


def check_indices(
    checks: list[IndexCheck],
    arrays: Mapping[str, Any],
    to_numpy: Callable[[Any], np.ndarray],
    is_array: Callable[[Any], bool] | None = None,
) -> None:
    """Raise :class:`IndexRangeError` naming the key, the bad value, where it is and the valid range.

    ``arrays`` may hold the data as given, before it is converted to the backend's integer type (int32 on
    JAX without x64 would turn ``2**32 + 3`` into the valid index ``3``): NumPy arrays, nested lists and
    backend arrays (read through ``to_numpy`` when ``is_array`` says so). Data that is not integers is left
    to the dtype checks.

        >>> check = IndexCheck("ids", "embedding at wte", 50, None)
        >>> check_indices([check], {"ids": [[0, 2**32 + 3]]}, np.asarray)
        Traceback (most recent call last):
        ...
        mithril.errors.IndexRangeError: evaluate(data): 'ids' holds index 4294967299 at position (0, 1), out of range for embedding at wte (valid: 0 <= index < 50)
    """  # noqa: E501 - a doctest output line (the error message)
    for check in checks:
        size = check.size
        if size is None and check.size_from is not None:
            name, axis = check.size_from
            size = int(np.shape(arrays[name])[axis])
        if check.length_axis is not None:
            length = int(np.shape(arrays[check.key])[check.length_axis])
            if size is not None and length > size:
                raise IndexRangeError(
                    f"evaluate(data): {check.key!r} has length {length} along axis {check.length_axis}, but its "
                    f"positions index {check.describe(size)}: at most {size} positions"
                )
            continue
        values = _integers(arrays[check.key], to_numpy, is_array)
        if values is None or values.size == 0:
            continue
        low, high = values.min(), values.max()
        if low < 0 or (size is not None and high >= size):
            bad = low if low < 0 else high
            position = tuple(int(i) for i in np.argwhere(values == bad)[0])
            raise IndexRangeError(
                f"evaluate(data): {check.key!r} holds index {int(bad)} at position {position}, out of range for "
                f"{check.describe(size)}"
            )


def _integers(
    value: Any, to_numpy: Callable[[Any], np.ndarray], is_array: Callable[[Any], bool] | None
) -> np.ndarray | None:
    """``value`` as a NumPy array of integers (bools count as 0 and 1); ``None`` when it is not integers."""
    try:
        array = np.asarray(to_numpy(value) if is_array is None or is_array(value) else value)
    except (TypeError, ValueError):  # ragged lists, objects: the dtype checks say what is wrong
        return None
    if array.dtype.kind == "b":
        return array.astype(np.int64)
    return array if array.dtype.kind in "iu" else None
