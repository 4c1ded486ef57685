"""``generate`` against ``transformers``' greedy ``generate`` (random weights), the KV-cache decode steps
(chunked prefill, one-token steps) against the full model's logits, seeded sampling across backends, the
step cache and bad input."""

from __future__ import annotations

import copy
import gc
from typing import Any

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.errors import MithrilError
from mithril.models import IOKey, Model
from transformers import GPT2LMHeadModel

from _hf_references import GPT2_SIZES, compiled_reference, gpt2_reference, greedy_tokens
from mithril_models import from_hf_config, generate, load_hf
from mithril_models.generation import clear_decode_cache
from mithril_models.generation import decoders as decoders_module
from mithril_models.generation.decoders import decoder_for
from mithril_models.generation.prompts import Prompts
from mithril_models.testing import assert_matches, backend_names, backend_params, make_backend

PROMPT = np.random.default_rng(0).integers(0, GPT2_SIZES["vocab_size"], (2, 5))
NEW = 11  # 5 + 11 - 1 = 15 positions are fed: the cache spans the whole block (16)


@pytest.fixture(scope="module")
def model() -> GPT2LMHeadModel:
    return gpt2_reference()


@pytest.fixture(scope="module")
def greedy(model: GPT2LMHeadModel) -> np.ndarray:
    return greedy_tokens(model, PROMPT, NEW, min_gap=1e-3, varied=True)


def compiled(
    model: GPT2LMHeadModel, backend_name: str, dtype: Any = ml.float32, shapes: Any = None
) -> tuple[Any, dict[str, Any]]:
    """On C and GGML (static shapes) the whole block: two rows of ``n_positions`` tokens."""
    return compiled_reference(model, backend_name, [2, GPT2_SIZES["n_positions"]], dtype, shapes)


@pytest.mark.slow
@pytest.mark.parametrize("backend_name, dtype", list(backend_params()))
def test_greedy_tokens_are_those_of_transformers(
    model: GPT2LMHeadModel, greedy: np.ndarray, backend_name: str, dtype: Any
) -> None:
    pm, params = compiled(model, backend_name, dtype)
    got = generate(pm, params, PROMPT, NEW)
    assert got.dtype == np.int64 and got.shape == (2, NEW)
    np.testing.assert_array_equal(got, greedy, err_msg=f"greedy tokens on {backend_name}")


@pytest.mark.parametrize(
    "backend_name, dtype",
    [("numpy", ml.float64), *(p for p in backend_params() if p.values[0] in ("numpy", "torch", "jax", "mlx"))],
)
def test_decode_step_logits_match_the_reference(model: GPT2LMHeadModel, backend_name: str, dtype: Any) -> None:
    """The chunked prefill (prompts of different lengths, left padded) and every one-token step give the
    logits of the full model at that position, for each row."""
    pm, params = compiled(model, backend_name, dtype)
    continuation = np.random.default_rng(3).integers(0, GPT2_SIZES["vocab_size"], (2, 6))
    prompts = Prompts([PROMPT[0], PROMPT[1, :3]])
    decoder = decoder_for("generate", pm, params, None, None, prefill_chunk=2)
    seen = [decoder.start(prompts, continuation.shape[1] + 1, reorder=False)]
    seen += [decoder.advance(continuation[:, i], None) for i in range(continuation.shape[1])]
    for row, prompt in enumerate(prompts.rows):
        sequence = np.concatenate([prompt, continuation[row]])
        with torch.no_grad():
            want = copy.deepcopy(model).double()(torch.tensor(sequence[None])).logits.numpy()[0]
        for i, logits in enumerate(seen):
            assert_matches(logits[row], want[len(prompt) - 1 + i], dtype, f"{backend_name} row {row} step {i}")


def test_prompt_as_list_list_of_lists_or_array(model: GPT2LMHeadModel, greedy: np.ndarray) -> None:
    pm, params = compiled(model, "numpy")
    np.testing.assert_array_equal(generate(pm, params, PROMPT.tolist(), 4), greedy[:, :4])
    np.testing.assert_array_equal(generate(pm, params, PROMPT.astype(np.int32), 4), greedy[:, :4])
    one = generate(pm, params, PROMPT[1].tolist(), 4)
    np.testing.assert_array_equal(one, greedy[1:, :4])
    assert generate(pm, params, PROMPT, 0).shape == (2, 0)


@pytest.mark.parametrize("shapes", [None, [2, 16]], ids=["symbolic", "static-window"])
def test_models_that_are_not_a_gpt_run_without_a_cache(model: GPT2LMHeadModel, greedy: np.ndarray, shapes: Any) -> None:
    outer = Model()  # a GPT inside another model: generate cannot build a decode step for it
    outer |= from_hf_config(model.config)(input="input", output=IOKey("output"))
    pm = ml.compile(outer, make_backend("numpy"), shapes={"input": shapes} if shapes else None, data_keys={"input"})
    params = load_hf(pm, model.state_dict())
    np.testing.assert_array_equal(generate(pm, params, PROMPT, NEW), greedy)
    assert pm not in decoders_module._STEPS
    with pytest.raises(ValueError, match="needs 17 positions, more than block_size=16"):
        generate(pm, params, PROMPT, NEW + 2)
    with pytest.raises(ValueError, match=r"prompts of different lengths \[5, 3\] need a decoder with a KV cache"):
        generate(pm, params, [PROMPT[0], PROMPT[1, :3]], 2)


@pytest.mark.parametrize("other", ["torch", "jax"])
def test_seeded_sampling_gives_the_same_tokens_on_every_backend(model: GPT2LMHeadModel, other: str) -> None:
    if other not in backend_names():
        pytest.skip(f"the {other} backend is not installed")
    runs = {name: compiled(model, name) for name in ("numpy", other)}
    for options in ({"top_k": 5, "temperature": 0.8}, {"top_k": None}, {"top_p": 0.7, "repetition_penalty": 1.3}):
        tokens = {
            name: generate(pm, params, PROMPT, NEW, do_sample=True, seed=1, **options)
            for name, (pm, params) in runs.items()
        }
        np.testing.assert_array_equal(tokens["numpy"], tokens[other], err_msg=str(options))
        pm, params = runs["numpy"]
        np.testing.assert_array_equal(
            generate(pm, params, PROMPT, NEW, do_sample=True, seed=1, **options), tokens["numpy"]
        )
        assert not np.array_equal(generate(pm, params, PROMPT, NEW, do_sample=True, seed=2, **options), tokens["numpy"])


def test_top_k_samples_only_among_the_k_most_likely_tokens(model: GPT2LMHeadModel) -> None:
    pm, params = compiled(model, "numpy", ml.float64)

    def ranks(tokens: np.ndarray) -> np.ndarray:
        """Rank of each sampled token among the reference logits at its position (0 = most likely)."""
        sequence = np.concatenate([PROMPT, tokens], axis=1)
        with torch.no_grad():
            logits = model(torch.tensor(sequence)).logits.numpy()[:, PROMPT.shape[1] - 1 : -1]
        chosen = np.take_along_axis(logits, tokens[..., None], axis=-1)
        return (logits > chosen).sum(-1)

    for seed in range(3):
        assert ranks(generate(pm, params, PROMPT, NEW, do_sample=True, top_k=3, seed=seed)).max() < 3
    wide = np.concatenate(
        [ranks(generate(pm, params, PROMPT, NEW, do_sample=True, temperature=2.0, seed=s)) for s in range(3)]
    )
    assert wide.max() >= 3  # the full distribution does reach beyond the top 3


def test_decode_steps_are_compiled_once_and_released(model: GPT2LMHeadModel, monkeypatch: pytest.MonkeyPatch) -> None:
    pm, params = compiled(model, "numpy")
    calls: list[Any] = []
    original = ml.compile
    monkeypatch.setattr(ml, "compile", lambda *args, **kwargs: calls.append(args[0]) or original(*args, **kwargs))
    first = generate(pm, params, PROMPT, 6)  # 5 tokens: one prefill chunk of 8, cache of 8 + 5 slots -> 16
    np.testing.assert_array_equal(generate(pm, params, PROMPT, 6), first)
    generate(pm, params, PROMPT, 6, do_sample=True, top_k=4, seed=0)
    assert len(calls) == 2 and list(decoders_module._STEPS[pm]) == [(2, 16)]  # the prefill and one-token steps
    generate(pm, params, PROMPT[:, :3], 7)  # a prompt of 3: another chunk size (4), the same one-token step
    assert len(calls) == 3
    generate(pm, params, [PROMPT[0, :4], PROMPT[1, :3]], 7)  # 4 and 3 tokens: chunk 4 again, no compile
    assert len(calls) == 3
    generate(pm, params, PROMPT[:1], 6)  # another batch size: other steps
    assert len(calls) == 5
    generate(pm, params, PROMPT, 6, num_beams=2)  # 4 rows; the one-token step reorders them
    assert len(calls) == 7
    clear_decode_cache()
    assert pm not in decoders_module._STEPS
    generate(pm, params, PROMPT, 6)
    assert len(calls) == 9
    del pm, params
    gc.collect()
    assert len(decoders_module._STEPS) == 0


def test_prefill_chunks_give_the_tokens_of_token_by_token_prefill(model: GPT2LMHeadModel) -> None:
    """``prefill_chunk=1`` feeds the prompt one token per call (as before chunked prefill): every chunk
    size gives the same tokens, greedy and with beams."""
    pm, params = compiled(model, "numpy", ml.float64)
    prompts = [PROMPT[0], PROMPT[1, :2]]
    for options in ({}, {"num_beams": 3}):
        one = generate(pm, params, prompts, 8, prefill_chunk=1, **options)
        for chunk in (2, 3, 64):
            np.testing.assert_array_equal(generate(pm, params, prompts, 8, prefill_chunk=chunk, **options), one)


def test_bad_input_says_what_was_expected(model: GPT2LMHeadModel) -> None:
    pm, params = compiled(model, "numpy")
    cases = [
        ((np.zeros((1, 17), int), 1), {}, "the prompt has 17 tokens, more than block_size=16"),
        (([[1, 2, 50]], 1), {}, r"token id 50 at position \(0, 2\), out of range for vocab_size=50 \(ids 0\.\.49\)"),
        (([[1, -2, 3]], 1), {}, r"token id -2 at position \(0, 1\)"),
        ((PROMPT, 13), {}, "needs 17 positions, more than block_size=16; ask for at most 12 new tokens"),
        ((PROMPT, 2), {"top_k": 0, "do_sample": True}, "top_k must be None .* or an int >= 1, got 0"),
        ((PROMPT, 2), {"temperature": 0.0}, "temperature must be a number > 0"),
        ((PROMPT, -1), {}, "max_new_tokens must be an int >= 0, got -1"),
        (([[1, 2], []], 2), {}, r"prompt_ids\[1\] must be a non-empty list of token ids"),
        (([[]], 2), {}, "at least one token"),
        (([[1.5, 2.0]], 2), {}, "integer token ids, got dtype float64"),
    ]
    for (prompt, new), options, message in cases:
        with pytest.raises(MithrilError, match=message):  # ArgumentError, IndexRangeError for the token ids
            generate(pm, params, prompt, new, **options)
    assert generate(pm, params, PROMPT, 12).shape == (2, 12)  # 5 + 12 - 1 = 16 positions: fits
