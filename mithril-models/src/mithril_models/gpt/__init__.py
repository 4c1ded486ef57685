"""GPT-2 for Mithril: :func:`create_gpt`, :func:`from_hf_config` and the KV-cache decode steps.

Example:
    >>> from mithril_models.gpt import create_gpt
    >>> gpt = create_gpt(bias=True, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=50)
    >>> gpt.family, gpt.config.num_layers
    ('gpt2', 2)
"""

from .checkpoint import hf_layout
from .config import GPTConfig
from .decode import GPTDecodeStep, KVDecoder
from .model import GPT, create_gpt, from_hf_config

__all__ = ["GPT", "GPTConfig", "GPTDecodeStep", "KVDecoder", "create_gpt", "from_hf_config", "hf_layout"]
