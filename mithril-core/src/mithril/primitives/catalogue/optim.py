"""Optimizer updates as primitives: one call per parameter in a compiled training step.

``adam_update`` is Adam's (and AdamW's) step for one parameter. Its formula is written once, in Mithril's
primitives, as its decomposition (:func:`mithril.models.blocks.optimizer_steps.adam_update_decomposition`, built from
:func:`mithril.optim.optimizers.adam_step`), which every
backend without an implementation of its own compiles; a framework with a faster form of the same step
(PyTorch's in-place ``lerp_``/``addcmul_``/``addcdiv_``, a few passes over memory instead of a dozen)
implements the primitive itself.

Example:
    >>> from mithril.plugins import registry
    >>> registry().primitive("adam_update").output_keys({})
    ('new_param', 'new_m', 'new_v')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ArgumentError
from ...shapes import Shape, unify
from ..spec import PrimitiveSpec

__all__ = ["SPECS", "ADAM_INPUTS", "ADAM_OUTPUTS"]

ADAM_INPUTS = ("param", "grad", "m", "v", "lr", "step")
ADAM_OUTPUTS = ("new_param", "new_m", "new_v")


def _adam_shapes(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """``grad``, the moments and the outputs are shaped like ``param``; ``lr`` and ``step`` are scalars."""
    for key in ("grad", "m", "v", *ADAM_OUTPUTS):
        unify(io[key], io["param"])
    unify(io["lr"], Shape())
    unify(io["step"], Shape())
    return True


def _floats(kinds: Mapping[str, Any], attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    return dict.fromkeys(ADAM_OUTPUTS, "float")


def _check_adam(attrs: Mapping[str, Any]) -> None:
    for name in ("beta1", "beta2"):
        if not 0.0 <= float(attrs[name]) < 1.0:
            raise ArgumentError(f"adam_update: {name} must be in [0, 1), got {attrs[name]!r}")
    if not float(attrs["eps"]) > 0.0 or float(attrs["weight_decay"]) < 0.0:
        raise ArgumentError(f"adam_update: eps must be > 0 and weight_decay >= 0, got eps={attrs['eps']!r}, weight_decay={attrs['weight_decay']!r}")


SPECS = (
    PrimitiveSpec(
        "adam_update",
        ADAM_INPUTS,
        _adam_shapes,
        _floats,
        attributes={"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "decoupled": False},
        outputs=ADAM_OUTPUTS,
        differentiable=(),
        check_attributes=_check_adam,
        doc="one Adam step (torch.optim.Adam/AdamW) of param with grad, moments m and v, rate lr, step number "
        "step (from 1): m' = b1 m + (1 - b1) g, v' = b2 v + (1 - b2) g^2, param' = param - lr m'/(1 - b1^t) / "
        "(sqrt(v'/(1 - b2^t)) + eps); weight_decay adds wd * param to g, or with decoupled scales param by "
        "1 - lr wd first",
        decomposition="mithril.models.blocks.optimizer_steps:adam_update_decomposition",
    ),
)
