"""Mithril's ``mithril.common`` names that user code imports.

``PaddingType.SAME`` / ``PaddingType.VALID`` are the enum spellings of the convolution and pooling padding
strings ``"same"`` / ``"valid"``; every ``padding=`` that takes those strings takes them.

Example:
    >>> from mithril.common import PaddingType
    >>> from mithril.models import Conv1d
    >>> Conv1d(out_channels=1, kernel_size=3, padding=PaddingType.SAME).input_keys[0]
    'input'
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["PaddingType"]


class PaddingType(IntEnum):
    """Padding by name: ``VALID`` (none) or ``SAME`` (the output keeps the input's spatial size at stride 1)."""

    VALID = 0
    SAME = 1
