"""Generic VJP rules, one module per primitive family (mirroring :mod:`mithril.primitives.catalogue`).

``ALL_RULES`` maps a primitive name to its rule ``rule(ctx) -> {input_key: cotangent or None}`` (see
:mod:`mithril.gradients.context`). Every primitive with a differentiable float input has one; primitives
whose inputs are all non-differentiable (comparisons, ``sign``, ``floor``, ``argmax``, creation ops, the
gradient helpers themselves, ...) have none.
"""

from __future__ import annotations

from ..context import VjpRule
from . import elementwise, linalg, losses, nn, recurrent, reductions, shape_ops

_MODULES = (elementwise, linalg, reductions, shape_ops, nn, losses, recurrent)


def _merge() -> dict[str, VjpRule]:
    rules: dict[str, VjpRule] = {}
    for module in _MODULES:
        clash = set(rules) & set(module.RULES)
        assert not clash, f"{module.__name__} redefines gradient rule(s) {sorted(clash)}"
        rules.update(module.RULES)
    return rules


ALL_RULES: dict[str, VjpRule] = _merge()

__all__ = ["ALL_RULES"]
