"""Regularisers for ``TrainModel.add_regularization``: ``L1`` and ``L2`` (defined with ``TrainModel``) and
``QuadraticFormRegularizer``.

Example:
    >>> from mithril.models import QuadraticFormRegularizer
    >>> QuadraticFormRegularizer().input_keys
    ['input', 'kernel']
"""

from __future__ import annotations

from ...framework.keys import IOKey
from ...framework.model import Model
from ..train_model import L1, L2
from ._util import op

__all__ = ["L1", "L2", "QuadraticFormRegularizer"]


class QuadraticFormRegularizer(Model):
    """``0.5 * input^T @ kernel @ input`` for a vector ``input`` ``[N]`` and a matrix ``kernel`` ``[N, N]``
    (the RKHS norm of a kernel machine whose coefficients are ``input``). With ``kernel`` the identity it
    is ``L2``.

    >>> QuadraticFormRegularizer().output_keys
    ['output']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "kernel")  # .connect(input, kernel) is their order
        weights = IOKey("input", shape=["N"])
        product = op(self, "matmul", IOKey("kernel", shape=["N", "N"]), weights)
        self.expose(op(self, "multiply", op(self, "sum", op(self, "multiply", weights, product)), 0.5), "output")
        self._cin = self._keys["input"]
