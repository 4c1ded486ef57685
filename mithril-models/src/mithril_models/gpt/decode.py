"""KV-cache decoding of GPT-2: the decode steps (:class:`GPTDecodeStep`) and their compiled runner
(:class:`KVDecoder`).

A step is GPT-2 built from the same blocks and child names as :class:`~mithril_models.gpt.GPT` (so its
parameters have the same logical paths), with the keys and values of every layer kept in caches of
static shape ``[batch, heads, cache_len, head_dim]`` that are model inputs and outputs:

- the prompt step: ``input [batch, T]`` (positions ``0 .. T-1``) -> ``output`` (logits of the last
  position, ``[batch, vocab]``) and ``present_key_<i>``/``present_value_<i>``;
- the one-token step: ``input [batch, 1]``, ``positions [1]``, ``past_key_<i>``/``past_value_<i>`` ->
  ``output`` and the caches with the token's slot written.

Cache writes and the attention mask come from comparing ``arange(cache_len)`` with the positions (see
:mod:`mithril_models.gpt.layers`).

Example:
    >>> from mithril_models.gpt.config import GPTConfig
    >>> config = GPTConfig(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)
    >>> sorted(GPTDecodeStep(config, batch=1, cache_len=8).input_keys)[:4]
    ['input', 'past_key_0', 'past_value_0', 'positions']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import mithril as ml
import numpy as np
from mithril.errors import ArgumentError, ModelKeyError
from mithril.extend import validation

from ..checkpoints.layout import Layout
from ..family import FamilyModel
from .checkpoint import hf_layout
from .config import GPTConfig
from .layers import StepShape, build_gpt, cache_names

__all__ = ["GPTDecodeStep", "KVDecoder"]


class GPTDecodeStep(FamilyModel):
    """A decode step of GPT-2 for ``batch`` sequences with caches of ``cache_len`` slots: the prompt step
    (``prompt=True``) or the one-token step (see the module docstring).

    >>> from mithril_models.gpt.config import GPTConfig
    >>> config = GPTConfig(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)
    >>> GPTDecodeStep(config, batch=2, cache_len=4, prompt=True).input_keys
    ['input']
    """

    family = "gpt2"
    config: GPTConfig

    def __init__(
        self, config: GPTConfig, batch: int, cache_len: int, *, prompt: bool = False, name: str | None = None
    ) -> None:
        if not isinstance(config, GPTConfig):
            raise validation.fail("GPTDecodeStep", "config", "a GPTConfig", config)
        batch = validation.positive_int("GPTDecodeStep", "batch", batch)
        if not validation.is_int(cache_len) or not 1 <= cache_len <= config.block_size:
            accepted = f"an int in 1..block_size={config.block_size}"
            raise validation.fail("GPTDecodeStep", "cache_len", accepted, cache_len)
        cache_len = int(cache_len)
        super().__init__(config, name=name)
        self.shape = StepShape(batch, cache_len, bool(prompt))
        build_gpt(self, config, self.shape)

    def checkpoint_layouts(self) -> list[Layout]:
        return [hf_layout(self.config)]


class KVDecoder:
    """The two decode steps of GPT-2 compiled on one backend for one batch size and cache length.

    On Python backends each step is compiled once (the prompt step with a symbolic length); backends
    that need static shapes (C, GGML) compile the prompt step once per prompt length. Parameters of the
    model the steps serve are matched to the steps' names through their logical paths (``input_paths``),
    whichever naming mode compiled them.

    Example:
        >>> decoder = KVDecoder(gpt.config, backend, batch=1, cache_len=80)                      # doctest: +SKIP
        >>> tokens = decoder.run(params, pm.input_paths, prompt, 64, lambda logits: logits.argmax(-1))  # doctest: +SKIP
    """

    def __init__(self, config: GPTConfig, backend: Any, batch: int, cache_len: int) -> None:
        self.config = config
        self.backend = backend
        self.batch = batch
        self.cache_len = cache_len
        self.static = backend.codegen != "python"
        self.caches = cache_names(config.num_layers)
        self._models: dict[bool, GPTDecodeStep] = {}
        self._steps: dict[tuple[bool, int | None], Any] = {}
        self._positions: list[Any] = []  # [p] as backend int arrays, made once

    def step(self, prompt: bool, length: int = 1) -> Any:
        """The compiled prompt step for ``length`` tokens (``prompt=True``) or the one-token step."""
        key = (prompt, length if prompt and self.static else None)
        compiled = self._steps.get(key)
        if compiled is None:
            model = self._models.get(prompt)
            if model is None:
                model = self._models[prompt] = GPTDecodeStep(self.config, self.batch, self.cache_len, prompt=prompt)
            cache = [self.batch, self.config.num_heads, self.cache_len, self.config.head_dim]
            names = [present for _, present in self.caches] if prompt else [n for pair in self.caches for n in pair]
            shapes: dict[str, Any] = dict.fromkeys(names, cache)
            shapes["input"] = [self.batch, key[1] if prompt else 1]
            data = {"input"} if prompt else {"input", "positions", *(past for past, _ in self.caches)}
            compiled = ml.compile(model, self.backend, shapes=shapes, data_keys=data, inference=True)
            self._steps[key] = compiled
        return compiled

    def position(self, index: int) -> Any:
        """``[index]`` as a backend int array (created once per slot, so no per-step conversion)."""
        if not self._positions:
            self._positions = [self.backend.array(np.array([p]), "int") for p in range(self.cache_len)]
        return self._positions[index]

    @staticmethod
    def step_params(compiled: Any, params: Mapping[str, Any], paths: Mapping[str, str]) -> dict[str, Any]:
        """``params`` (named as in the model ``paths`` comes from) renamed for the step ``compiled``."""
        by_path = {path: name for name, path in paths.items()}
        result = {}
        for name in compiled.param_keys:
            path = compiled.input_paths[name]
            source = by_path.get(path)
            if source is None or source not in params:
                raise ModelKeyError(
                    f"generate: params has no value for {path!r} (expected the parameters of the compiled GPT)"
                )
            result[name] = params[source]
        return result

    def run(
        self,
        params: Mapping[str, Any],
        paths: Mapping[str, str],
        prompt: np.ndarray,
        max_new_tokens: int,
        choose: Callable[[np.ndarray], np.ndarray],
    ) -> np.ndarray:
        """``max_new_tokens`` tokens after ``prompt [batch, P]``: the prompt in one call, then one token per
        call; ``choose`` picks the next tokens ``[batch]`` from the logits ``[batch, vocab]`` (NumPy)."""
        backend = self.backend
        batch, length = prompt.shape
        if batch != self.batch or length + max_new_tokens - 1 > self.cache_len:
            raise ArgumentError(
                f"KVDecoder for batch {self.batch} and {self.cache_len} cache slots cannot continue a prompt of "
                f"shape {prompt.shape} by {max_new_tokens} tokens"
            )
        tokens = np.empty((batch, max_new_tokens), dtype=np.int64)
        first = self.step(True, length)
        outputs = first.evaluate(self.step_params(first, params, paths), {"input": backend.array(prompt, "int")})
        if max_new_tokens:
            tokens[:, 0] = choose(backend.to_numpy(outputs["output"]))
        if max_new_tokens > 1:
            step = self.step(False)
            step_params = self.step_params(step, params, paths)
            for i in range(1, max_new_tokens):
                data = {past: outputs[present] for past, present in self.caches}
                data["input"] = backend.array(tokens[:, i - 1 : i], "int")
                data["positions"] = self.position(length + i - 1)
                outputs = step.evaluate(step_params, data)
                tokens[:, i] = choose(backend.to_numpy(outputs["output"]))
        return tokens
