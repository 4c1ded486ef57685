"""Checkpoint names of Llama-style decoders: the Hugging Face ``LlamaForCausalLM`` / ``MistralForCausalLM`` layout.

``nn.Linear`` stores ``[out, in]`` as Mithril's ``Linear``, so no tensor is transposed. ``lm_head.weight``
fills ``model.embed_tokens.weight`` when the embeddings are tied (both keys must then hold the same values;
``save_pretrained`` writes only the first). Files saved from the base ``LlamaModel`` lack the ``model.``
prefix; the rotary ``inv_freq`` buffers some older files carry are ignored (they are recomputed from the
config).

Example:
    >>> from mithril_models.llama.config import LlamaConfig
    >>> config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                      num_attention_heads=2, tie_word_embeddings=True)
    >>> layout = hf_layout(config)
    >>> layout.entries["lm_head.weight"][0].path, layout.canonical("layers.0.mlp.up_proj.weight")
    ('model.embed_tokens.weight', 'model.layers.0.mlp.up_proj.weight')
"""

from __future__ import annotations

from ..checkpoints.layout import Layout, Target, searching, task_prefixed
from .config import LlamaConfig

__all__ = ["hf_layout"]


def hf_layout(config: LlamaConfig) -> Layout:
    """The Hugging Face layout for a Llama-style decoder of ``config``'s sizes (paths relative to the model)."""
    entries: dict[str, list[Target]] = {}

    def linear(prefix: str, bias: bool) -> None:
        entries[f"{prefix}.weight"] = [Target(f"{prefix}.weight")]
        if bias:
            entries[f"{prefix}.bias"] = [Target(f"{prefix}.bias")]

    entries["model.embed_tokens.weight"] = [Target("model.embed_tokens.weight")]
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}"
        linear(f"{layer}.input_layernorm", False)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            linear(f"{layer}.self_attn.{name}", config.attention_bias)
        linear(f"{layer}.post_attention_layernorm", False)
        for name in ("gate_proj", "up_proj", "down_proj"):
            linear(f"{layer}.mlp.{name}", config.mlp_bias)
    linear("model.norm", False)
    entries["lm_head.weight"] = [
        Target("model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight")
    ]
    family = "MistralForCausalLM" if config.model_type == "mistral" else "LlamaForCausalLM"
    return Layout(
        f"Hugging Face transformers ({family})",
        entries,
        ignorable=searching(r"(^|\.)(rotary_emb\.inv_freq|self_attn\.rotary_emb\.inv_freq)$"),  # old files' buffers
        canonical=task_prefixed("model.", "lm_head."),  # LlamaModel files: layers.0.mlp.up_proj.weight...
    )
