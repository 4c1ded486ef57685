"""``export_program`` for Llama-style decoders: a random-weight ``transformers.LlamaForCausalLM`` (2 layers,
grouped-query attention with 2 key-value heads) and ``MistralForCausalLM`` (sliding window) as standalone C
programs, built with plain ``cc`` and run with an empty PATH. The references are ``transformers``' greedy
``generate`` and its logits (nothing is downloaded); the quantized programs are checked bit for bit against
the GGML backend running the same decode step with the same quantization."""

from __future__ import annotations

import json
import shutil
from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _export_helpers import build, ggml_decode, run, run_tokens  # noqa: E402
from _hf_references import LLAMA3_SCALING, LLAMA_SIZES, greedy_tokens, llama_reference  # noqa: E402
from mithril_models import export_program  # noqa: E402
from mithril_models.export import read_weights, resolve_model  # noqa: E402
from mithril_models.llama import LlamaConfig, LlamaDecodeStep  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")

SIZES = {**LLAMA_SIZES, "max_position_embeddings": 32}
LLAMA3 = {**LLAMA3_SCALING, "original_max_position_embeddings": 8}
PROMPTS = ([5, 17, 42, 8, 33, 21, 9], [12, 40, 3], [30, 2, 44, 19, 11, 7, 60, 25])
"""Prompts for prefill steps of 4 tokens: overlapping chunks, shorter than a chunk, whole chunks."""
NEW = 12
FORMATS = ("q8_0", "q4_0")


def reference(seed: int = 0, mistral: bool = False, **options: Any) -> Any:
    """A random-weight ``LlamaForCausalLM`` (``MistralForCausalLM``) of ``SIZES`` (32 positions)."""
    return llama_reference(SIZES, seed, mistral, **options)


def hf_greedy(model: Any, prompt: list[int], new: int) -> list[int]:
    """``transformers``' greedy tokens, checked to have no near-ties (so float rounding cannot flip one)."""
    tokens: list[int] = greedy_tokens(model, [prompt], new, min_gap=1e-4)[0].tolist()
    return tokens


def hf_logits(model: Any, prompt: list[int]) -> np.ndarray:
    """``transformers``' logits of the prompt's last position (those that choose the first new token)."""
    with torch.no_grad():
        return np.asarray(model(torch.tensor([prompt])).logits[0, -1].numpy())


def last_logits(binary: Path, tools: dict[str, str], prompt: list[int], *extra: str) -> np.ndarray:
    """The program's logits of the prompt's last position (``--logits``)."""
    path = binary.parent / "logits.bin"
    args = ("--tokens", " ".join(map(str, prompt)), "--max-new-tokens", "1", "--logits", str(path), *extra)
    done = run(binary, tools, *args)
    assert done.returncode == 0, done.stderr
    return np.fromfile(path, dtype="<f4")


def program_tokens(binary: Path, tools: dict[str, str], prompt: list[int], new: int, *extra: str) -> list[int]:
    tokens: list[int] = run_tokens(binary, tools, "--tokens", " ".join(map(str, prompt)), "--max-new-tokens",
                                   str(new), *extra)  # fmt: skip
    return tokens


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference relative to the largest logit."""
    return float(np.abs(got - want).max() / np.abs(want).max())


def rms_error(got: np.ndarray, want: np.ndarray) -> float:
    """The root mean square of the differences relative to that of the logits."""
    return float(np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want**2)))


@pytest.fixture(scope="module")
def llama() -> Any:
    return reference()


@pytest.fixture(scope="module")
def programs(llama: Any, tools: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The GQA Llama's programs: float32 and both block formats, decode steps of 16 and 32 cache slots,
    prompts in prefill steps of 4 tokens."""
    out = {}
    for fmt in ("float32", *FORMATS):
        directory = tmp_path_factory.mktemp(f"llama-{fmt}") / "program"
        quantize = None if fmt == "float32" else fmt
        exported = export_program(llama.config, llama.state_dict(), directory, quantize=quantize, prefill_chunk=4,
                                  smaller_caches=[16])  # fmt: skip
        assert exported.program == "generate"
        build(directory, tools)
        out[fmt] = exported.binary
    return out


def test_greedy_tokens_and_logits_are_those_of_transformers(
    llama: Any, programs: dict[str, Path], tools: dict[str, str]
) -> None:
    binary = programs["float32"]
    for prompt in PROMPTS:
        want = hf_greedy(llama, prompt, NEW)
        assert len(set(want)) > 3  # not one token repeated
        assert program_tokens(binary, tools, prompt, NEW) == want
        assert program_tokens(binary, tools, prompt, NEW, "--prefill", "0") == want
        reference_logits = hf_logits(llama, prompt)
        for extra in ((), ("--prefill", "0")):
            assert relative_error(last_logits(binary, tools, prompt, *extra), reference_logits) < 1e-5
    model_c = (binary.parent / "model.c").read_text()
    for symbol in ("slots16_evaluate", "slots16_chunk4_evaluate", "slots32_evaluate", "slots32_chunk4_evaluate"):
        assert f"int mithril_{symbol}(const" in model_c
    longest = [7] * 21  # 21 + 12 - 1 = 32: every slot of the largest step
    assert program_tokens(binary, tools, longest, NEW) == hf_greedy(llama, longest, NEW)
    done = run(binary, tools, "--tokens", " ".join(["7"] * 22), "--max-new-tokens", str(NEW))
    assert done.returncode == 2 and "needs 33 positions" in done.stderr


def test_caches_hold_the_key_value_heads_only(llama: Any, programs: dict[str, Path]) -> None:
    tensors = {t.name: t for t in read_weights(programs["float32"].parent / "weights.bin")}
    assert tensors["past_key_0"].shape == (1, 2, 32, 16)  # 2 key-value heads of 16, not 4 query heads
    assert tensors["model.layers.1.self_attn.k_proj.weight"].shape == (32, 64)
    state = llama.state_dict()
    np.testing.assert_array_equal(tensors["lm_head.weight"].data, state["lm_head.weight"].numpy())
    header = (programs["float32"].parent / "program.h").read_text()
    assert "#define MTP_SLOT_ELEMS 32 " in header and "#define MTP_VOCAB 100" in header


def _ggml_decode(llama: Any, fmt: str, prompt: list[int]) -> np.ndarray:
    """The last logits of ``prompt`` fed token by token to the program's decode step (32 slots) on the GGML
    backend compiled with ``quantize=fmt``."""
    config = LlamaConfig.from_hf(llama.config)
    step = LlamaDecodeStep(config, 1, 32)
    return ggml_decode(step, config.num_hidden_layers, [1, 2, 32, 16], llama.state_dict(), fmt, prompt)


def dequantized(model: Any, tensors: list[Any], fmt: str) -> Any:
    """A copy of ``model`` whose weights are the block-quantized ones of ``tensors`` (``weights.bin``),
    dequantized by the C backend's kernel API."""
    from mithril_backend_c import kernels

    quantized = {t.name: t for t in tensors if t.quant}
    copy = deepcopy(model)
    with torch.no_grad():
        for name, parameter in copy.named_parameters():
            if name in quantized:
                t = quantized[name]
                parameter.copy_(torch.from_numpy(np.asarray(kernels.dequantize(t.data, fmt, t.shape), np.float32)))
    return copy


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_programs(llama: Any, programs: dict[str, Path], tools: dict[str, str], fmt: str) -> None:
    """Every projection, the embeddings and the head block-quantized (the norms float32): the logits those
    of ``transformers`` on the dequantized weights up to the activations' q8_0 rounding and, token by token,
    bit for bit those of the GGML backend with the same quantization."""
    binary, prompt = programs[fmt], [*PROMPTS[0], *PROMPTS[2]]  # 15 tokens: the 16-slot step
    tensors = read_weights(binary.parent / "weights.bin")
    quantized = sorted(t.name for t in tensors if t.quant)
    assert quantized == sorted(t.name for t in tensors if t.name.endswith("_proj.weight") or t.name in (
        "model.embed_tokens.weight", "lm_head.weight"))  # fmt: skip
    assert all(t.quant == fmt for t in tensors if t.quant)
    ours = last_logits(binary, tools, prompt, "--prefill", "0")
    assert rms_error(ours, hf_logits(dequantized(llama, tensors, fmt), prompt)) < 0.03
    error = rms_error(ours, last_logits(programs["float32"], tools, prompt))  # 0.025 (q8_0), 0.36 (q4_0)
    assert 1e-6 < error < (0.05 if fmt == "q8_0" else 0.5)
    chunked = last_logits(binary, tools, prompt)  # the prefill steps: the same products, row by row
    np.testing.assert_allclose(chunked, ours, rtol=1e-3, atol=1e-3 * np.abs(ours).max())
    pytest.importorskip("ggml")
    np.testing.assert_array_equal(ours, _ggml_decode(llama, fmt, prompt))


@pytest.mark.parametrize(
    "variant",
    [
        {"mistral": True, "sliding_window": 4},
        {"num_key_value_heads": 1, "tie_word_embeddings": True, "attention_bias": True, "rope_scaling": LLAMA3,
         "rope_theta": 500000.0},
    ],
    ids=["mistral-window-4", "mqa-tied-bias-llama3-rope"],
)  # fmt: skip
def test_variants_generate_the_tokens_of_transformers(
    variant: dict[str, Any], tools: dict[str, str], tmp_path: Path
) -> None:
    model = reference(seed=1, **variant)
    folder = tmp_path / "checkpoint"
    model.save_pretrained(folder)  # tied: no lm_head.weight in the file
    config = json.loads((folder / "config.json").read_text())
    exported = export_program(config, folder / "model.safetensors", tmp_path / "program", prefill_chunk=4)
    build(exported.directory, tools)
    prompt = PROMPTS[0]
    assert program_tokens(exported.binary, tools, prompt, NEW) == hf_greedy(model, prompt, NEW)
    assert relative_error(last_logits(exported.binary, tools, prompt), hf_logits(model, prompt)) < 1e-5


def test_config_forms_give_the_same_model(llama: Any) -> None:
    sizes = {k: v for k, v in SIZES.items() if not k.endswith("token_id")}
    forms = [llama.config, llama.config.to_dict(), LlamaConfig.from_hf(llama.config), {"family": "llama", **sizes}]
    shapes = [resolve_model(form, cache_len=8)[1].shapes for form in forms]
    assert all(s == shapes[0] for s in shapes) and shapes[0]["past_value_1"] == [1, 2, 8, 16]
    assert resolve_model(llama.config)[1].shapes["past_key_0"] == [1, 2, 32, 16]  # default: every position
    mistral = resolve_model({"family": "mistral", **sizes, "sliding_window": 4}, cache_len=8)[1]
    assert mistral.model.config.model_type == "mistral" and mistral.model.config.sliding_window == 4
    with pytest.raises(ValueError, match=r"cache_len must be an int in 1..max_position_embeddings=32, got 33"):
        resolve_model(llama.config, cache_len=33)


def test_cli_export_model_of_a_checkpoint_folder(llama: Any, tools: dict[str, str], tmp_path: Path) -> None:
    from mithril.cli import main

    folder = tmp_path / "checkpoint"
    llama.save_pretrained(folder)
    out = tmp_path / "out"
    args = ["export-model", "--config", str(folder / "config.json"), "--weights", str(folder), "--out", str(out)]
    assert main([*args, "--cache-len", "24"]) == 0
    build(out, tools)
    prompt = PROMPTS[1]
    assert program_tokens(out / "generate", tools, prompt, NEW) == hf_greedy(llama, prompt, NEW)
    assert read_weights(out / "weights.bin")[-1].shape == (1, 2, 24, 16)


@pytest.mark.slow
def test_llama_of_100m_parameters_generates_the_tokens_of_transformers(tools: dict[str, str], tmp_path: Path) -> None:
    """The ~100M-parameter Llama of ``bench/generate.py`` (8 layers of 768, 12 heads, 4 key-value heads)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
        num_key_value_heads=4, max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    exported = export_program(config, model.state_dict(), tmp_path / "llama", cache_len=64)
    build(exported.directory, tools)
    prompt = [464, 3290, 318, 257, 1049, 12]
    assert program_tokens(exported.binary, tools, prompt, 8) == hf_greedy(model, prompt, 8)
    assert relative_error(last_logits(exported.binary, tools, prompt), hf_logits(model, prompt)) < 1e-4
    assert exported.weights_bytes >= 99_000_000 * 4
