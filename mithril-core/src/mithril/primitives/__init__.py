"""Primitives: the atoms of every model. A spec (shape/type rule) per name, in one registry.

:mod:`.shape_rules` holds the reusable shape and type rules specs are written with (plugin authors reach it as
``mithril.extend.rules``); the gradient (VJP) rules are :mod:`mithril.gradients.vjp_rules`."""

from . import shape_rules
from .registry import Registry, resolve_target, uses_backend
from .spec import REQUIRED, PrimitiveSpec, ShapeIO

__all__ = ["REQUIRED", "PrimitiveSpec", "Registry", "ShapeIO", "resolve_target", "shape_rules", "uses_backend"]
