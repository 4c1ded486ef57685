"""Token embedding: rows of ``weight [num_embeddings, dim]`` picked by integer ids."""

from __future__ import annotations

from ... import initializers
from ...framework.keys import IOKey
from ...framework.model import Model
from ..primitive import Primitive
from ._util import check_size, param

__all__ = ["Embedding"]


class Embedding(Model):
    """``output = weight[input]``. ``Embedding(num_embeddings=50257, dim=768)``; ``init`` is how
    ``randomize_params`` draws ``weight`` (:mod:`mithril.initializers`; default normal(0, 0.02))."""

    def __init__(
        self,
        num_embeddings: int | None = None,
        dim: int | None = None,
        *,
        init: str = "normal",
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        num_embeddings = check_size("Embedding", "num_embeddings", num_embeddings)
        dim = check_size("Embedding", "dim", dim)
        self |= Primitive("embedding")(
            input=IOKey("input", type="int"),
            weight=param(
                "weight", init=initializers.check("Embedding(init=...)", init) or "normal", shape=[num_embeddings, dim]
            ),
            output=IOKey("output"),
        )
