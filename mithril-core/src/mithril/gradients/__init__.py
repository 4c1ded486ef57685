"""Gradient rules: generic VJPs written in terms of primitives (see :mod:`.context` for the rule API)."""

from .context import GradContext, Ops

__all__ = ["GradContext", "Ops"]
