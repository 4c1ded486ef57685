"""KV-cache decoding of GPT-2: the decode steps (:class:`GPTDecodeStep`) and their compiled runner
(:class:`KVDecoder`), both thin over the shared decoder-with-KV-cache piece :mod:`mithril_models.kv_cache`.

A step is GPT-2 built from the same blocks and child names as :class:`~mithril_models.gpt.GPT` (so its
parameters have the same logical paths), with the keys and values of every layer kept in caches of
static shape ``[batch, heads, cache_len, head_dim]`` that are model inputs and outputs:

- the prompt step: ``input [batch, T]`` (positions ``0 .. T-1``) -> ``output`` (logits of the last
  position, ``[batch, vocab]``) and ``present_key_<i>``/``present_value_<i>``;
- the one-token step: ``input [batch, 1]``, ``positions [1]``, ``past_key_<i>``/``past_value_<i>`` ->
  ``output`` and the caches with the token's slot written;
- chunk steps (``tokens=T``, optionally ``padded``/``reorder``): what :func:`mithril_models.generate` runs
  (see :mod:`mithril_models.kv_cache`).

Example:
    >>> from mithril_models.gpt.config import GPTConfig
    >>> config = GPTConfig(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)
    >>> sorted(GPTDecodeStep(config, batch=1, cache_len=8).input_keys)[:4]
    ['input', 'past_key_0', 'past_value_0', 'positions']
"""

from __future__ import annotations

from ..kv_cache import DecodeStepModel, FamilyDecodeSteps
from .config import GPTConfig
from .model import GPT

__all__ = ["GPTDecodeStep", "KVDecoder"]


class GPTDecodeStep(DecodeStepModel[GPTConfig], model=GPT):
    """A decode step of GPT-2 for ``batch`` sequences with caches of ``cache_len`` slots: the prompt step
    (``prompt=True``), the one-token step, or a chunk step of ``tokens`` tokens with ``padded``/``reorder``
    inputs (see :class:`~mithril_models.kv_cache.StepShape`).

    >>> from mithril_models.gpt.config import GPTConfig
    >>> config = GPTConfig(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)
    >>> GPTDecodeStep(config, batch=2, cache_len=4, prompt=True).input_keys
    ['input']
    """


class KVDecoder(FamilyDecodeSteps[GPTConfig]):
    """The decode steps of GPT-2 compiled on one backend for one batch size and cache length (see
    :class:`~mithril_models.kv_cache.DecodeSteps`).

    Example:
        >>> decoder = KVDecoder(gpt.config, backend, batch=1, cache_len=80)      # doctest: +SKIP
        >>> one_token = decoder.step(False)                                       # doctest: +SKIP
    """

    step_type = GPTDecodeStep
