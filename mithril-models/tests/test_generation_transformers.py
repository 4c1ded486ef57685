"""Generation against ``transformers.generate`` on the same weights: random-weight GPT-2, Llama (grouped-query
attention) and T5 from small configs, saved with ``save_pretrained`` into a temporary folder and opened with
``from_pretrained`` (nothing is downloaded). Greedy and beam search (4 beams, with and without end-of-sequence
ids, length penalties and early stopping) give ``transformers``' tokens, padding included; a batch of prompts
of different lengths gives the tokens of each prompt alone. NumPy and PyTorch here (T5 also on C and GGML);
JAX, MLX, C and GGML in the ``slow`` tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mithril.extend import available_backends  # noqa: E402

from mithril_models import GenerationConfig, Pretrained, from_pretrained, generate  # noqa: E402
from mithril_models.testing import transformers_generate  # noqa: E402

VOCAB = 60
FAMILIES = ("gpt2", "llama", "t5")
ROWS = [[5, 17, 42, 8, 33, 21, 9], [12, 40, 3, 57], [30, 2, 44, 19, 11]]
"""Three prompts of different lengths (the batched runs pad them)."""
NEW = 10


def _config(family: str) -> Any:
    if family == "gpt2":
        return transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=None, eos_token_id=None
        )
    if family == "llama":
        return transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, bos_token_id=None, eos_token_id=None,
        )  # fmt: skip
    return transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0,
        eos_token_id=None, pad_token_id=0,
    )  # fmt: skip


def _reference(family: str) -> Any:
    """The ``transformers`` model, every parameter random (norm scales around 1), seeds picked so greedy
    decoding does not repeat one token."""
    classes = {
        "gpt2": transformers.GPT2LMHeadModel,
        "llama": transformers.LlamaForCausalLM,
        "t5": transformers.T5ForConditionalGeneration,
    }
    model = classes[family](_config(family))
    torch.manual_seed({"gpt2": 1, "llama": 0, "t5": 1}[family])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            norm = any(p in name for p in ("norm", "ln_", "layer_norm")) and name.endswith("weight")
            parameter.normal_(1.0 if norm else 0.0, 0.3)
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny models: one PyTorch thread (two test workers on two cores otherwise spin against each other)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    """``family -> (checkpoint folder, transformers model)``."""
    found = {}
    for family in FAMILIES:
        model = _reference(family)
        folder = tmp_path_factory.mktemp(family)
        model.save_pretrained(folder)
        found[family] = (folder, model)
    return found


_OPENED: dict[tuple[str, str], Pretrained] = {}


def opened(folders: dict[str, tuple[Path, Any]], family: str, backend: str) -> Pretrained:
    """``from_pretrained`` of the family's folder on ``backend`` (once per module)."""
    if backend not in available_backends():
        pytest.skip(f"the {backend} backend is not installed")
    key = (family, backend)
    if key not in _OPENED:
        _OPENED[key] = from_pretrained(folders[family][0], backend)
    return _OPENED[key]


def _early_eos(folders: dict[str, tuple[Path, Any]], family: str, **options: Any) -> int:
    """An end-of-sequence id the first prompt emits early without one (greedy, or with ``options``), so
    that stopping is exercised."""
    tokens = transformers_generate(folders[family][1], ROWS[:1], max_new_tokens=NEW, **options)[0]
    return int(tokens[2])


BEAM_OPTIONS = [
    {},
    {"eos": 1},
    {"eos": 1, "length_penalty": 0.5},
    {"eos": 1, "early_stopping": True},
    {"eos": 2, "early_stopping": "never", "length_penalty": 2.0},
]


def _options(folders: dict[str, tuple[Path, Any]], family: str, case: dict[str, Any]) -> dict[str, Any]:
    """``case`` with ``eos`` (how many end-of-sequence ids) replaced by ``eos_token_id``."""
    options = {k: v for k, v in case.items() if k != "eos"}
    if case.get("eos"):
        first = _early_eos(folders, family, num_beams=options.get("num_beams", 1))
        options["eos_token_id"] = first if case["eos"] == 1 else [first, (first + 1) % VOCAB]
    return options


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("family", FAMILIES)
def test_beam_search_gives_the_tokens_of_transformers(
    folders: dict[str, tuple[Path, Any]], family: str, backend: str
) -> None:
    pretrained, model = opened(folders, family, backend), folders[family][1]
    finished_early = 0
    for case in BEAM_OPTIONS:
        options = _options(folders, family, case)
        want = transformers_generate(model, ROWS, max_new_tokens=NEW, num_beams=4, **options)
        got = pretrained.generate(ROWS, max_new_tokens=NEW, num_beams=4, pad_token_id=0, **options)
        np.testing.assert_array_equal(got, want, err_msg=f"{family} on {backend}, {options}")
        eos = options.get("eos_token_id", -1)
        finished_early += bool(np.isin(want[:, :-1], eos).any())
    assert finished_early >= 2  # the end-of-sequence cases did stop beams early (then filled, as transformers)


GREEDY_OPTIONS = [{}, {"eos": 1}, {"eos": 1, "min_new_tokens": 5}, {"repetition_penalty": 1.5}]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_and_end_of_sequence_padding_as_transformers(
    folders: dict[str, tuple[Path, Any]], family: str, backend: str
) -> None:
    """Greedy tokens (T5 included), each row stopping at its end-of-sequence id and padded after it with
    ``pad_token_id``, ``min_new_tokens`` and ``repetition_penalty`` as ``transformers``."""
    pretrained, model = opened(folders, family, backend), folders[family][1]
    for case in GREEDY_OPTIONS:
        options = _options(folders, family, case)
        want = transformers_generate(model, ROWS, max_new_tokens=NEW, **options)
        assert len({tuple(row) for row in want}) == len(ROWS) and len(np.unique(want)) > 4  # not one token
        got = pretrained.generate(ROWS, max_new_tokens=NEW, pad_token_id=0, **options)
        np.testing.assert_array_equal(got, want, err_msg=f"{family} on {backend}, {options}")
        if "eos_token_id" in options and "min_new_tokens" not in options:
            stop = list(want[0]).index(options["eos_token_id"])  # the first row stopped early, then padding
            assert stop <= 2 and (want[0, stop + 1 :] == 0).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_batch_of_prompts_gives_each_prompt_alone(folders: dict[str, tuple[Path, Any]], family: str) -> None:
    pretrained = opened(folders, family, "torch")
    for options in ({}, {"num_beams": 4}, {"num_beams": 4, "eos_token_id": _early_eos(folders, family, num_beams=4)}):
        batched = pretrained.generate(ROWS, max_new_tokens=NEW, **options)
        for i, row in enumerate(ROWS):
            alone = pretrained.generate([row], max_new_tokens=NEW, **options)[0]
            width = min(len(alone), batched.shape[1])  # beams: the batch is as long as its longest row
            np.testing.assert_array_equal(batched[i, :width], alone[:width], err_msg=f"{family}, row {i}, {options}")
            assert (batched[i, width:] == alone[-1]).all()


def test_options_as_a_generation_config_and_streaming(folders: dict[str, tuple[Path, Any]]) -> None:
    """A ``transformers.GenerationConfig``, Mithril's, a dict or keyword arguments give the same tokens;
    ``on_token`` receives each column as it is chosen; the function form takes ids and an attention mask."""
    pretrained = opened(folders, "llama", "numpy")
    eos = _early_eos(folders, "llama")
    want = pretrained.generate(ROWS, max_new_tokens=6, num_beams=4, eos_token_id=eos, length_penalty=0.7)
    for config in (
        transformers.GenerationConfig(num_beams=4, eos_token_id=eos, length_penalty=0.7, max_new_tokens=6),
        GenerationConfig(num_beams=4, eos_token_id=eos, length_penalty=0.7, max_new_tokens=6),
        {"num_beams": 4, "eos_token_id": eos, "length_penalty": 0.7, "max_new_tokens": 6},
    ):
        np.testing.assert_array_equal(pretrained.generate(ROWS, generation_config=config), want)
    columns: list[np.ndarray] = []
    tokens = pretrained.generate(ROWS, max_new_tokens=6, eos_token_id=eos, on_token=columns.append)
    np.testing.assert_array_equal(np.stack(columns, axis=1), tokens)
    ids = np.array([[0, 0, *ROWS[1]], [0, *ROWS[2]]])
    mask = (np.arange(6) >= np.array([[2], [1]])).astype(int)
    direct = generate(pretrained.pm, pretrained.parameters, ids, 6, attention_mask=mask, eos_token_id=eos)
    np.testing.assert_array_equal(direct, pretrained.generate(ROWS[1:], max_new_tokens=6, eos_token_id=eos))


def test_t5_through_the_function_needs_its_encoder(folders: dict[str, tuple[Path, Any]]) -> None:
    t5 = opened(folders, "t5", "numpy")
    want = t5.generate(ROWS, max_new_tokens=NEW, num_beams=4)
    got = generate(
        t5.models["decoder"], t5.params["decoder"], ROWS, NEW, num_beams=4, encoder=t5.models["encoder"],
        encoder_params=t5.params["encoder"],
    )  # fmt: skip
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"a T5 decoder needs its encoder: pass encoder="):
        generate(t5.models["decoder"], t5.params["decoder"], ROWS, 2)


@pytest.mark.parametrize("backend", ["c", "ggml"])
def test_t5_folder_on_static_shape_backends(folders: dict[str, tuple[Path, Any]], backend: str) -> None:
    """``from_pretrained`` of a T5 folder on C and GGML: the encoder compiled for ``[1, 256]`` tokens and the
    decoder for as many states; ``generate`` (which compiles the encoder for each prompt length and the
    cached decoder steps) gives ``transformers``' greedy and beam tokens on a padded batch."""
    t5, model = opened(folders, "t5", backend), folders["t5"][1]
    assert t5.models["encoder"].shapes["input"] == [1, 256]
    assert t5.models["decoder"].shapes["memory"] == [1, 256, model.config.d_model]
    for case in ({}, {"eos": 1, "num_beams": 4}):
        options = _options(folders, "t5", case)
        want = transformers_generate(model, ROWS, max_new_tokens=NEW, **options)
        got = t5.generate(ROWS, max_new_tokens=NEW, pad_token_id=0, **options)
        np.testing.assert_array_equal(got, want, err_msg=f"t5 on {backend}, {options}")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "mlx", "c", "ggml"])
def test_every_backend_generates_the_tokens_of_transformers(folders: dict[str, tuple[Path, Any]], backend: str) -> None:
    """One run per backend: Llama (grouped-query attention) beam search with end-of-sequence stopping on a
    padded batch (and greedy on JAX and MLX); T5 greedy and beams through ``from_pretrained`` on JAX and MLX
    (C and GGML: :func:`test_t5_folder_on_static_shape_backends`)."""
    python = backend in ("jax", "mlx")  # C and GGML compile each step variant: beams only (greedy: test_generation)
    for family in ("llama", "t5") if python else ("llama",):
        pretrained, model = opened(folders, family, backend), folders[family][1]
        for case in ({"eos": 1}, {"eos": 1, "num_beams": 4}) if python else ({"eos": 1, "num_beams": 4},):
            options = _options(folders, family, case)
            want = transformers_generate(model, ROWS, max_new_tokens=NEW, **options)
            got = pretrained.generate(ROWS, max_new_tokens=NEW, pad_token_id=0, **options)
            np.testing.assert_array_equal(got, want, err_msg=f"{family} on {backend}, {options}")
