"""Dropout: ``output = input * mask`` where the mask drops with probability ``p`` and rescales by 1/(1-p)."""

from __future__ import annotations

from typing import Any

from ... import validation
from ...errors import ModelConnectionError
from ...framework.keys import IOKey
from ...framework.model import Model, _Call
from ..primitive import Primitive

__all__ = ["Dropout"]


class Dropout(Model):
    """Inverted dropout. ``Dropout(p=0.5)``; ``Dropout(p=0.5)(training=False)`` makes it the identity.

    The mask comes from the backend's random generator (the backend's ``seed``), and the same mask is
    used by the forward and backward pass of one ``evaluate`` call.
    """

    def __init__(self, p: float = 0.5, training: bool = True, *, name: str | None = None) -> None:
        super().__init__(name=name)
        p = validation.number("Dropout", "p", p, low=0.0, high=1.0, high_open=True)
        training = validation.boolean("Dropout", "training", training)
        mask = Primitive("dropout_mask", p=p, training=training)
        self |= mask(input=IOKey("input"))
        self._mask_node = self._graph.nodes[-1]
        self |= Primitive("multiply")(left="input", right=mask.output, output=IOKey("output"))

    def __call__(self, **connections: Any) -> _Call:
        if "training" in connections:
            training = connections.pop("training")
            training = validation.boolean(f"{self._path()}", "training (a constant)", training)
            if self._parent is not None:
                raise ModelConnectionError(
                    f"{self._path()}: training can only be set before the Dropout is added to a model"
                )
            self._mask_node.attrs["training"] = training
        return super().__call__(**connections)
