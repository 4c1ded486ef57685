"""Text generation with compiled decoders, one implementation for every decoder and backend:
:func:`generate` (greedy by default, sampling, top-k/top-p, repetition penalty, beam search, end-of-sequence
stopping, batches of prompts of different lengths, streaming), :class:`GenerationConfig` (its options, named
as ``transformers``') and :func:`clear_decode_cache`.

- :mod:`.config`: the options and their checks; :mod:`.prompts`: the prompts and their padding;
- :mod:`.logits`: the processors of the next token's scores (``transformers``' order), sampling;
- :mod:`.search`: greedy/sampling and beam search over any decoder;
- :mod:`.decoders`: the decoder adapters (GPT-2 and Llama/Mistral through KV-cache steps with chunked
  prefill, T5 through encoder + cached decoder steps, any other ``input -> output`` model without cache).

Example:
    >>> import mithril as ml
    >>> from mithril_models import create_gpt, generate
    >>> gpt = create_gpt(bias=True, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=50)
    >>> pm = ml.compile(gpt, ml.NumpyBackend(), data_keys={"input"})
    >>> generate(pm, pm.randomize_params(0), [[1, 2, 3], [4]], 4).shape
    (2, 4)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from mithril.errors import ArgumentError
from mithril.extend import validation

from .config import GenerationConfig, resolve_config
from .decoders import clear_decode_cache, decoder_for, limits
from .prompts import Prompts, parse_prompts
from .search import beam_search, sample_or_greedy

__all__ = ["GenerationConfig", "clear_decode_cache", "generate", "run_generation"]

PREFILL_CHUNK = 64
"""Default for ``prefill_chunk``: the most prompt tokens one compiled prefill call processes."""


def _check_fit(where: str, prompts: Prompts, config: GenerationConfig, positions: int | None) -> None:
    """The prompt and the new tokens must fit the decoder's positions (``block_size``)."""
    if positions is None:
        return
    length = prompts.longest
    if length > positions:
        raise ArgumentError(f"{where}: prompt_ids: the prompt has {length} tokens, more than block_size={positions}")
    new = config.max_new_tokens
    if new and length + new - 1 > positions:
        raise ArgumentError(
            f"{where}: a prompt of {length} tokens plus max_new_tokens={new} needs {length + new - 1} positions, "
            f"more than block_size={positions}; ask for at most {positions - length + 1} new tokens"
        )


def run_generation(
    where: str,
    pm: Any,
    params: Mapping[str, Any],
    prompts: Prompts,
    config: GenerationConfig,
    *,
    on_token: Callable[[np.ndarray], object] | None = None,
    encoder: Any = None,
    encoder_params: Mapping[str, Any] | None = None,
    prefill_chunk: int = PREFILL_CHUNK,
) -> np.ndarray:
    """:func:`generate` after its arguments were read: the new tokens ``[batch, n]`` (int64)."""
    if on_token is not None and not callable(on_token):
        raise validation.fail(where, "on_token", "None or a callable taking the new tokens [batch]", on_token)
    if on_token is not None and config.num_beams > 1:
        raise ArgumentError(f"{where}: on_token streams one token per step; it cannot be used with num_beams > 1")
    prefill_chunk = validation.positive_int(where, "prefill_chunk", prefill_chunk)
    positions, vocab = limits(pm)
    prompts.check_vocabulary(where, vocab)
    _check_fit(where, prompts, config, positions)
    decoder = decoder_for(where, pm, params, encoder, encoder_params, prefill_chunk, config.decoder_start_token_id)
    if config.num_beams > 1:
        return beam_search(decoder, prompts, config)
    return sample_or_greedy(decoder, prompts, config, on_token)


def generate(
    pm: Any,
    params: Mapping[str, Any],
    prompt_ids: Any,
    max_new_tokens: int | None = None,
    *,
    generation_config: Any = None,
    attention_mask: Any = None,
    do_sample: bool | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    seed: int | None = None,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    early_stopping: bool | str | None = None,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    min_new_tokens: int | None = None,
    decoder_start_token_id: int | None = None,
    on_token: Callable[[np.ndarray], object] | None = None,
    encoder: Any = None,
    encoder_params: Mapping[str, Any] | None = None,
    prefill_chunk: int = PREFILL_CHUNK,
) -> np.ndarray:
    """Continue ``prompt_ids``; returns only the new ids, ``[batch, n]`` (int64).

    Greedy decoding by default, as ``transformers`` (before this version the default sampled: pass
    ``do_sample=True`` for that). Options are ``transformers``' ``GenerationConfig`` names, given as keyword
    arguments or in ``generation_config`` (a :class:`GenerationConfig`, a ``transformers.GenerationConfig``
    or a dict; keyword arguments win).

    Args:
        pm: a compiled decoder: GPT-2 (``create_gpt``), Llama/Mistral (``create_llama``, ``from_hf_config``)
            or a T5 decoder (``t5_decode``, with ``encoder``/``encoder_params``), on any backend; any other
            model with ``input`` (token ids ``[B, T]``) -> ``output`` (logits ``[B, T, vocab]``) runs
            without a cache. Decode steps are compiled on ``pm.backend`` once per ``(pm, batch, cache
            length)`` and kept while ``pm`` lives.
        params: ``pm``'s parameters (``pm.randomize_params()``, ``load_hf(pm, ...)``).
        prompt_ids: a list of ids (one prompt), a list of lists (any lengths: they are left padded and
            masked, so each row gives the tokens it gives alone) or an int array ``[B, P]``.
        max_new_tokens: the most tokens to add (default 20); fewer columns come back when every row
            stopped at an end-of-sequence id.
        attention_mask: with an array ``prompt_ids``, ``1`` for tokens and ``0`` for padding (either side).
        do_sample, temperature, top_k, top_p, repetition_penalty, seed, num_beams, length_penalty,
            early_stopping, eos_token_id, pad_token_id, min_new_tokens, decoder_start_token_id: see
            :class:`GenerationConfig`.
        on_token: called with each new column ``[B]`` as soon as it is chosen (streaming; not with beams).
        encoder, encoder_params: for a T5 decoder, the compiled ``t5_encode`` model and its parameters.
        prefill_chunk: the most prompt tokens one compiled prefill call processes (prompts are left padded
            to whole chunks of ``min(prefill_chunk, a power of two)`` tokens).

    Returns:
        The new token ids, a NumPy int64 array ``[B, n]``; after a row's end-of-sequence id its columns
        hold ``pad_token_id`` (as ``transformers``).

    Raises:
        ArgumentError: an argument that is not accepted (the message names it, what is accepted and what
            was given), or a prompt that does not fit ``block_size``.
        IndexRangeError: a token id outside ``0 .. vocab_size - 1``.

    >>> generate(pm, params, [[464, 3290], [40]], 8, num_beams=4, eos_token_id=50256)     # doctest: +SKIP
    """
    where = "generate"
    if not (hasattr(pm, "evaluate") and hasattr(pm, "backend")):
        raise validation.fail(where, "pm", "a compiled model (ml.compile(create_gpt(...), backend))", pm)
    what = "a dict of parameter name -> array (pm.randomize_params(), load_hf(pm, ...))"
    validation.mapping(where, "params", params, optional=False, what=what)
    options = dict(
        max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
        repetition_penalty=repetition_penalty, seed=seed, num_beams=num_beams, length_penalty=length_penalty,
        early_stopping=early_stopping, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
        min_new_tokens=min_new_tokens, decoder_start_token_id=decoder_start_token_id,
    )  # fmt: skip
    config = resolve_config(where, generation_config, options)
    prompts = parse_prompts(where, prompt_ids, attention_mask)
    return run_generation(
        where, pm, params, prompts, config, on_token=on_token, encoder=encoder, encoder_params=encoder_params,
        prefill_chunk=prefill_chunk,
    )  # fmt: skip
