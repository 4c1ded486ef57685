"""Llama-style decoders as Mithril models: :class:`Llama`, :func:`create_llama` and :func:`from_hf_config`.

The child blocks carry the names of ``transformers.LlamaForCausalLM``'s modules (``model.embed_tokens``,
``model.layers.0.self_attn.q_proj``, ``model.norm``, ``lm_head``), so a model compiled with
``use_short_namings=False`` has the parameter names of a Hugging Face checkpoint and :func:`load_hf` fills
it from one. Mistral checkpoints (``MistralConfig``) build the same model with a sliding window.

Example:
    >>> llama = create_llama(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                      num_attention_heads=2)
    >>> llama.family, llama.input_keys[:1], llama.output_keys
    ('llama', ['input'], ['output'])
"""

from __future__ import annotations

from typing import Any

from ..family import FamilyModel
from .checkpoint import hf_layout
from .config import LlamaConfig
from .layers import build_llama

__all__ = ["Llama", "create_llama", "from_hf_config"]


class Llama(FamilyModel[LlamaConfig]):
    """A Llama-style decoder (a :class:`FamilyModel`, ``family = "llama"``): ``input`` (int token ids
    ``[B, T]``) -> ``output`` (logits ``[B, T, vocab_size]``).

    >>> from mithril_models.llama.config import LlamaConfig
    >>> Llama(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                   num_attention_heads=2)).family
    'llama'
    """

    family = "llama"
    config_type = LlamaConfig
    made_by = "create_llama(...) or from_hf_config(...)"
    builder = staticmethod(build_llama)
    layouts = (hf_layout,)
    """Hugging Face ``LlamaForCausalLM`` names (also ``LlamaModel`` files without ``model.``)."""


def create_llama(
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    *,
    name: str | None = None,
    **options: Any,
) -> Llama:
    """A Llama-style decoder with the given sizes; ``options`` are the other fields of :class:`LlamaConfig`
    (``num_key_value_heads``, ``rope_theta``, ``rope_scaling``, ``tie_word_embeddings``, ...).

    >>> llama = create_llama(64, 32, 64, 2, 4, num_key_value_heads=1)
    >>> llama.config.num_key_value_heads, llama.config.head_dim
    (1, 8)
    """
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        **options,
    )
    return Llama(config, name=name)


def from_hf_config(config: Any) -> Llama:
    """The decoder of a ``transformers`` ``LlamaConfig``/``MistralConfig`` (or a ``config.json`` dict).

    >>> from_hf_config({"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
    ...                 "num_attention_heads": 2, "num_key_value_heads": 1}).config.num_key_value_groups
    2
    """
    return Llama(config if isinstance(config, LlamaConfig) else LlamaConfig.from_hf(config))
