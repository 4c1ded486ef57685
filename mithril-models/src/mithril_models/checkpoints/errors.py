"""Errors of checkpoint loading (core's :class:`~mithril.errors.CheckpointError`, re-exported)."""

from __future__ import annotations

from mithril.errors import CheckpointError

__all__ = ["CheckpointError"]
