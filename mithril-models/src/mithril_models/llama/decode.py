"""KV-cache decoding of Llama-style decoders: the decode steps (:class:`LlamaDecodeStep`) and their compiled
runner (:class:`LlamaKVDecoder`), the same protocol as GPT-2's (:mod:`mithril_models.gpt.decode`).

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

from typing import Any

import mithril as ml
from mithril.extend import validation

from ..checkpoints.layout import Layout
from ..family import FamilyModel
from ..gpt.decode import KVDecoder
from ..gpt.layers import StepShape, cache_names
from .checkpoint import hf_layout
from .config import LlamaConfig
from .layers import build_llama

__all__ = ["LlamaDecodeStep", "LlamaKVDecoder"]


class LlamaDecodeStep(FamilyModel):
    """A decode step of a Llama-style decoder for ``batch`` sequences with caches of ``cache_len`` slots:
    the prompt step (``prompt=True``: ``input [batch, T]`` -> ``output`` and ``present_*``) or the one-token
    step (``input [batch, 1]``, ``positions [1]``, ``past_*`` -> ``output`` and ``present_*``).

    >>> from mithril_models.llama.config import LlamaConfig
    >>> config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                      num_attention_heads=2)
    >>> LlamaDecodeStep(config, batch=2, cache_len=4, prompt=True).input_keys
    ['input']
    """

    family = "llama"
    config: LlamaConfig

    def __init__(
        self, config: LlamaConfig, batch: int, cache_len: int, *, prompt: bool = False, name: str | None = None
    ) -> None:
        if not isinstance(config, LlamaConfig):
            raise validation.fail("LlamaDecodeStep", "config", "a LlamaConfig", config)
        batch = validation.positive_int("LlamaDecodeStep", "batch", batch)
        cache_len = validation.positive_int("LlamaDecodeStep", "cache_len", cache_len)
        super().__init__(config, name=name)
        self.shape = StepShape(batch, cache_len, bool(prompt))
        build_llama(self, config, self.shape)

    def checkpoint_layouts(self) -> list[Layout]:
        return [hf_layout(self.config)]


class LlamaKVDecoder(KVDecoder):
    """The two decode steps of a Llama-style decoder compiled on one backend for one batch size and cache
    length (see :class:`~mithril_models.gpt.decode.KVDecoder`, whose ``run`` it shares).

    Example:
        >>> decoder = LlamaKVDecoder(llama.config, backend, batch=1, cache_len=80)                 # doctest: +SKIP
        >>> tokens = decoder.run(params, pm.input_paths, prompt, 64, lambda logits: logits.argmax(-1))  # doctest: +SKIP
    """

    config: LlamaConfig  # type: ignore[assignment]

    def __init__(self, config: LlamaConfig, backend: Any, batch: int, cache_len: int) -> None:
        self.config = config
        self.backend = backend
        self.batch = batch
        self.cache_len = cache_len
        self.static = backend.codegen != "python"
        self.caches = cache_names(config.num_hidden_layers)
        self._models: dict[bool, LlamaDecodeStep] = {}  # type: ignore[assignment]
        self._steps: dict[tuple[bool, int | None], Any] = {}
        self._positions: list[Any] = []

    def step(self, prompt: bool, length: int = 1) -> Any:
        """The compiled prompt step for ``length`` tokens (``prompt=True``) or the one-token step."""
        key = (prompt, length if prompt and self.static else None)
        compiled = self._steps.get(key)
        if compiled is None:
            model = self._models.get(prompt)
            if model is None:
                model = self._models[prompt] = LlamaDecodeStep(self.config, self.batch, self.cache_len, prompt=prompt)
            cache = [self.batch, self.config.num_key_value_heads, self.cache_len, self.config.head_dim]
            names = [present for _, present in self.caches] if prompt else [n for pair in self.caches for n in pair]
            shapes: dict[str, Any] = dict.fromkeys(names, cache)
            shapes["input"] = [self.batch, key[1] if prompt else 1]
            data = {"input"} if prompt else {"input", "positions", *(past for past, _ in self.caches)}
            compiled = ml.compile(model, self.backend, shapes=shapes, data_keys=data, inference=True)
            self._steps[key] = compiled
        return compiled
