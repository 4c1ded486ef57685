"""The decoder adapters of :func:`~mithril_models.generate`: each turns a compiled model into the
:class:`~mithril_models.generation.search.Decoder` the searches use.

- :class:`CachedDecoder`: GPT-2 and Llama/Mistral (``create_gpt``, ``create_llama``, ``from_hf_config``)
  through KV-cache decode steps (:mod:`mithril_models.kv_cache`): the prompts, left padded to a multiple of
  the chunk size, go through one compiled prefill step of up to ``prefill_chunk`` tokens, then one token
  per call; beam search reorders the cache rows inside the step.
- :class:`Seq2SeqDecoder`: T5 (``t5_encode``/``t5_decode``): the encoder once, then the decoder step with
  self-attention and cross-attention caches (:mod:`mithril_models.t5.decode`).
- :class:`FullDecoder`: any other model with ``input`` (token ids) -> ``output`` (logits ``[B, T, vocab]``),
  re-run on the whole sequence for each token (no cache).

Compiled steps are kept per ``(compiled model, batch, cache length)`` until the compiled model is garbage
collected or :func:`clear_decode_cache` is called.

Example:
    >>> decoder = decoder_for("generate", pm, params, None, None, 64)            # doctest: +SKIP
    >>> logits = decoder.start(prompts, max_new_tokens=8, reorder=False)           # doctest: +SKIP
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from mithril.errors import ArgumentError

from ..family import find_family_models
from ..gpt.decode import KVDecoder
from ..gpt.model import GPT
from ..kv_cache import DecodeSteps, StepShape
from ..llama.decode import LlamaKVDecoder
from ..llama.model import Llama
from ..t5.decode import T5Steps
from ..t5.model import T5Decoder, T5Encoder
from .prompts import Prompts

__all__ = ["CachedDecoder", "FullDecoder", "Seq2SeqDecoder", "clear_decode_cache", "decoder_for", "limits"]

_STEPS: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], Any]] = weakref.WeakKeyDictionary()
"""Compiled model -> {(batch, cache_len): compiled decode steps}; entries go when the compiled model does."""

CACHE_ROUNDING = 16
"""Cache lengths are rounded up to a multiple of this, so prompts of nearby lengths share compiled steps."""


def clear_decode_cache() -> None:
    """Forget every compiled decode step (they are otherwise kept as long as their compiled model lives).

    >>> clear_decode_cache()
    """
    _STEPS.clear()


def _kept(pm: Any, batch: int, cache_len: int, make: Callable[[int, int], Any]) -> Any:
    """The decode steps of ``pm`` for ``(batch, cache_len)``, made once."""
    steps = _STEPS.setdefault(pm, {})
    found = steps.get((batch, cache_len))
    if found is None:
        found = steps[(batch, cache_len)] = make(batch, cache_len)
    return found


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _chunk(longest: int, limit: int) -> int:
    """The prefill chunk: the smallest power of two holding the prompt, at most ``limit``."""
    size = 1
    while size < longest and size < limit:
        size *= 2
    return min(size, limit)


class CachedDecoder:
    """GPT-2 or a Llama-style decoder through its KV-cache decode steps (see the module docstring).

    ``make(batch, cache_len)`` builds the :class:`~mithril_models.kv_cache.DecodeSteps` of the model;
    ``prefill_chunk``: the most prompt tokens one prefill call processes.
    """

    def __init__(
        self, pm: Any, params: Mapping[str, Any], make: Callable[[int, int], DecodeSteps], prefill_chunk: int
    ) -> None:
        self.pm, self.params, self.make, self.prefill_chunk = pm, params, make, prefill_chunk
        self.backend = pm.backend

    def start(self, prompts: Prompts, max_new_tokens: int, reorder: bool) -> np.ndarray:
        backend, batch = self.backend, prompts.batch
        chunk = _chunk(prompts.longest, self.prefill_chunk)
        width = _round_up(prompts.longest, chunk)  # left padding up to whole chunks: the last token ends one
        cache_len = _round_up(width + max(max_new_tokens - 1, 1), CACHE_ROUNDING)
        self.steps = steps = _kept(self.pm, batch, cache_len, self.make)
        ids, pads = prompts.left_padded(width)
        self.pads = backend.array(pads[:, None], "int")
        prefill = steps.compiled(StepShape(batch, cache_len, tokens=chunk, padded=True))
        params = steps.step_params(prefill, self.params, self.pm.input_paths)
        caches = steps.empty_caches()
        for first in range(0, width, chunk):
            data = {"input": backend.array(ids[:, first : first + chunk], "int"), "positions": steps.position(first)}
            outputs = prefill.evaluate(params, {**caches, **data, "pads": self.pads})
            caches = {past: outputs[present] for past, present in steps.caches}
        self.caches, self.slot = caches, width
        self.one = steps.compiled(StepShape(batch, cache_len, tokens=1, padded=True, reorder=reorder))
        self.one_params = steps.step_params(self.one, self.params, self.pm.input_paths)
        return np.asarray(backend.to_numpy(outputs["output"]))

    def advance(self, tokens: np.ndarray, parents: np.ndarray | None) -> np.ndarray:
        backend, steps = self.backend, self.steps
        data = {**self.caches, "input": backend.array(tokens[:, None], "int"), "positions": steps.position(self.slot)}
        data["pads"] = self.pads
        if parents is not None:
            data["beams"] = backend.array(parents, "int")
        outputs = self.one.evaluate(self.one_params, data)
        self.caches = {past: outputs[present] for past, present in steps.caches}
        self.slot += 1
        return np.asarray(backend.to_numpy(outputs["output"]))

    def history(self, prompts: Prompts) -> list[np.ndarray]:
        """The prompts: a decoder-only sequence starts with its prompt."""
        return prompts.rows


class FullDecoder:
    """Any model ``input`` -> ``output`` (logits ``[B, T, vocab]``), run on the whole sequence for each token.

    A model compiled with a static sequence length gets the sequence left-aligned in that window (fine for
    causal models, whose logits at a position ignore what follows); prompts must then all have one length.
    """

    def __init__(self, where: str, pm: Any, params: Mapping[str, Any]) -> None:
        self.where, self.pm, self.params = where, pm, params
        shape = pm.shapes.get("input") or [None, None]
        if len(shape) != 2:
            raise ArgumentError(f"{where}: pm's input must be token ids [batch, length], it has shape {shape}")
        self.batch, self.window = shape

    def start(self, prompts: Prompts, max_new_tokens: int, reorder: bool) -> np.ndarray:
        if len(set(prompts.lengths)) > 1:
            raise ArgumentError(
                f"{self.where}: prompts of different lengths {prompts.lengths} need a decoder with a KV cache "
                "(create_gpt, create_llama, from_hf_config); this model has no attention mask input"
            )
        if self.batch is not None and self.batch != prompts.batch:
            raise ArgumentError(
                f"{self.where}: pm was compiled for batch {self.batch}, prompt_ids has {prompts.batch} rows"
                + (" (num_beams rows per prompt)" if reorder else "")
            )
        length = prompts.longest
        self.sequence = np.zeros((prompts.batch, self.window or length + max_new_tokens), dtype=np.int64)
        self.sequence[:, :length] = np.stack(prompts.rows)
        self.filled = length
        return self._logits()

    def advance(self, tokens: np.ndarray, parents: np.ndarray | None) -> np.ndarray:
        if parents is not None:
            self.sequence = self.sequence[parents]
        self.sequence[:, self.filled] = tokens
        self.filled += 1
        return self._logits()

    def _logits(self) -> np.ndarray:
        ids = self.sequence if self.window is not None else self.sequence[:, : self.filled]
        backend = self.pm.backend
        logits = self.pm.evaluate(self.params, {"input": backend.array(ids, "int")})["output"]
        return np.asarray(backend.to_numpy(logits))[:, self.filled - 1]

    def history(self, prompts: Prompts) -> list[np.ndarray]:
        """The prompts: a decoder-only sequence starts with its prompt."""
        return prompts.rows


class Seq2SeqDecoder:
    """A T5 encoder-decoder: the encoder runs once on the prompts, the decoder one token per call from
    ``decoder_start_token_id`` with self-attention and cross-attention caches (see
    :class:`~mithril_models.t5.decode.T5Steps`)."""

    def __init__(
        self,
        pm: Any,
        params: Mapping[str, Any],
        encoder: Any,
        encoder_params: Mapping[str, Any],
        start_token: int,
    ) -> None:
        self.pm, self.params, self.encoder, self.encoder_params = pm, params, encoder, encoder_params
        self.start_token = start_token

    def start(self, prompts: Prompts, max_new_tokens: int, reorder: bool) -> np.ndarray:
        settings = self.pm.model.settings
        cache_len = _round_up(max(max_new_tokens, 1), CACHE_ROUNDING)
        width = _round_up(prompts.longest, CACHE_ROUNDING)
        make = lambda batch, length: T5Steps(settings, self.pm.backend, batch, length)  # noqa: E731
        self.steps = steps = _kept(self.pm, prompts.batch, cache_len, make)
        ids, pads = prompts.left_padded(width)
        self.state = steps.encode(ids, pads, self.encoder, self.encoder_params, self.params, self.pm.input_paths)
        tokens = np.full(prompts.batch, self.start_token, dtype=np.int64)
        return self.advance(tokens, None, reorder=reorder)

    def advance(self, tokens: np.ndarray, parents: np.ndarray | None, reorder: bool | None = None) -> np.ndarray:
        logits: np.ndarray = self.steps.decode(self.state, tokens, parents, reorder)
        return logits

    def history(self, prompts: Prompts) -> list[np.ndarray]:
        """The decoder's start token: the decoder's sequence is what the repetition penalty sees."""
        return [np.array([self.start_token]) for _ in prompts.rows]


def limits(pm: Any) -> tuple[int | None, int | None]:
    """``(positions, vocab_size)`` of the decoder ``pm`` runs (``block_size``/``max_position_embeddings``;
    ``None`` where unknown, e.g. T5's relative positions)."""
    model = getattr(pm, "model", None)
    found = [m for _, m in find_family_models(model)] if model is not None else []
    inner = found[0] if len(found) == 1 else None
    if isinstance(inner, GPT):
        return inner.config.block_size, inner.config.vocab_size
    if isinstance(inner, Llama):
        return inner.config.max_position_embeddings, inner.config.vocab_size
    if isinstance(inner, T5Decoder):
        return None, inner.settings.vocab_size
    return None, None


def decoder_for(
    where: str,
    pm: Any,
    params: Mapping[str, Any],
    encoder: Any,
    encoder_params: Mapping[str, Any] | None,
    prefill_chunk: int,
    start_token: int | None = None,
) -> Any:
    """The decoder adapter for the compiled model ``pm`` (see the module docstring)."""
    model = getattr(pm, "model", None)
    if isinstance(model, GPT):
        gpt = model.config
        return CachedDecoder(pm, params, lambda b, n: KVDecoder(gpt, pm.backend, b, n), prefill_chunk)
    if isinstance(model, Llama):
        llama = model.config
        return CachedDecoder(pm, params, lambda b, n: LlamaKVDecoder(llama, pm.backend, b, n), prefill_chunk)
    if isinstance(model, T5Decoder):
        if not isinstance(getattr(encoder, "model", None), T5Encoder) or encoder_params is None:
            raise ArgumentError(
                f"{where}: a T5 decoder needs its encoder: pass encoder= (the compiled t5_encode model) and "
                f"encoder_params= (its parameters), got encoder={type(encoder).__name__}"
            )
        return Seq2SeqDecoder(pm, params, encoder, encoder_params, 0 if start_token is None else start_token)
    if "input" not in getattr(pm, "data_keys", ()) or "output" not in getattr(pm, "output_keys", ()):
        raise ArgumentError(
            f"{where}: pm must be a compiled GPT, Llama or T5 decoder (create_gpt, create_llama, t5_decode) or a "
            f"model compiled with data key 'input' (token ids) and output 'output' (logits), got data keys "
            f"{getattr(pm, 'data_keys', None)}, outputs {getattr(pm, 'output_keys', None)}"
        )
    return FullDecoder(where, pm, params)
