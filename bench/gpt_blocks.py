"""A GPT-2-shaped model built from core blocks (used by the benchmarks; the full GPT builder with
checkpoint loading lives in mithril-models)."""

from __future__ import annotations

from mithril.models import Add, Embedding, Gelu, IOKey, LayerNorm, Linear, Model, MultiHeadAttention


def gpt_block(dims: int, heads: int, name: str) -> Model:
    """Pre-norm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x))."""
    block = Model(name=name)
    block |= LayerNorm(name="ln_1")(input="input")
    block += MultiHeadAttention(dims, heads, causal=True, name="attn")
    block |= Add()(left="input", right=block.cout, output="residual")
    block |= LayerNorm(name="ln_2")(input="residual")
    block += Linear(4 * dims, name="c_fc")
    block += Gelu(approximate=True)
    block += Linear(dims, name="c_proj")
    block |= Add()(left="residual", right=block.cout, output=IOKey("output"))
    return block


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


def block_stack(num_layers: int = 2, dims: int = 768, heads: int = 12) -> Model:
    """``num_layers`` GPT-2 blocks on an input ``[batch, seq, dims]`` (no embeddings or head)."""
    model = Model(name="stack")
    for i in range(num_layers):
        block = gpt_block(dims, heads, name=f"h_{i}")
        model += block(input="input") if i == 0 else block
    return model
