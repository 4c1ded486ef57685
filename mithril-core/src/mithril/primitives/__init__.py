"""Primitives: the atoms of every model. A spec (shape/type rule) per name, in one registry."""

from . import rules
from .registry import Registry, resolve_target, uses_backend
from .spec import REQUIRED, PrimitiveSpec, ShapeIO

__all__ = ["PrimitiveSpec", "REQUIRED", "Registry", "ShapeIO", "resolve_target", "rules", "uses_backend"]
