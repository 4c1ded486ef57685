"""``generate``: every bad argument is a MithrilError naming the argument, what is accepted and what was
given (never NumPy's or Python's own message), and any positive temperature gives a valid distribution
(a tiny one is greedy decoding, never NaN). A tiny GPT-2 with random weights; nothing is downloaded."""

from __future__ import annotations

import re
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, IndexRangeError, MithrilError
from mithril.models import Linear, Model

from mithril_models import create_gpt, generate

VOCAB, BLOCK = 50, 16
PROMPT = np.random.default_rng(0).integers(0, VOCAB, (2, 5))
Compiled = tuple[Any, dict[str, Any]]  # the compiled GPT and its parameters
GREEDY = r"\(finite; do_sample=False for greedy decoding\)"
PARAMS = r"a dict of parameter name -> array \(pm\.randomize_params\(\), load_hf\(pm, \.\.\.\)\)"

pytestmark = pytest.mark.skipif(not hasattr(ml, "NumpyBackend"), reason="needs mithril-backend-numpy")


@pytest.fixture(scope="module")
def gpt() -> Compiled:
    model = create_gpt(bias=True, block_size=BLOCK, dims=16, num_heads=2, num_layers=1, vocab_size=VOCAB)
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), data_keys={"input"}, inference=True)
    params = pm.randomize_params(seed=0)
    for key, path in pm.input_paths.items():  # strong positions: the greedy tokens vary
        if path.endswith("wpe.weight"):
            params[key] = params[key] * 40.0
    return pm, params


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, 1e-30])
def test_a_tiny_temperature_is_greedy_decoding(gpt: Compiled, temperature: float) -> None:
    pm, params = gpt
    greedy = generate(pm, params, PROMPT, 8)
    assert len(np.unique(greedy)) > 2  # not token 0 (or any one token) every time
    for top_k in (None, 5):
        for seed in range(3):
            sampled = generate(pm, params, PROMPT, 8, do_sample=True, temperature=temperature, top_k=top_k, seed=seed)
            np.testing.assert_array_equal(sampled, greedy, err_msg=f"temperature={temperature}, top_k={top_k}")


def test_a_huge_temperature_samples_valid_tokens(gpt: Compiled) -> None:
    pm, params = gpt
    tokens = generate(pm, params, PROMPT, 10, do_sample=True, temperature=1e308, seed=0)
    assert tokens.shape == (2, 10) and tokens.min() >= 0 and tokens.max() < VOCAB
    assert len(np.unique(tokens)) > 5  # close to uniform, not one token


def _case_id(change: dict[str, Any]) -> str:
    return re.sub(r"\W+", "-", repr(change))[:40]


ARGUMENT_CASES = [
    ({"seed": -1}, r"generate: seed must be None or an int >= 0, got -1$"),
    ({"seed": 1.5}, r"generate: seed must be None or an int >= 0, got 1\.5$"),
    ({"seed": "abc"}, r"generate: seed must be None or an int >= 0, got 'abc' \(str\)$"),
    ({"seed": True}, r"generate: seed must be None or an int >= 0, got True$"),
    ({"temperature": 0.0}, rf"generate: temperature must be a number > 0 {GREEDY}, got 0\.0$"),
    ({"temperature": -1}, r"temperature must be a number > 0 .*got -1$"),
    ({"temperature": float("nan")}, r"temperature must be a number > 0 .*got nan$"),
    ({"temperature": float("inf")}, r"temperature must be a number > 0 .*got inf$"),
    ({"temperature": "1"}, r"temperature must be a number > 0 .*got '1' \(str\)$"),
    ({"temperature": 10**400}, r"temperature must be a number > 0 .*got 10+\.\.\.$"),  # no float holds it
    ({"top_k": 0}, r"generate: top_k must be None \(the full distribution\) or an int >= 1, got 0$"),
    ({"top_k": 2.0}, r"top_k must be None .* or an int >= 1, got 2\.0$"),
    ({"top_k": True}, r"top_k must be None .* or an int >= 1, got True$"),
    ({"max_new_tokens": -1}, r"generate: max_new_tokens must be an int >= 0, got -1$"),
    ({"max_new_tokens": 1.5}, r"max_new_tokens must be an int >= 0, got 1\.5$"),
    ({"max_new_tokens": "3"}, r"max_new_tokens must be an int >= 0, got '3' \(str\)$"),
    ({"params": None}, rf"generate: params must be {PARAMS}, got None$"),
    ({"params": [1, 2]}, r"params must be a dict .*got \[1, 2\] \(list\)$"),
    ({"prompt_ids": [[1, 2], []]}, r"generate: prompt_ids\[1\] must be a non-empty list of token ids, got \[\]$"),
    (
        {"prompt_ids": [[1, 2], [3, 4]], "attention_mask": [[1, 0], [1, 1, 1]]},
        r"attention_mask must have the shape of prompt_ids \(2, 2\)$",
    ),
    (
        {"prompt_ids": [[1, 2], [3, 4]], "attention_mask": [1, 1, 1]},
        r"attention_mask must have the shape of prompt_ids \(2, 2\), got \(1, 3\)$",
    ),
    (
        {"prompt_ids": [[1, 2], [3, 4]], "attention_mask": [[1, 0], [1, 2]]},
        r"attention_mask must hold 0 \(padding\) and 1 \(tokens\) only$",
    ),
    (
        {"prompt_ids": [[1, 2, 3]], "attention_mask": [[1, 0, 1]]},
        r"attention_mask row 0 must mark one run of tokens .*got \[1, 0, 1\]$",
    ),
    ({"top_p": 0.0}, r"generate: top_p must be a number in \(0, 1\] \(1: the full distribution\), got 0\.0$"),
    ({"top_p": 1.5}, r"top_p must be a number in \(0, 1\] .*got 1\.5$"),
    ({"repetition_penalty": 0}, r"generate: repetition_penalty must be a number > 0 \(finite; 1: no penalty\), got 0$"),
    ({"num_beams": 0}, r"generate: num_beams must be an int >= 1, got 0$"),
    ({"num_beams": 2.0}, r"generate: num_beams must be an int >= 1, got 2\.0$"),
    ({"length_penalty": float("nan")}, r"generate: length_penalty must be a finite number, got nan$"),
    ({"early_stopping": "yes"}, r"generate: early_stopping must be True, False or 'never', got 'yes' \(str\)$"),
    ({"early_stopping": 1}, r"generate: early_stopping must be True, False or 'never', got 1$"),
    (
        {"eos_token_id": -1},
        r"generate: eos_token_id must be None, a token id \(an int >= 0\) or a non-empty list of them, got -1$",
    ),
    ({"eos_token_id": []}, r"eos_token_id must be None, a token id .*got \[\] \(list\)$"),
    ({"pad_token_id": "0"}, r"generate: pad_token_id must be None or a token id \(an int >= 0\), got '0' \(str\)$"),
    ({"min_new_tokens": -2}, r"generate: min_new_tokens must be an int >= 0, got -2$"),
    ({"do_sample": "yes"}, r"generate: do_sample must be True or False, got 'yes' \(str\)$"),
    ({"on_token": 3}, r"generate: on_token must be None or a callable taking the new tokens \[batch\], got 3$"),
    (
        {"on_token": print, "num_beams": 2},
        r"generate: on_token streams one token per step; it cannot be used with num_beams > 1$",
    ),
    ({"prefill_chunk": 0}, r"generate: prefill_chunk must be a positive int, got 0$"),
    (
        {"generation_config": 3},
        r"generate: generation_config must be a GenerationConfig \(Mithril's or transformers'\), a dict or None, "
        r"got 3$",
    ),
    ({"prompt_ids": [[]]}, r"generate: prompt_ids must hold at least one token per prompt, got shape \(1, 0\)$"),
    ({"prompt_ids": [[1.5, 2.0]]}, r"generate: prompt_ids must be integer token ids, got dtype float64$"),
    ({"prompt_ids": [["a", "b"]]}, r"generate: prompt_ids must be integer token ids, got dtype <U1$"),
    ({"prompt_ids": None}, r"generate: prompt_ids must be a list of ids or a \[batch, length\] array, got shape \(\)$"),
    ({"prompt_ids": [[0] * 17]}, r"generate: prompt_ids: the prompt has 17 tokens, more than block_size=16$"),
    (
        {"max_new_tokens": 13},
        r"generate: a prompt of 5 tokens plus max_new_tokens=13 needs 17 positions, more than block_size=16; "
        r"ask for at most 12 new tokens$",
    ),
]


@pytest.mark.parametrize("change, message", ARGUMENT_CASES, ids=[_case_id(change) for change, _ in ARGUMENT_CASES])
def test_bad_arguments_are_argument_errors_naming_them(gpt: Compiled, change: dict[str, Any], message: str) -> None:
    pm, params = gpt
    arguments = {
        "params": params,
        "prompt_ids": PROMPT,
        "max_new_tokens": 2,
        "temperature": 1.0,
        "seed": 0,
        "do_sample": True,
    }
    arguments.update(change)
    with pytest.raises(ArgumentError, match=message):
        generate(pm, **arguments)


@pytest.mark.parametrize(
    "prompt, message",
    [
        ([[1, 2, 50]], r"generate: prompt_ids holds token id 50 at position \(0, 2\), out of range for "),
        ([[1, 2], [-3, 4]], r"generate: prompt_ids holds token id -3 at position \(1, 0\), out of range for "),
    ],
)
def test_token_ids_outside_the_vocabulary_are_index_range_errors(gpt: Compiled, prompt: Any, message: str) -> None:
    pm, params = gpt
    with pytest.raises(IndexRangeError, match=message + r"vocab_size=50 \(ids 0\.\.49\)$"):
        generate(pm, params, prompt, 2, top_k=1)


def test_a_model_that_cannot_generate_is_an_argument_error() -> None:
    with pytest.raises(ArgumentError, match=r"generate: pm must be a compiled model .*got 'gpt2' \(str\)$"):
        generate("gpt2", {}, [[1]], 1)
    model = Model()
    model |= Linear(4)(input="x", output="y")
    pm = ml.compile(model, ml.NumpyBackend(), shapes={"x": [1, 3]})
    with pytest.raises(
        ArgumentError, match=r"generate: pm must be a compiled GPT, Llama or T5 decoder .* got data keys \['x'\]"
    ):
        generate(pm, pm.randomize_params(seed=0), [[1]], 1)


def test_missing_parameters_are_named(gpt: Compiled) -> None:
    pm, params = gpt
    partial = dict(list(params.items())[1:])
    with pytest.raises(MithrilError, match=r"generate: params has no value for 'transformer\.wte\.weight'"):
        generate(pm, partial, PROMPT, 2, top_k=1)
