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
from ..shape_rules import float_results
from ..spec import PrimitiveSpec

__all__ = ["ADAM_INPUTS", "ADAM_OUTPUTS", "SPECS"]

ADAM_INPUTS = ("param", "grad", "m", "v", "step_size", "eps_hat", "shrink")
ADAM_OUTPUTS = ("new_param", "new_m", "new_v")


def _adam_shapes(io: Mapping[str, Shape], attrs: Mapping[str, Any]) -> bool:
    """``grad``, the moments and the outputs are shaped like ``param``; the step's numbers are scalars."""
    for key in ("grad", "m", "v", *ADAM_OUTPUTS):
        unify(io[key], io["param"])
    for key in ("step_size", "eps_hat", "shrink"):
        if key in io:
            unify(io[key], Shape())
    return True


def _check_adam(attrs: Mapping[str, Any]) -> None:
    for name in ("beta1", "beta2"):
        if not 0.0 <= float(attrs[name]) < 1.0:
            raise ArgumentError(f"adam_update: {name} must be in [0, 1), got {attrs[name]!r}")
    if not float(attrs["l2"]) >= 0.0:
        raise ArgumentError(f"adam_update: l2 must be >= 0, got {attrs['l2']!r}")
    if not isinstance(attrs["in_place"], bool):
        raise ArgumentError(f"adam_update: in_place must be True or False, got {attrs['in_place']!r}")


SPECS = (
    PrimitiveSpec(
        "adam_update",
        ADAM_INPUTS,
        _adam_shapes,
        float_results(*ADAM_OUTPUTS),
        attributes={"beta1": 0.9, "beta2": 0.999, "l2": 0.0, "in_place": False},
        outputs=ADAM_OUTPUTS,
        optional_inputs=frozenset({"shrink"}),
        differentiable=(),
        check_attributes=_check_adam,
        doc="one Adam step (torch.optim.Adam/AdamW) of param with grad and moments m, v: g = grad + l2 param, "
        "m' = b1 m + (1 - b1) g, v' = b2 v + (1 - b2) g^2, param' = param shrink - step_size m' / (sqrt(v') + "
        "eps_hat), the step's scalars holding the bias corrections (step_size = lr sqrt(1 - b2^t) / (1 - b1^t), "
        "eps_hat = eps sqrt(1 - b2^t)) and AdamW's shrink = 1 - lr wd (None: 1); in_place: param, m and v are "
        "donated (a training step that consumes its state), so an implementation may write the results into them",
        decomposition="mithril.models.blocks.optimizer_steps:adam_update_decomposition",
    ),
)
