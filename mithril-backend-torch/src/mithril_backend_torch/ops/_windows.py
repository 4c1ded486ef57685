"""Convolution/pooling geometry shared by ``nn`` and ``gradient_helpers``: padding specs normalised by
core (:func:`~mithril.primitives.geometry.window_attributes`) and turned into what torch's kernels accept.

torch's convolutions take one symmetric padding per axis, and its pooling kernels only pad up to half
the kernel; anything else (``"same"`` with an even kernel, ``((1, 0), (2, 1))``) is padded explicitly
with ``F.pad`` first.

Example:
    >>> torch_padding(((1, 1), (2, 2)))
    (1, 2)
    >>> torch_padding(((1, 0), (2, 2))) is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from mithril.extend import spatial, window_attributes

__all__ = ["pad_spatial", "pool_geometry", "torch_padding"]

Pads = Sequence[tuple[int, int]]


def torch_padding(pads: Pads) -> tuple[int, ...] | None:
    """One symmetric padding per axis, or ``None`` when some axis pads unevenly."""
    if all(before == after for before, after in pads):
        return tuple(before for before, _ in pads)
    return None


def pad_spatial(x: torch.Tensor, pads: Pads, value: float = 0.0) -> torch.Tensor:
    """Pad the trailing ``len(pads)`` axes of ``x`` by ``(before, after)`` each."""
    if not any(before or after for before, after in pads):
        return x
    flat = [int(v) for before_after in reversed(pads) for v in before_after]
    return F.pad(x, flat, mode="constant", value=value)


def pool_geometry(
    kernel_size: Any, stride: Any, padding: Any, dilation: Any
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...]]:
    """``(kernel, stride, pads, dilation)`` of a 2-d pool (``stride=None`` means the kernel size)."""
    kernel = spatial(kernel_size, 2)
    return kernel, *window_attributes(kernel, stride=stride, padding=padding, dilation=dilation)
