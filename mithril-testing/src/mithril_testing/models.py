"""Small models built from core blocks that tests and benchmarks share (one definition of each).

Example:
    >>> stack = gpt2_stack(num_layers=2, dims=16, heads=2)
    >>> stack.input_keys, stack.output_keys
    (['input'], ['output'])
"""

from __future__ import annotations

from mithril.models import Add, Gelu, IOKey, LayerNorm, Linear, Model, MultiHeadAttention

__all__ = ["gpt2_block", "gpt2_stack"]


def gpt2_block(dims: int, heads: int, name: str) -> Model:
    """A pre-norm GPT-2 transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x)) (``input`` ->
    ``output``, both ``[batch, seq, dims]``)."""
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


def gpt2_stack(num_layers: int = 2, dims: int = 768, heads: int = 12) -> Model:
    """``num_layers`` GPT-2 blocks ``h_0``, ``h_1``... on an input ``[batch, seq, dims]`` (no embeddings or
    head)."""
    model = Model(name="stack")
    for i in range(num_layers):
        block = gpt2_block(dims, heads, name=f"h_{i}")
        model += block(input="input") if i == 0 else block
    return model
