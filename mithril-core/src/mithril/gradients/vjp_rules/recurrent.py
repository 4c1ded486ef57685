"""VJP rule of ``lstm_recurrence``: one ``lstm_recurrence_grad`` call (backpropagation through time)."""

from __future__ import annotations

from ...primitives.catalogue.recurrent import LSTM_INPUTS, LSTM_OUTPUTS
from ..context import Cotangents, GradContext
from ._common import wants


def lstm_recurrence(ctx: GradContext) -> Cotangents:
    """The cotangents of ``output``, ``hidden`` and ``cell`` (zeros where none flows) pulled back through
    the whole time loop at once; the helper recomputes the gates from the forward ``output``."""
    cotangents = [ctx.cotangents.get(k) for k in LSTM_OUTPUTS]
    filled = [
        ctx.ops.zeros_like(ctx.outputs[k]) if g is None else g for k, g in zip(LSTM_OUTPUTS, cotangents, strict=True)
    ]
    grads = ctx.ops.lstm_recurrence_grad(*filled, *(ctx[k] for k in LSTM_INPUTS), ctx.outputs["output"])
    return {k: g for k, g in zip(LSTM_INPUTS, grads, strict=True) if wants(ctx, k)}


RULES = {"lstm_recurrence": lstm_recurrence}
