"""Scores of the next token, on the host with NumPy: the processors of ``transformers`` that Mithril's
generation implements (repetition penalty, minimum new tokens, temperature, top-k, top-p), applied in
``transformers``' order by :class:`LogitsPipeline`, and the choice of tokens (greedy or seeded sampling).

Every function takes scores ``[rows, vocab]`` and returns new ones; filtered tokens get ``-inf``.

Example:
    >>> scores = np.array([[1.0, 3.0, 2.0, 0.0]])
    >>> top_k_filter(scores, 2).tolist()
    [[-inf, 3.0, 2.0, -inf]]
    >>> top_p_filter(scores, 0.5).tolist()
    [[-inf, 3.0, -inf, -inf]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .config import GenerationConfig

__all__ = [
    "LogitsPipeline",
    "log_softmax",
    "repetition_penalty",
    "sample",
    "suppress_tokens",
    "temperature_scale",
    "top_k_filter",
    "top_p_filter",
]


def log_softmax(scores: np.ndarray) -> np.ndarray:
    """``log(softmax(scores))`` along the last axis (in the scores' dtype).

    >>> np.round(np.exp(log_softmax(np.array([[0.0, 0.0]]))), 3).tolist()
    [[0.5, 0.5]]
    """
    shifted = scores - scores.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        result: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return result


def repetition_penalty(scores: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """Scores of the tokens ``seen`` (bool ``[rows, vocab]``) divided by ``penalty`` where positive and
    multiplied by it where negative (``transformers``' ``RepetitionPenaltyLogitsProcessor``).

    >>> repetition_penalty(np.array([[2.0, -2.0, 2.0]]), np.array([[True, True, False]]), 2.0).tolist()
    [[1.0, -4.0, 2.0]]
    """
    penalised = np.where(scores < 0, scores * penalty, scores / penalty).astype(scores.dtype, copy=False)
    return np.where(seen, penalised, scores)


def suppress_tokens(scores: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    """``scores`` with ``tokens`` set to ``-inf`` (``MinNewTokensLengthLogitsProcessor`` suppresses the
    end-of-sequence ids this way until enough tokens were generated).

    >>> suppress_tokens(np.array([[1.0, 2.0]]), [1]).tolist()
    [[1.0, -inf]]
    """
    out = scores.copy()
    out[:, list(tokens)] = -np.inf
    return out


def temperature_scale(scores: np.ndarray, temperature: float) -> np.ndarray:
    """``scores / temperature``, computed as ``(scores - max) / temperature``: the same distribution (softmax
    ignores a shift) with the largest score 0, so ``exp`` never overflows and a tiny temperature sends
    every other score to ``-inf`` (greedy decoding) rather than NaN.

    >>> temperature_scale(np.array([[1.0, 3.0]]), 0.5).tolist()
    [[-4.0, 0.0]]
    """
    if temperature == 1.0:
        return scores
    with np.errstate(over="ignore", invalid="ignore"):  # -1 / 5e-324 is -inf: weight 0, as it should be
        shifted = scores - scores.max(axis=-1, keepdims=True)
        return np.where(shifted == 0, 0.0, shifted / temperature).astype(scores.dtype, copy=False)


def top_k_filter(scores: np.ndarray, top_k: int, min_tokens_to_keep: int = 1) -> np.ndarray:
    """Scores below the ``top_k``-th largest of their row set to ``-inf`` (ties at the ``k``-th kept), as
    ``transformers``' ``TopKLogitsWarper``.

    >>> top_k_filter(np.array([[1.0, 2.0, 2.0, 0.0]]), 2).tolist()
    [[-inf, 2.0, 2.0, -inf]]
    """
    k = min(max(top_k, min_tokens_to_keep), scores.shape[-1])
    kth = np.partition(scores, -k, axis=-1)[:, -k, None]
    return np.where(scores < kth, -np.inf, scores).astype(scores.dtype, copy=False)


def top_p_filter(scores: np.ndarray, top_p: float, min_tokens_to_keep: int = 1) -> np.ndarray:
    """Nucleus filtering as ``transformers``' ``TopPLogitsWarper``: with the tokens sorted by increasing
    score, those whose cumulative probability is ``<= 1 - top_p`` are set to ``-inf``, keeping at least
    ``min_tokens_to_keep`` of the most likely.

    >>> top_p_filter(np.array([[0.0, 0.0, 5.0]]), 0.9).tolist()
    [[-inf, -inf, 5.0]]
    """
    if top_p >= 1.0:
        return scores
    order = np.argsort(scores, axis=-1, kind="stable")
    ascending = np.take_along_axis(scores, order, axis=-1)
    shifted = np.exp(ascending - ascending[:, -1:])
    probabilities = shifted / shifted.sum(axis=-1, keepdims=True)
    # summed in float64 and compared in the scores' dtype, as torch's cumsum does on the CPU
    cumulative = np.cumsum(probabilities, axis=-1, dtype=np.float64).astype(scores.dtype)
    remove = cumulative <= np.asarray(1.0 - top_p, dtype=scores.dtype)
    remove[:, -min_tokens_to_keep:] = False
    removed = np.empty_like(remove)
    np.put_along_axis(removed, order, remove, axis=-1)
    return np.where(removed, -np.inf, scores).astype(scores.dtype, copy=False)


def sample(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row drawn from ``softmax(scores)`` with ``rng`` (the inverse of the cumulative
    weights at a uniform draw; in float64, so the same seed gives the same tokens on every backend).

    >>> sample(np.array([[-np.inf, 0.0, -np.inf]]), np.random.default_rng(0)).tolist()
    [1]
    """
    weights = np.asarray(scores, dtype=np.float64)
    weights = weights - weights.max(axis=-1, keepdims=True)
    cumulative = np.cumsum(np.exp(weights), axis=-1)
    draws = rng.random((weights.shape[0], 1)) * cumulative[:, -1:]
    chosen: np.ndarray = np.minimum((cumulative <= draws).sum(axis=-1), weights.shape[-1] - 1).astype(np.int64)
    return chosen


class LogitsPipeline:
    """The processors ``config`` asks for, in ``transformers``' order: repetition penalty, minimum new
    tokens; then, when sampling, temperature, top-k and top-p (``min_tokens_to_keep``: 1, or the number
    of end-of-sequence ids + 1 in beam search, as ``transformers``).

    Call it with the scores ``[rows, vocab]``, the tokens each row has seen (bool ``[rows, vocab]``, only
    read when there is a repetition penalty) and how many tokens were generated so far.

    >>> pipeline = LogitsPipeline(GenerationConfig(do_sample=True, top_k=1))
    >>> pipeline(np.array([[0.0, 1.0]]), None, 0).tolist()
    [[-inf, 1.0]]
    """

    def __init__(self, config: GenerationConfig) -> None:
        self.config = config
        self.min_keep = len(config.eos_ids) + 1 if config.num_beams > 1 else 1

    @property
    def needs_history(self) -> bool:
        """Whether the seen-tokens mask is read (a repetition penalty)."""
        return self.config.repetition_penalty != 1.0

    def __call__(self, scores: np.ndarray, seen: np.ndarray | None, generated: int) -> np.ndarray:
        config = self.config
        if config.repetition_penalty != 1.0 and seen is not None:
            scores = repetition_penalty(scores, seen, config.repetition_penalty)
        if generated < config.min_new_tokens and config.eos_ids:
            scores = suppress_tokens(scores, [i for i in config.eos_ids if i < scores.shape[-1]])
        if config.do_sample:
            scores = temperature_scale(scores, config.temperature)
            if config.top_k is not None:
                scores = top_k_filter(scores, config.top_k, self.min_keep)
            scores = top_p_filter(scores, config.top_p, self.min_keep)
        return scores
