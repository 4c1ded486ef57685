"""Checkpoint names of GPT-2: the Hugging Face ``GPT2LMHeadModel`` / ``GPT2Model`` layout.

HF's ``Conv1D`` stores weights as ``[in, out]``; Mithril's ``Linear`` is ``[out, in]``, so every
``c_attn``/``c_proj``/``c_fc`` weight is transposed. ``lm_head.weight`` fills ``transformer.wte.weight``
when the embeddings are tied (both keys must then hold the same values). Files saved from the base
``GPT2Model`` lack the ``transformer.`` prefix; older files carry the attention-mask buffers
``attn.bias``/``attn.masked_bias``, which are ignored.

Example:
    >>> from mithril_models.gpt.config import GPTConfig
    >>> layout = hf_layout(GPTConfig(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32))
    >>> layout.entries["lm_head.weight"][0].path, layout.canonical("h.0.ln_1.weight")
    ('transformer.wte.weight', 'transformer.h.0.ln_1.weight')
"""

from __future__ import annotations

from ..checkpoints.layout import Layout, Target, searching, task_prefixed, transpose
from .config import GPTConfig

__all__ = ["hf_layout"]


def hf_layout(config: GPTConfig) -> Layout:
    """The Hugging Face layout for a GPT-2 of ``config``'s sizes (paths relative to the GPT model)."""
    entries: dict[str, list[Target]] = {}

    def same(key: str) -> None:
        entries[key] = [Target(key)]

    def norm(prefix: str) -> None:
        same(f"{prefix}.weight")
        if config.bias:
            same(f"{prefix}.bias")

    def conv1d(prefix: str) -> None:
        entries[f"{prefix}.weight"] = [Target(f"{prefix}.weight", transpose)]
        if config.bias:
            same(f"{prefix}.bias")

    same("transformer.wte.weight")
    same("transformer.wpe.weight")
    for i in range(config.num_layers):
        block = f"transformer.h.{i}"
        norm(f"{block}.ln_1")
        conv1d(f"{block}.attn.c_attn")
        conv1d(f"{block}.attn.c_proj")
        norm(f"{block}.ln_2")
        conv1d(f"{block}.mlp.c_fc")
        conv1d(f"{block}.mlp.c_proj")
    norm("transformer.ln_f")
    entries["lm_head.weight"] = [Target("transformer.wte.weight" if config.tie_word_embeddings else "lm_head.weight")]
    return Layout(
        "Hugging Face transformers (GPT2LMHeadModel)",
        entries,
        ignorable=searching(r"(^|\.)h\.\d+\.attn\.(bias|masked_bias)$"),  # causal-mask buffers, in older files
        canonical=task_prefixed("transformer.", "lm_head."),  # GPT2Model files: h.0.ln_1.weight...
    )
