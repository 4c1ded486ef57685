"""The search over a decoder's scores, the same for every decoder and backend: greedy decoding or sampling
(:func:`sample_or_greedy`) and beam search (:func:`beam_search`), with per-sequence stopping at the
end-of-sequence ids and ``transformers``' rules for padding, beam scores, length penalty and early stopping.

A decoder (:class:`Decoder`) only gives the logits of the next token: ``start`` runs the prompts (left
padded, in chunks) and ``advance`` feeds one token per row, after reordering its cache rows (``parents``:
which row each continues) for beam search.

Example:
    >>> class Counting:                      # next token = last token + 1, whatever the prompt
    ...     def start(self, prompts, max_new_tokens, reorder):
    ...         return self.logits(np.array([row[-1] for row in prompts.rows]))
    ...     def advance(self, tokens, parents):
    ...         return self.logits(tokens)
    ...     def history(self, prompts):
    ...         return prompts.rows
    ...     def logits(self, last):
    ...         return np.eye(10, dtype=np.float32)[(last + 1) % 10] * 5
    >>> from .prompts import Prompts
    >>> sample_or_greedy(Counting(), Prompts([np.array([3])]), GenerationConfig(max_new_tokens=4), None)
    array([[4, 5, 6, 7]])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from .config import GenerationConfig
from .logits import LogitsPipeline, log_softmax, sample
from .prompts import Prompts

__all__ = ["Decoder", "beam_search", "sample_or_greedy"]

_LOST = np.float32(-1.0e9)
"""Added to a score that must not win (``transformers``' value)."""


class Decoder(Protocol):
    """What a search needs of a model: the logits ``[rows, vocab]`` of the next token."""

    def start(self, prompts: Prompts, max_new_tokens: int, reorder: bool) -> np.ndarray:
        """Run the prompts; the logits after each row's last prompt token (``reorder``: beam search will
        pass ``parents`` to :meth:`advance`)."""

    def advance(self, tokens: np.ndarray, parents: np.ndarray | None) -> np.ndarray:
        """Feed one token per row (``[rows]``), row ``i`` continuing row ``parents[i]`` when given."""

    def history(self, prompts: Prompts) -> list[np.ndarray]:
        """The tokens each row's sequence starts with (the repetition penalty's: the prompt of a
        decoder-only model, the decoder's start token of an encoder-decoder)."""


def _seen(decoder: Decoder, prompts: Prompts, vocab: int) -> np.ndarray:
    """Bool ``[rows, vocab]``: the tokens of each row's sequence so far (for the repetition penalty)."""
    rows = decoder.history(prompts)
    seen = np.zeros((len(rows), vocab), dtype=bool)
    for i, row in enumerate(rows):
        seen[i, row[(row >= 0) & (row < vocab)]] = True
    return seen


def sample_or_greedy(
    decoder: Decoder, prompts: Prompts, config: GenerationConfig, on_token: Callable[[np.ndarray], object] | None
) -> np.ndarray:
    """New tokens ``[batch, n]`` by greedy decoding or (``do_sample``) seeded sampling; ``n`` is
    ``max_new_tokens``, or fewer when every row emitted an end-of-sequence id (stopped rows then hold
    ``pad_token_id``). ``on_token(tokens)`` gets each column ``[batch]`` as soon as it is chosen."""
    batch, count = prompts.batch, config.max_new_tokens
    tokens = np.zeros((batch, count), dtype=np.int64)
    if count == 0:
        return tokens
    pipeline = LogitsPipeline(config)
    rng = np.random.default_rng(config.seed) if config.do_sample else None
    eos = np.asarray(config.eos_ids, dtype=np.int64)
    finished = np.zeros(batch, dtype=bool)
    logits = decoder.start(prompts, count, False)
    seen = _seen(decoder, prompts, logits.shape[-1]) if pipeline.needs_history else None
    for i in range(count):
        scores = pipeline(logits, seen, i)
        chosen = sample(scores, rng) if rng is not None else np.argmax(scores, axis=-1).astype(np.int64)
        if eos.size:
            chosen = np.where(finished, np.int64(config.pad_token_id or 0), chosen)
        tokens[:, i] = chosen
        if seen is not None:
            seen[np.arange(batch), np.minimum(chosen, seen.shape[1] - 1)] = True
        if on_token is not None:
            on_token(chosen.copy())
        if eos.size:
            finished |= np.isin(chosen, eos)
            if finished.all():
                return tokens[:, : i + 1]
        if i + 1 < count:
            logits = decoder.advance(chosen, None)
    return tokens


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest of each row, largest first (``[rows, k]``)."""
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def _candidates(scores: np.ndarray, k: int, rng: np.random.Generator | None) -> np.ndarray:
    """The ``k`` continuations kept: the best (``rng`` None) or ``k`` drawn without replacement from
    ``softmax(scores)`` (Gumbel top-k), then sorted by score."""
    if rng is None:
        return _top(scores, k)
    with np.errstate(invalid="ignore"):
        drawn = _top(scores + rng.gumbel(size=scores.shape), k)
    order = np.argsort(-np.take_along_axis(scores, drawn, axis=1), axis=1, kind="stable")
    return np.take_along_axis(drawn, order, axis=1)


class _Beams:
    """The state of a beam search over ``batch`` prompts: running beams and finished hypotheses."""

    def __init__(self, batch: int, beams: int, count: int) -> None:
        self.running = np.zeros((batch, beams, count), dtype=np.int64)
        self.running_scores = np.zeros((batch, beams), dtype=np.float32)
        self.running_scores[:, 1:] = _LOST  # only the first beam's continuations at the first step
        self.done = np.zeros((batch, beams, count), dtype=np.int64)
        self.done_scores = np.full((batch, beams), _LOST, dtype=np.float32)
        self.done_flags = np.zeros((batch, beams), dtype=bool)
        self.done_lengths = np.zeros((batch, beams), dtype=np.int64)
        self.improvable = np.ones(batch, dtype=bool)

    def finish(
        self, candidates: np.ndarray, scores: np.ndarray, just: np.ndarray, length: int, config: GenerationConfig
    ) -> None:
        """Merge the candidates that just finished (``just``) into the best ``num_beams`` hypotheses."""
        normalised = (scores / np.float32(length**config.length_penalty)).astype(np.float32)
        full = self.done_flags.all(axis=1, keepdims=True) & (config.early_stopping is True)
        lost = full * _LOST + (~self.improvable)[:, None] * _LOST + (~just) * _LOST
        normalised = (normalised + lost).astype(np.float32)
        merged = np.concatenate([self.done_scores, normalised], axis=1)
        pick = _top(merged, config.num_beams)
        self.done = np.take_along_axis(np.concatenate([self.done, candidates], axis=1), pick[:, :, None], axis=1)
        self.done_scores = np.take_along_axis(merged, pick, axis=1)
        self.done_flags = np.take_along_axis(np.concatenate([self.done_flags, just], axis=1), pick, axis=1)
        lengths = np.concatenate([self.done_lengths, np.full(just.shape, length)], axis=1)
        self.done_lengths = np.take_along_axis(lengths, pick, axis=1)

    def update_improvable(self, generated: int, config: GenerationConfig) -> None:
        """Whether the best running beam could still beat the worst finished hypothesis (``transformers``'
        heuristic: at the current length, or at ``max_new_tokens`` with ``early_stopping="never"``)."""
        never = config.early_stopping == "never" and config.length_penalty > 0.0
        best_length = config.max_new_tokens if never else generated
        best = self.running_scores[:, :1] / np.float32(best_length**config.length_penalty)
        worst = np.where(self.done_flags, self.done_scores.min(axis=1, keepdims=True), _LOST)
        self.improvable &= (best > worst).any(axis=1)

    def result(self, config: GenerationConfig) -> np.ndarray:
        """The best hypothesis of each prompt, ``[batch, longest]``, padded as ``transformers`` does."""
        lengths = self.done_lengths[:, 0]
        eos = config.eos_ids
        fill = (config.pad_token_id or eos[0]) if eos else -1
        out = np.full((len(lengths), int(lengths.max(initial=0))), fill, dtype=np.int64)
        for i, length in enumerate(lengths):
            out[i, :length] = self.done[i, 0, :length]
        return out


def beam_search(decoder: Decoder, prompts: Prompts, config: GenerationConfig) -> np.ndarray:
    """New tokens ``[batch, n]`` of the best of ``num_beams`` beams (beam sampling with ``do_sample``), as
    ``transformers``' beam search: ``num_beams * max(2, 1 + number of eos ids)`` candidates per step, a
    finished hypothesis scored ``sum of log-probs / length ** length_penalty``, ``early_stopping`` as
    ``True``/``False``/``"never"``; ``n`` is the longest best hypothesis (shorter ones padded)."""
    batch, beams, count = prompts.batch, config.num_beams, config.max_new_tokens
    if count == 0:
        return np.zeros((batch, 0), dtype=np.int64)
    eos = np.asarray(config.eos_ids, dtype=np.int64)
    keep = max(2, 1 + eos.size) * beams
    pipeline = LogitsPipeline(config)
    rng = np.random.default_rng(config.seed) if config.do_sample else None
    state = _Beams(batch, beams, count)
    logits = decoder.start(prompts.repeat(beams), count, True)
    vocab = logits.shape[-1]
    seen = _seen(decoder, prompts.repeat(beams), vocab) if pipeline.needs_history else None
    offsets = np.arange(batch)[:, None] * beams
    for i in range(count):
        scores = pipeline(log_softmax(logits.astype(np.float32, copy=False)), seen, i)
        total = (scores.reshape(batch, beams, vocab) + state.running_scores[:, :, None]).reshape(batch, -1)
        chosen = _candidates(total, keep, rng)
        top_scores, source, token = np.take_along_axis(total, chosen, axis=1), chosen // vocab, chosen % vocab
        candidates = np.take_along_axis(state.running, source[:, :, None], axis=1)
        candidates[:, :, i] = token
        hits = np.isin(token, eos) | (i + 1 >= count)
        alive = (top_scores + hits * _LOST).astype(np.float32)
        kept = _top(alive, beams)
        state.running = np.take_along_axis(candidates, kept[:, :, None], axis=1)
        state.running_scores = np.take_along_axis(alive, kept, axis=1)
        parents = (np.take_along_axis(source, kept, axis=1) + offsets).reshape(-1)
        state.finish(candidates, top_scores, hits & (np.arange(keep) < beams), i + 1, config)
        state.update_improvable(i + 1, config)
        stop_all = state.done_flags.all() and config.early_stopping is True
        if not state.improvable.any() or stop_all or hits.all():
            break
        tokens = state.running[:, :, i].reshape(-1)
        if seen is not None:
            seen = seen[parents]
            seen[np.arange(len(tokens)), np.minimum(tokens, vocab - 1)] = True
        logits = decoder.advance(tokens, parents)
    return state.result(config)
