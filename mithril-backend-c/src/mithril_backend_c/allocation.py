"""Workspace allocation: every value a unit stores in the workspace gets an offset, fixed at compile time,
and its bytes are reused once its last reader has run (:mod:`~mithril_backend_c.liveness`); a unit's
scratch space is taken while it runs and given back after it.

Example:
    >>> plan = allocate([UnitMemory([(1, 100)], 0), UnitMemory([(2, 100)], 64)], {1: 1, 2: math.inf})
    >>> plan.offsets, plan.scratch, plan.size
    ({1: 0, 2: 128}, [None, 256], 320)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .context import ALIGN

__all__ = ["Allocation", "Arena", "UnitMemory", "allocate"]


def _aligned(nbytes: int) -> int:
    return max(ALIGN, (nbytes + ALIGN - 1) // ALIGN * ALIGN)


class Arena:
    """First-fit allocator over the workspace (offsets known at compile time).

    >>> arena = Arena()
    >>> arena.alloc(10), arena.alloc(10), arena.top
    (0, 64, 128)
    """

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []  # (offset, size), sorted
        self.top = 0

    def alloc(self, nbytes: int) -> int:
        nbytes = _aligned(nbytes)
        for i, (offset, size) in enumerate(self.free):
            if size >= nbytes:
                if size == nbytes:
                    del self.free[i]
                else:
                    self.free[i] = (offset + nbytes, size - nbytes)
                return offset
        if self.free and self.free[-1][0] + self.free[-1][1] == self.top:  # grow the last free block
            offset, _ = self.free.pop()
            self.top = offset + nbytes
            return offset
        offset, self.top = self.top, self.top + nbytes
        return offset

    def release(self, offset: int, nbytes: int) -> None:
        self.free.append((offset, _aligned(nbytes)))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for off, size in self.free:
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((off, size))
        self.free = merged


@dataclass(slots=True)
class UnitMemory:
    """What one unit needs of the workspace: ``stored``, the ``(value id, bytes)`` of each value it
    writes there, and ``scratch`` bytes while it runs."""

    stored: list[tuple[int, int]]
    scratch: int


@dataclass
class Allocation:
    """Where everything lives: value id -> workspace offset, each unit's scratch offset (``None``: it
    needs none) and the workspace's size in bytes."""

    offsets: dict[int, int] = field(default_factory=dict)
    scratch: list[int | None] = field(default_factory=list)
    size: int = 0


def allocate(units: Sequence[UnitMemory], last_use: Mapping[int, float]) -> Allocation:
    """Lay out the workspace of units run in order: a value's block is free again after the unit that
    reads it last (``last_use``: value id -> unit index, ``math.inf`` for a returned value)."""
    arena, result = Arena(), Allocation()
    release: dict[int, list[tuple[int, int]]] = {}  # unit index -> blocks free after it
    for index, unit in enumerate(units):
        for value_id, nbytes in unit.stored:
            offset = result.offsets[value_id] = arena.alloc(nbytes)
            free_after = last_use.get(value_id, index)
            if free_after != math.inf:
                release.setdefault(max(int(free_after), index), []).append((offset, nbytes))
        scratch = arena.alloc(unit.scratch) if unit.scratch else None
        result.scratch.append(scratch)
        if scratch is not None:
            arena.release(scratch, unit.scratch)
        for offset, nbytes in release.pop(index, ()):
            arena.release(offset, nbytes)
    result.size = arena.top
    return result
