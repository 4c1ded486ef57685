"""CLIP's text tower: token + position embeddings, a causal transformer, the end-of-text feature, a projection.

Key ``text`` (int token ids ``[batch, tokens]``, at most ``context_length`` tokens) -> ``output``
(``[batch, embed_dim]``, not normalised; OpenAI's ``encode_text``, HF's ``get_text_features``).

Example:
    >>> from mithril_models.clip_family.config import TextConfig
    >>> tower = EncodeText(TextConfig(embed_dim=16, context_length=8, vocab_size=100, width=32, heads=4, layers=2))
    >>> tower.input_keys[0], tower.output_keys
    ('text', ['output'])
"""

from __future__ import annotations

from typing import Any

from mithril.extend import initializers, op
from mithril.models import Connection, Embedding, IOKey, LayerNorm, Linear

from ..checkpoints.layout import Layout
from ..family import FamilyModel
from .config import TextConfig
from .layers import encoder_layers

__all__ = ["EncodeText", "pool_end_of_text"]


def pool_end_of_text(
    model: FamilyModel[Any], hidden: Connection, text: Connection, eos_token_id: int | None
) -> Connection:
    """``hidden[b, t_b]`` (``[batch, width]``) where ``t_b`` is the end-of-text position of row ``b``.

    ``t_b = argmax(text[b])`` (the highest id, OpenAI's rule) or, with ``eos_token_id``, the first position
    holding that id (``transformers``' rule; position 0 when the row has none, as ``argmax`` of zeros).
    The row is picked by a one-hot matrix product, which is exact and differentiable on every backend.

    >>> tower = EncodeText(TextConfig(16, 8, 100, 32, 4, 1, eos_token_id=99))  # pools with this rule
    >>> tower.output_keys
    ['output']
    """
    if eos_token_id is None:
        index = text.argmax(axis=-1)
    else:
        index = text.eq(eos_token_id).cast("int").argmax(axis=-1)
    positions = op(model, "positions", text, axis=-1)  # [T]
    one_hot = positions.eq(index.reshape(None, 1)).cast("float")  # [B, T]
    picked = one_hot[:, None, :] @ hidden  # [B, 1, width]
    pooled: Connection = picked[:, 0, :]
    return pooled


class EncodeText(FamilyModel[TextConfig]):
    """The text tower (see the module docstring); build it with :func:`mithril_models.clip_family.encode_text`.

    Children follow ``transformers``' ``CLIPTextModelWithProjection``: ``text_model.embeddings.*``,
    ``text_model.encoder.layers.<i>``, ``text_model.final_layer_norm``, ``text_projection``.

    >>> EncodeText(TextConfig(16, 8, 100, 32, 4, 1)).family
    'clip'
    """

    family = "clip"

    def __init__(self, config: TextConfig, *, name: str | None = None) -> None:
        super().__init__(config, name=name)
        width = config.width
        tokens = Embedding(config.vocab_size, width, name="text_model.embeddings.token_embedding")
        self |= tokens(input=IOKey("text", shape=[None, None], type="int"))
        text = Connection(self, "text")
        positions = Embedding(config.context_length, width, name="text_model.embeddings.position_embedding")
        self |= positions(input=op(self, "positions", text, axis=-1))
        hidden = tokens.output + positions.output
        hidden = encoder_layers(self, hidden, config, config.layers, "text_model.encoder.layers", causal=True)
        final = LayerNorm(width, eps=config.layer_norm_eps, name="text_model.final_layer_norm")
        self |= final(input=hidden)
        pooled = pool_end_of_text(self, final.output, text, config.eos_token_id)
        projection = Linear(
            config.embed_dim, use_bias=False, weight_init=initializers.normal(width**-0.5), name="text_projection"
        )
        self |= projection(input=pooled, output=IOKey("output"))

    def checkpoint_layouts(self) -> list[Layout]:
        """Hugging Face and OpenAI names; the image tower's keys and ``logit_scale`` are ignorable."""
        from .checkpoint import text_layouts

        return text_layouts(self.config, alone=True)
