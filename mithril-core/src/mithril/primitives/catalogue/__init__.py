"""Core's primitive set (DESIGN §8), one module per family. ``ALL_SPECS`` is what the built-in plugin registers."""

from . import custom, elementwise, gradient_helpers, linalg, losses, nn, optim, recurrent, reductions, shape_ops

ALL_SPECS = (
    *elementwise.SPECS,
    *linalg.SPECS,
    *reductions.SPECS,
    *shape_ops.SPECS,
    *nn.SPECS,
    *recurrent.SPECS,
    *optim.SPECS,
    *losses.SPECS,
    *gradient_helpers.SPECS,
    *custom.SPECS,
)

__all__ = ["ALL_SPECS"]
