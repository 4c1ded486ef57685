"""Llama-style decoders (Llama 1-3, Mistral) for Mithril: :func:`create_llama`, :func:`from_hf_config`, the
KV-cache decode steps and the Hugging Face ``LlamaForCausalLM`` checkpoint layout.

Example:
    >>> from mithril_models.llama import create_llama
    >>> llama = create_llama(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    ...                      num_attention_heads=4, num_key_value_heads=2)
    >>> llama.family, llama.config.num_key_value_groups
    ('llama', 2)
"""

from .checkpoint import hf_layout
from .config import LlamaConfig
from .decode import LlamaDecodeStep, LlamaKVDecoder
from .model import Llama, create_llama, from_hf_config
from .rope import rope_frequencies

__all__ = [
    "Llama",
    "LlamaConfig",
    "LlamaDecodeStep",
    "LlamaKVDecoder",
    "create_llama",
    "from_hf_config",
    "hf_layout",
    "rope_frequencies",
]
