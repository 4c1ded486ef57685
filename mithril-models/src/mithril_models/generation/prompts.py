"""Prompts of :func:`~mithril_models.generate`: token ids as a list, a list of lists of any lengths or an
int array ``[batch, length]`` (with an ``attention_mask`` marking padding, as ``transformers``), checked and
held as :class:`Prompts` (the real tokens of each row), which lays them out left-padded for a decoder.

Example:
    >>> prompts = parse_prompts("generate", [[5, 6, 7], [8]], None)
    >>> prompts.lengths, prompts.left_padded(4)
    ([3, 1], (array([[0, 5, 6, 7],
           [0, 0, 0, 8]]), array([1, 3])))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mithril.errors import ArgumentError, IndexRangeError

__all__ = ["Prompts", "parse_prompts"]


@dataclass(frozen=True)
class Prompts:
    """The token ids of each prompt (int64 arrays, no padding).

    >>> Prompts([np.array([1, 2]), np.array([3])]).repeat(2).lengths
    [2, 2, 1, 1]
    """

    rows: list[np.ndarray]

    @property
    def batch(self) -> int:
        return len(self.rows)

    @property
    def lengths(self) -> list[int]:
        return [len(row) for row in self.rows]

    @property
    def longest(self) -> int:
        return max(self.lengths)

    def left_padded(self, width: int, pad: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(ids [batch, width], pads [batch])``: each row right-aligned after ``pads`` ids ``pad``."""
        ids = np.full((self.batch, width), pad, dtype=np.int64)
        pads = np.array([width - len(row) for row in self.rows], dtype=np.int64)
        for i, row in enumerate(self.rows):
            ids[i, pads[i] :] = row
        return ids, pads

    def repeat(self, times: int) -> Prompts:
        """Every prompt ``times`` times in a row (the beams of beam search)."""
        return Prompts([row for row in self.rows for _ in range(times)])

    def check_vocabulary(self, where: str, vocab_size: int | None) -> None:
        """An :class:`IndexRangeError` naming the first id outside ``0 .. vocab_size - 1`` and its position."""
        if vocab_size is None:
            return
        for i, row in enumerate(self.rows):
            bad = np.flatnonzero((row < 0) | (row >= vocab_size))
            if bad.size:
                raise IndexRangeError(
                    f"{where}: prompt_ids holds token id {int(row[bad[0]])} at position ({i}, {int(bad[0])}), out of "
                    f"range for vocab_size={vocab_size} (ids 0..{vocab_size - 1})"
                )


def _integers(where: str, array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "iu":
        return array.astype(np.int64, copy=False)
    if array.dtype.kind == "f" and array.size and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
        return array.astype(np.int64)
    raise ArgumentError(f"{where}: prompt_ids must be integer token ids, got dtype {array.dtype}")


def _ragged(where: str, prompt_ids: Any) -> list[np.ndarray] | None:
    """The rows of a list of lists of different lengths (``None`` for anything else)."""
    if not isinstance(prompt_ids, Sequence) or isinstance(prompt_ids, str) or not prompt_ids:
        return None
    if not all(isinstance(r, (Sequence, np.ndarray)) and not isinstance(r, str) for r in prompt_ids):
        return None
    if len({len(r) for r in prompt_ids}) == 1:
        return None
    rows = []
    for i, row in enumerate(prompt_ids):
        array = np.asarray(row)
        if array.ndim != 1 or array.size == 0:
            raise ArgumentError(f"{where}: prompt_ids[{i}] must be a non-empty list of token ids, got {row!r:.60}")
        rows.append(_integers(where, array))
    return rows


def _masked(where: str, ids: np.ndarray, attention_mask: Any) -> list[np.ndarray]:
    """The tokens of each row of ``ids`` that ``attention_mask`` marks with 1 (one contiguous run)."""
    try:
        mask = np.asarray(attention_mask)
    except ValueError:  # ragged lists
        raise ArgumentError(f"{where}: attention_mask must have the shape of prompt_ids {ids.shape}") from None
    if mask.ndim == 1:
        mask = mask[None, :]
    if mask.shape != ids.shape:
        raise ArgumentError(f"{where}: attention_mask must have the shape of prompt_ids {ids.shape}, got {mask.shape}")
    if not np.isin(mask, (0, 1)).all():
        raise ArgumentError(f"{where}: attention_mask must hold 0 (padding) and 1 (tokens) only")
    rows = []
    for i, row in enumerate(mask):
        kept = np.flatnonzero(row)
        if kept.size == 0 or kept[-1] - kept[0] + 1 != kept.size:
            raise ArgumentError(
                f"{where}: attention_mask row {i} must mark one run of tokens (padding before or after it), got "
                f"{row.tolist()}"
            )
        rows.append(ids[i, kept[0] : kept[-1] + 1])
    return rows


def parse_prompts(where: str, prompt_ids: Any, attention_mask: Any = None) -> Prompts:
    """``prompt_ids`` (a list of ids, a list of lists of any lengths, an int array ``[batch, length]``) and
    its optional ``attention_mask`` (``1`` for tokens, ``0`` for padding on either side) as :class:`Prompts`;
    an :class:`ArgumentError` saying what was expected otherwise.

    >>> parse_prompts("generate", np.array([[0, 0, 3], [1, 2, 3]]), [[0, 0, 1], [1, 1, 1]]).lengths
    [1, 3]
    """
    rows = _ragged(where, prompt_ids)
    if rows is not None:
        if attention_mask is not None:
            raise ArgumentError(f"{where}: attention_mask needs prompt_ids of one length (a [batch, length] array)")
        return Prompts(rows)
    try:
        array = np.asarray(prompt_ids)
    except ValueError as exc:
        raise ArgumentError(f"{where}: prompt_ids must be token ids, a list of lists or an array: {exc}") from None
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise ArgumentError(
            f"{where}: prompt_ids must be a list of ids or a [batch, length] array, got shape {array.shape}"
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ArgumentError(f"{where}: prompt_ids must hold at least one token per prompt, got shape {array.shape}")
    array = _integers(where, array)
    if attention_mask is not None:
        return Prompts(_masked(where, array, attention_mask))
    return Prompts(list(array))
