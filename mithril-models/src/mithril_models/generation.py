"""Text generation with a compiled GPT-2 or Llama-style decoder: :func:`generate` (greedy or seeded top-k
sampling).

For a model built by :func:`~mithril_models.gpt.create_gpt`, :func:`~mithril_models.llama.create_llama`
(or ``from_hf_config``), generation runs KV-cache decode steps (a prompt step, then a one-token step;
:class:`~mithril_models.gpt.decode.KVDecoder`) compiled once on the model's backend and kept per
``(compiled model, batch, cache length)`` until the compiled model is garbage collected or
:func:`clear_decode_cache` is called. Tokens are chosen on the host from the logits of the last position
with NumPy's generator, so a seed gives the same tokens on every backend.

Every argument is checked before anything runs: a bad one is an :class:`~mithril.errors.ArgumentError`
naming it, what is accepted and what was given, and a token id outside the vocabulary an
:class:`~mithril.errors.IndexRangeError` naming the id and its position.

Example:
    >>> import mithril as ml
    >>> from mithril_models import create_gpt, generate
    >>> gpt = create_gpt(bias=True, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=50)
    >>> pm = ml.compile(gpt, ml.NumpyBackend(), data_keys={"input"})
    >>> generate(pm, pm.randomize_params(0), [[1, 2, 3]], 4, top_k=1).shape
    (1, 4)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from mithril.errors import ArgumentError, IndexRangeError
from mithril.extend import validation

__all__ = ["clear_decode_cache", "generate"]

_DECODERS: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], Any]] = weakref.WeakKeyDictionary()
"""Compiled model -> {(batch, cache_len): KVDecoder}; entries go when the compiled model does."""


def clear_decode_cache() -> None:
    """Forget every compiled decode step (they are otherwise kept as long as their compiled model lives).

    >>> clear_decode_cache()
    """
    _DECODERS.clear()


def _prompt_array(prompt_ids: Any) -> np.ndarray:
    """``prompt_ids`` (a list, list of lists or array) as an int64 array ``[B, P]``."""
    try:
        array = np.asarray(prompt_ids)
    except ValueError as exc:  # ragged lists
        raise ArgumentError(f"generate: prompt_ids must be rectangular (every prompt the same length): {exc}") from None
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise ArgumentError(
            f"generate: prompt_ids must be a list of ids or a [batch, length] array, got shape {array.shape}"
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ArgumentError(f"generate: prompt_ids must hold at least one token per prompt, got shape {array.shape}")
    if array.dtype.kind not in "iu":
        if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
            array = array.astype(np.int64)
        else:
            raise ArgumentError(f"generate: prompt_ids must be integer token ids, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def _chooser(temperature: float, top_k: int | None, seed: int | None) -> Callable[[np.ndarray], np.ndarray]:
    """The next tokens ``[B]`` from logits ``[B, vocab]``: argmax for ``top_k=1``, otherwise a draw from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest logits (ties at the k-th kept).

    The largest logit is subtracted before dividing by the temperature, so the scores are ``<= 0`` with the
    largest ``0``: ``exp`` never overflows, and a tiny temperature sends every other score to ``-inf``
    (weight 0), which is greedy decoding rather than NaN."""
    if top_k == 1:
        return lambda logits: np.argmax(logits, axis=-1)
    rng = np.random.default_rng(seed)

    def sample(logits: np.ndarray) -> np.ndarray:
        scores = np.asarray(logits, dtype=np.float64)
        scores = scores - scores.max(axis=-1, keepdims=True)
        if top_k is not None and top_k < scores.shape[-1]:
            kth = np.partition(scores, -top_k, axis=-1)[:, -top_k, None]
            scores = np.where(scores < kth, -np.inf, scores)
        with np.errstate(over="ignore"):  # -1 / 5e-324 is -inf: a weight of 0, as it should be
            cumulative = np.cumsum(np.exp(scores / temperature), axis=-1)
        draws = rng.random((scores.shape[0], 1)) * cumulative[:, -1:]
        return np.minimum((cumulative <= draws).sum(axis=-1), scores.shape[-1] - 1)

    return sample


def _check_options(pm: Any, params: Any, max_new_tokens: Any, temperature: Any, top_k: Any, seed: Any) -> None:
    """Every argument of :func:`generate` but the prompt (checked by :func:`_prompt_array`)."""
    if not (hasattr(pm, "evaluate") and hasattr(pm, "backend")):
        raise validation.fail("generate", "pm", "a compiled model (ml.compile(create_gpt(...), backend))", pm)
    what = "a dict of parameter name -> array (pm.randomize_params(), load_hf(pm, ...))"
    validation.mapping("generate", "params", params, optional=False, what=what)
    if not validation.is_int(max_new_tokens) or max_new_tokens < 0:
        raise validation.fail("generate", "max_new_tokens", "an int >= 0", max_new_tokens)
    if top_k is not None and (not validation.is_int(top_k) or top_k < 1):
        raise validation.fail("generate", "top_k", "None (the full distribution) or an int >= 1", top_k)
    accepted = "a number > 0 (finite; top_k=1 for greedy decoding)"
    validation.positive_finite("generate", "temperature", temperature, accepted=accepted)
    if seed is not None and (not validation.is_int(seed) or seed < 0):
        raise validation.fail("generate", "seed", "None or an int >= 0", seed)


def generate(
    pm: Any,
    params: Mapping[str, Any],
    prompt_ids: Any,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
) -> np.ndarray:
    """Continue ``prompt_ids`` by ``max_new_tokens`` tokens; returns only the new ids (``[B, max_new_tokens]``).

    Args:
        pm: a compiled model. For a GPT or Llama built by ``create_gpt``/``create_llama``/``from_hf_config``
            (on any backend, any shapes it was compiled with), KV-cache decode steps are compiled on
            ``pm.backend`` once per ``(pm, batch, cache length)`` (static-shape backends: the prompt step
            once per prompt length) and reused: the prompt is processed in one call, then one token per
            call. Any other model with ``input`` (token ids ``[B, T]``) -> ``output`` (logits
            ``[B, T, vocab]``) is run on the whole growing sequence instead (slower: no cache); when it was
            compiled with a static sequence length, the sequence is left-aligned in that window (fine for
            causal models, whose logits at a position ignore what follows).
        params: ``pm``'s parameters (``pm.randomize_params()``, ``load_hf(pm, ...)``).
        prompt_ids: token ids: a list (one prompt), a list of equal-length lists or an int array ``[B, P]``.
        max_new_tokens: how many tokens to add; ``P + max_new_tokens - 1`` may not exceed ``block_size``
            (a Llama's ``max_position_embeddings``).
        temperature: logits are divided by it before sampling (> 0).
        top_k: sample among the ``top_k`` most likely tokens; ``1`` is greedy (argmax), ``None`` the full
            distribution.
        seed: seeds NumPy's generator for the draws (the same seed gives the same tokens on every backend).

    Returns:
        The new token ids, a NumPy int64 array ``[B, max_new_tokens]``.

    Raises:
        ArgumentError: an argument that is not accepted (the message names it, what is accepted and what
            was given), or a prompt that does not fit ``block_size``.
        IndexRangeError: a token id outside ``0 .. vocab_size - 1``.

    >>> generate(pm, params, [[464, 3290], [40, 1101]], 8, top_k=40, seed=0).shape     # doctest: +SKIP
    (2, 8)
    """
    _check_options(pm, params, max_new_tokens, temperature, top_k, seed)
    prompt = _prompt_array(prompt_ids)
    max_new_tokens = int(max_new_tokens)
    choose = _chooser(float(temperature), None if top_k is None else int(top_k), None if seed is None else int(seed))
    cached = _cached_decoding(getattr(pm, "model", None))
    if cached is not None:
        return _generate_cached(pm, cached, params, prompt, max_new_tokens, choose)
    return _generate_full(pm, params, prompt, max_new_tokens, choose)


def _cached_decoding(model: Any) -> tuple[Callable[[Any, int, int], Any], int, int] | None:
    """``(make_decoder(backend, batch, cache_len), block_size, vocab_size)`` for a decoder with KV-cache steps
    (GPT-2: :class:`~mithril_models.gpt.decode.KVDecoder`; Llama-style: the same protocol with
    ``max_position_embeddings`` as its block size), ``None`` for any other model."""
    from .gpt.decode import KVDecoder
    from .gpt.model import GPT

    if isinstance(model, GPT):
        gpt = model.config
        return (lambda backend, batch, length: KVDecoder(gpt, backend, batch, length)), gpt.block_size, gpt.vocab_size
    if getattr(model, "family", None) == "llama":
        from .llama.decode import LlamaKVDecoder
        from .llama.model import Llama

        if isinstance(model, Llama):
            llama = model.config
            make = lambda backend, batch, length: LlamaKVDecoder(llama, backend, batch, length)  # noqa: E731
            return make, llama.max_position_embeddings, llama.vocab_size
    return None


def _check_prompt(prompt: np.ndarray, max_new_tokens: int, block_size: int | None, vocab_size: int | None) -> None:
    length = prompt.shape[1]
    low, high = int(prompt.min()), int(prompt.max())
    if vocab_size is not None and (low < 0 or high >= vocab_size):
        bad = low if low < 0 else high
        position = tuple(int(i) for i in np.argwhere(prompt == bad)[0])
        raise IndexRangeError(
            f"generate: prompt_ids holds token id {bad} at position {position}, out of range for "
            f"vocab_size={vocab_size} (ids 0..{vocab_size - 1})"
        )
    if block_size is not None:
        if length > block_size:
            raise ArgumentError(
                f"generate: prompt_ids: the prompt has {length} tokens, more than block_size={block_size}"
            )
        if length + max_new_tokens - 1 > block_size:
            raise ArgumentError(
                f"generate: a prompt of {length} tokens plus max_new_tokens={max_new_tokens} needs "
                f"{length + max_new_tokens - 1} positions, more than block_size={block_size}; "
                f"ask for at most {block_size - length + 1} new tokens"
            )


def _generate_cached(
    pm: Any,
    cached: tuple[Any, int, int],
    params: Mapping[str, Any],
    prompt: np.ndarray,
    max_new_tokens: int,
    choose: Any,
) -> np.ndarray:
    make_decoder, block_size, vocab_size = cached
    _check_prompt(prompt, max_new_tokens, block_size, vocab_size)
    batch, length = prompt.shape
    if max_new_tokens == 0:
        return np.zeros((batch, 0), dtype=np.int64)
    cache_len = min(block_size, length + max_new_tokens)
    decoders = _DECODERS.setdefault(pm, {})
    decoder = decoders.get((batch, cache_len))
    if decoder is None:
        decoder = decoders[(batch, cache_len)] = make_decoder(pm.backend, batch, cache_len)
    return decoder.run(params, pm.input_paths, prompt, max_new_tokens, choose)


def _nested_gpt_sizes(pm: Any) -> tuple[int | None, int | None]:
    """``(block_size, vocab_size)`` of the one GPT inside ``pm.model``, if there is exactly one."""
    from .family import find_family_models

    model = getattr(pm, "model", None)
    found = [m for _, m in find_family_models(model)] if model is not None else []
    cached = _cached_decoding(found[0]) if len(found) == 1 else None
    return (cached[1], cached[2]) if cached is not None else (None, None)


def _generate_full(
    pm: Any, params: Mapping[str, Any], prompt: np.ndarray, max_new_tokens: int, choose: Any
) -> np.ndarray:
    """Without a KV cache: run ``pm`` on the whole sequence for every new token."""
    if "input" not in getattr(pm, "data_keys", ()) or "output" not in getattr(pm, "output_keys", ()):
        raise ArgumentError(
            "generate: pm must be a compiled GPT (create_gpt) or a model compiled with data key 'input' (token ids) "
            f"and output 'output' (logits), got data keys {getattr(pm, 'data_keys', None)}, "
            f"outputs {getattr(pm, 'output_keys', None)}"
        )
    shape = pm.shapes.get("input") or [None, None]
    out_shape = pm.shapes.get("output") or [None]
    vocab = out_shape[-1] if out_shape else None
    batch, length = prompt.shape
    if len(shape) != 2:
        raise ArgumentError(f"generate: pm's input must be token ids [batch, length], it has shape {shape}")
    if shape[0] is not None and shape[0] != batch:
        raise ArgumentError(f"generate: pm was compiled for batch {shape[0]}, prompt_ids has {batch} rows")
    window = shape[1]
    block_size, model_vocab = _nested_gpt_sizes(pm)
    limit = window if window is not None else block_size
    _check_prompt(prompt, max_new_tokens, limit, vocab if vocab is not None else model_vocab)
    backend = pm.backend
    sequence = np.zeros((batch, window if window is not None else length + max_new_tokens), dtype=np.int64)
    sequence[:, :length] = prompt
    tokens = np.empty((batch, max_new_tokens), dtype=np.int64)
    for i in range(max_new_tokens):
        filled = length + i
        ids = sequence if window is not None else sequence[:, :filled]
        logits = pm.evaluate(params, {"input": backend.array(ids, "int")})["output"]
        token = np.asarray(choose(backend.to_numpy(logits)[:, filled - 1]), dtype=np.int64)
        tokens[:, i] = token
        if filled < sequence.shape[1]:
            sequence[:, filled] = token
    return tokens
