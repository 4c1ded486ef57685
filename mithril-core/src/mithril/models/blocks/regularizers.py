"""Regularisers for ``TrainModel.add_regularization``: ``L1`` and ``L2`` (defined with ``TrainModel``) and
``QuadraticFormRegularizer``.

Example:
    >>> from mithril.models import QuadraticFormRegularizer
    >>> QuadraticFormRegularizer().input_keys
    ['input', 'kernel']
"""

from __future__ import annotations

from typing import Any

from ...framework.keys import TBD, IOKey
from ...framework.model import Model
from ..train_model import L1, L2
from ._util import op, set_given

__all__ = ["L1", "L2", "QuadraticFormRegularizer"]


class QuadraticFormRegularizer(Model):
    """Mithril's ``QuadraticFormRegularizer``: ``output = 0.5 * input @ kernel @ input.T`` ``[1, 1]`` for a row
    ``input`` ``[1, N]`` and a matrix ``kernel`` ``[N, N]``: the RKHS norm of a kernel machine whose
    coefficients are ``input`` (``KernelizedSVM``'s ``weight`` with its ``kernel``). With ``kernel`` the
    identity it is ``L2``. ``TrainModel.add_regularization`` sums it into ``final_cost``.

    >>> QuadraticFormRegularizer().output_keys
    ['output']
    """

    def __init__(self, input: Any = TBD, kernel: Any = TBD, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "kernel")  # .connect(input, kernel) is their order
        row = IOKey("input", shape=[1, "N"])
        form = op(
            self,
            "matmul",
            op(self, "matmul", row, IOKey("kernel", shape=["N", "N"])),
            op(self, "swapaxes", IOKey("input")),
        )
        self.expose(op(self, "multiply", form, 0.5), "output")
        self.set_shapes(input=[1, "N"], kernel=["N", "N"], output=[1, 1])
        set_given(self, input=input, kernel=kernel)
        self._cin = self._keys["input"]
