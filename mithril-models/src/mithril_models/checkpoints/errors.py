"""Errors of checkpoint loading."""

from __future__ import annotations

from mithril.errors import MithrilError

__all__ = ["CheckpointError"]


class CheckpointError(MithrilError, ValueError):
    """A checkpoint that cannot be read (missing, truncated, corrupt, pickle-based) or does not fit the
    model (missing, unexpected or mis-shaped tensors); the message names the path and every problem."""
