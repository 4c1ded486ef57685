"""KV-cache decoding of Llama-style decoders: the decode steps (:class:`LlamaDecodeStep`) and their compiled
runner (:class:`LlamaKVDecoder`), over the same decoder-with-KV-cache piece as GPT-2's
(:mod:`mithril_models.kv_cache`).

The caches are ``[batch, num_key_value_heads, cache_len, head_dim]`` (grouped-query attention keeps only
the key-value heads) and hold the keys after the rotary embedding, so a cached key is never rotated again.

Example:
    >>> from mithril_models.llama.config import LlamaConfig
    >>> config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                      num_attention_heads=2, num_key_value_heads=1)
    >>> sorted(LlamaDecodeStep(config, batch=1, cache_len=8).input_keys)[:4]
    ['input', 'past_key_0', 'past_value_0', 'positions']
"""

from __future__ import annotations

from ..kv_cache import DecodeStepModel, FamilyDecodeSteps
from .config import LlamaConfig
from .model import Llama

__all__ = ["LlamaDecodeStep", "LlamaKVDecoder"]


class LlamaDecodeStep(DecodeStepModel[LlamaConfig], model=Llama):
    """A decode step of a Llama-style decoder for ``batch`` sequences with caches of ``cache_len`` slots:
    the prompt step (``prompt=True``: ``input [batch, T]`` -> ``output`` and ``present_*``), the one-token
    step (``input [batch, 1]``, ``positions [1]``, ``past_*`` -> ``output`` and ``present_*``) or a chunk
    step (see :class:`~mithril_models.kv_cache.StepShape`).

    >>> from mithril_models.llama.config import LlamaConfig
    >>> config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                      num_attention_heads=2)
    >>> LlamaDecodeStep(config, batch=2, cache_len=4, prompt=True).input_keys
    ['input']
    """


class LlamaKVDecoder(FamilyDecodeSteps[LlamaConfig]):
    """The decode steps of a Llama-style decoder compiled on one backend for one batch size and cache length
    (see :class:`~mithril_models.kv_cache.DecodeSteps`).

    Example:
        >>> decoder = LlamaKVDecoder(llama.config, backend, batch=1, cache_len=80)      # doctest: +SKIP
        >>> one_token = decoder.step(False)                                             # doctest: +SKIP
    """

    step_type = LlamaDecodeStep
