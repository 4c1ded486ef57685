"""A GPT-2-shaped model built from core blocks (used by the benchmarks; the full GPT builder with
checkpoint loading lives in mithril-models). Its block and a stack of blocks (``gpt_block``, ``block_stack``)
are mithril_testing.models', which the tests use too."""

from __future__ import annotations

from mithril.models import Add, Embedding, IOKey, LayerNorm, Linear, Model
from mithril_testing.models import gpt2_block as gpt_block
from mithril_testing.models import gpt2_stack as block_stack

__all__ = ["block_stack", "gpt", "gpt_block"]


def gpt(num_layers: int = 12, dims: int = 768, heads: int = 12, vocab: int = 50257, block_size: int = 1024) -> Model:
    """Token + position embeddings, ``num_layers`` blocks, final LayerNorm, untied LM head."""
    model = Model(name="gpt")
    model |= Embedding(vocab, dims, name="wte")(input="input", output="tok")
    model |= Embedding(block_size, dims, name="wpe")(input="positions", output="pos")
    model |= Add()(left="tok", right="pos")
    for i in range(num_layers):
        model += gpt_block(dims, heads, name=f"h_{i}")
    model += LayerNorm(name="ln_f")
    model += Linear(vocab, use_bias=False, name="lm_head")(output=IOKey("logits"))
    return model
