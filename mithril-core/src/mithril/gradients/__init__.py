"""Gradient rules: generic VJPs written in terms of primitives, one module per primitive family in
:mod:`.vjp_rules` (see :mod:`.context` for the rule API; the shape rules are
:mod:`mithril.primitives.shape_rules`)."""

from .context import GradContext, Ops

__all__ = ["GradContext", "Ops"]
