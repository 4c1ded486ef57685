"""The scores of the next token against ``transformers``' logits processors on the same logits: top-k and
top-p filtering (the same tokens kept, the same values), temperature (the same distribution), repetition
penalty and minimum new tokens; sampling itself cannot match another RNG, so it is checked for staying in the
filtered support and for ``seed`` making runs reproducible. No model needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.generation import logits_process as hf  # noqa: E402

from mithril_models.generation.config import GenerationConfig  # noqa: E402
from mithril_models.generation.logits import (  # noqa: E402
    LogitsPipeline,
    repetition_penalty,
    sample,
    suppress_tokens,
    temperature_scale,
    top_k_filter,
    top_p_filter,
)

RNG = np.random.default_rng(0)
LOGITS = (RNG.normal(size=(6, 200)) * 3).astype(np.float32)
LOGITS[1, :20] = LOGITS[1, 20]  # ties at the cut
LOGITS[2] = -1.0  # a flat row
LOGITS[3, 7] = 30.0  # one dominant token


def _hf(processor: Any, scores: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
    ids = np.zeros((scores.shape[0], 1), dtype=np.int64) if ids is None else ids
    return processor(torch.tensor(ids), torch.tensor(scores)).numpy()


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("top_k", [1, 5, 20, 199, 500])
@pytest.mark.parametrize("keep", [1, 3])
def test_top_k_is_transformers_top_k_warper(top_k: int, keep: int) -> None:
    want = _hf(hf.TopKLogitsWarper(top_k, min_tokens_to_keep=keep), LOGITS)
    np.testing.assert_array_equal(top_k_filter(LOGITS, top_k, keep), want)


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.9, 0.999, 1.0])
@pytest.mark.parametrize("keep", [1, 3])
def test_top_p_is_transformers_top_p_warper(top_p: float, keep: int) -> None:
    """Rows with ties at the cut keep as many tokens as ``transformers`` (which of the tied ones is up to the
    sort: ``torch.sort`` is not stable); the others the same tokens."""
    want = _hf(hf.TopPLogitsWarper(top_p, min_tokens_to_keep=keep), LOGITS)
    got = top_p_filter(LOGITS, top_p, keep)
    np.testing.assert_array_equal(np.isinf(got).sum(-1), np.isinf(want).sum(-1), err_msg="as many tokens kept")
    untied = [0, 3, 4, 5]
    np.testing.assert_array_equal(got[untied], want[untied])


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_gives_transformers_distribution(temperature: float) -> None:
    want = _softmax(_hf(hf.TemperatureLogitsWarper(temperature), LOGITS).astype(np.float64))
    np.testing.assert_allclose(_softmax(temperature_scale(LOGITS, temperature).astype(np.float64)), want, atol=1e-6)


def test_repetition_penalty_and_min_new_tokens_are_transformers() -> None:
    ids = RNG.integers(0, 200, (6, 9))
    seen = np.zeros(LOGITS.shape, dtype=bool)
    np.put_along_axis(seen, ids, True, axis=1)
    want = _hf(hf.RepetitionPenaltyLogitsProcessor(1.7), LOGITS, ids)
    np.testing.assert_allclose(repetition_penalty(LOGITS, seen, 1.7), want, rtol=1e-6)
    want = _hf(hf.MinNewTokensLengthLogitsProcessor(9, 3, [4, 11]), LOGITS, ids)  # 0 new tokens < 3
    np.testing.assert_array_equal(suppress_tokens(LOGITS, [4, 11]), want)


def test_the_pipeline_runs_transformers_warpers_in_their_order() -> None:
    """Temperature, then top-k, then top-p (as ``transformers``): the same support and distribution."""
    config = GenerationConfig(do_sample=True, temperature=0.7, top_k=30, top_p=0.8)
    want = LOGITS
    for processor in (hf.TemperatureLogitsWarper(0.7), hf.TopKLogitsWarper(30), hf.TopPLogitsWarper(0.8)):
        want = _hf(processor, want)
    got = LogitsPipeline(config)(LOGITS, None, 0)
    untied = [0, 3, 4, 5]
    np.testing.assert_array_equal(np.isinf(got).sum(-1), np.isinf(want).sum(-1))
    np.testing.assert_array_equal(np.isinf(got[untied]), np.isinf(want[untied]))
    np.testing.assert_allclose(
        _softmax(got[untied].astype(np.float64)), _softmax(want[untied].astype(np.float64)), atol=1e-6
    )


def test_sampling_stays_in_the_filtered_support_and_a_seed_repeats_it() -> None:
    scores = top_p_filter(top_k_filter(LOGITS, 12), 0.8)
    draws = np.stack([sample(scores, np.random.default_rng(seed)) for seed in range(200)])  # [200, rows]
    kept = ~np.isinf(scores)
    assert all(kept[row, draws[:, row]].all() for row in range(scores.shape[0]))
    assert len(np.unique(draws[:, 0])) > 1  # not always the top token
    np.testing.assert_array_equal(sample(scores, np.random.default_rng(7)), sample(scores, np.random.default_rng(7)))
    # frequencies follow the filtered distribution (row 0, 4000 draws)
    many = sample(np.repeat(scores[:1], 4000, axis=0), np.random.default_rng(1))
    expected = _softmax(scores[:1].astype(np.float64))[0]
    observed = np.bincount(many, minlength=scores.shape[1]) / len(many)
    assert np.abs(observed - expected).max() < 0.03
