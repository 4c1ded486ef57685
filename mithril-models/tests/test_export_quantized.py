"""``export_program(quantize=..., prefill_chunk=...)``: block-quantized weights (ggml's q8_0 / q4_0) in the
standalone programs, the same bits as the GGML backend running the program's decode steps with the same
quantization, and the prompt processed in prefill steps with the tokens of token-by-token decoding."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _export_helpers import build, ggml_decode, numpy_gpt, random_state, run, run_tokens
from _hf_references import gpt2_reference
from mithril_models import export_program, generate, load_hf
from mithril_models.export import read_weights, resolve_model
from mithril_models.export.weights import Tensor
from mithril_models.gpt.config import config_from_hf
from mithril_models.gpt.decode import GPTDecodeStep

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")

FORMATS = ("q8_0", "q4_0")
LONG = [42, 31, 25, 13, 15, 7, 9, 11, 3, 8, 21, 5, 17]  # 13 tokens: chunks of 4 at 0, 4, 8 and 9 (overlapping)


@pytest.fixture(scope="module")
def gpt() -> Any:
    return gpt2_reference()


@pytest.fixture(scope="module")
def programs(gpt: Any, tools: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Programs of the 2-layer GPT: float32 and both formats, prompts in prefill steps of 4 tokens."""
    out = {}
    for fmt in ("float32", *FORMATS):
        directory = tmp_path_factory.mktemp(fmt) / "program"
        quantize = None if fmt == "float32" else fmt
        export_program(gpt.config, gpt.state_dict(), directory, quantize=quantize, prefill_chunk=4)
        build(directory, tools)
        out[fmt] = directory / "generate"
    return out


def last_logits(binary: Path, tools: dict[str, str], prompt: list[int], *extra: str) -> np.ndarray:
    path = binary.parent / "logits.bin"
    done = run(binary, tools, "--tokens", " ".join(map(str, prompt)), "--max-new-tokens", "1", "--logits", str(path),
               *extra)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return np.fromfile(path, dtype="<f4")


def test_prefill_steps_give_the_tokens_of_generate(gpt: Any, programs: dict[str, Path], tools: dict[str, str]) -> None:
    pm, params = numpy_gpt(gpt)
    binary = programs["float32"]
    for prompt in (LONG, LONG[:8], LONG[:3]):  # overlapping chunks, whole chunks, shorter than a chunk
        want = generate(pm, params, [prompt], 3, top_k=1)[0].tolist()
        assert run_tokens(binary, tools, "--tokens", " ".join(map(str, prompt)), "--max-new-tokens", "3") == want
        chunked, single = last_logits(binary, tools, prompt), last_logits(binary, tools, prompt, "--prefill", "0")
        np.testing.assert_allclose(chunked, single, rtol=1e-5, atol=1e-5 * np.abs(single).max())
    model_c = (binary.parent / "model.c").read_text()
    assert "int mithril_slots16_chunk4_evaluate(const" in model_c and "int mithril_slots16_evaluate(const" in model_c
    # the prefill steps return the last hidden state [1, 32]; the LM head alone makes the logits, once
    assert "/* output 'output': float32[1, 32] */" in (binary.parent / "model.h").read_text()
    assert "int mithril_head_evaluate(const" in model_c
    done = run(binary, tools, "--tokens", "1 2", "--prefill", "2")
    assert done.returncode == 2 and "--prefill must be 1" in done.stderr


def test_timings_line_names_each_phase(programs: dict[str, Path], tools: dict[str, str]) -> None:
    """``--timings 1``: one stderr line with the load, the prompt (and how it ran) and the decode steps,
    the tokens on stdout unchanged; any other value is refused."""
    binary, prompt = programs["q8_0"], " ".join(map(str, LONG))
    plain = run(binary, tools, "--tokens", prompt, "--max-new-tokens", "3")
    for prefill, how in (("1", "in prefill steps"), ("0", "token by token")):
        done = run(binary, tools, "--tokens", prompt, "--max-new-tokens", "3", "--prefill", prefill, "--timings", "1")
        assert done.returncode == 0 and done.stdout == plain.stdout, done.stderr
        pattern = (rf"generate: timings: load {MS}; prompt of 13 tokens {how} {MS}; 2 decode steps {MS}\n")
        assert re.fullmatch(pattern, done.stderr), done.stderr
    assert plain.stderr == ""
    done = run(binary, tools, "--tokens", prompt, "--timings", "yes")
    assert done.returncode == 2 and "--timings must be 1 (print them on stderr) or 0, got 'yes'" in done.stderr


MS = r"\d+\.\d{3} ms \(CPU \d+\.\d{3} ms\)"


def _ggml_decode(gpt: Any, fmt: str, prompt: list[int]) -> np.ndarray:
    """The last logits of ``prompt`` fed token by token to the program's decode step on the GGML backend
    compiled with ``quantize=fmt``."""
    config = config_from_hf(gpt.config)
    length = config.block_size
    cache_shape = [1, config.num_heads, length, config.head_dim]
    return ggml_decode(GPTDecodeStep(config, 1, length), config.num_layers, cache_shape, gpt.state_dict(), fmt, prompt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_program_is_the_ggml_backend_bit_for_bit(
    gpt: Any, programs: dict[str, Path], tools: dict[str, str], fmt: str
) -> None:
    pytest.importorskip("ggml")
    binary = programs[fmt]
    ours = last_logits(binary, tools, LONG, "--prefill", "0")
    np.testing.assert_array_equal(ours, _ggml_decode(gpt, fmt, LONG))
    reference_logits = last_logits(programs["float32"], tools, LONG)
    error = np.sqrt(np.mean((ours - reference_logits) ** 2)) / np.sqrt(np.mean(reference_logits**2))
    assert 1e-6 < error < (0.02 if fmt == "q8_0" else 0.2)
    chunked = last_logits(binary, tools, LONG)  # the prefill steps: the same products, row by row
    np.testing.assert_allclose(chunked, ours, rtol=1e-3, atol=1e-3 * np.abs(ours).max())


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_weights_file(gpt: Any, programs: dict[str, Path], fmt: str) -> None:
    tensors = {t.name: t for t in read_weights(programs[fmt].parent / "weights.bin")}
    floats = {t.name: t for t in read_weights(programs["float32"].parent / "weights.bin")}
    quantized = sorted(name for name, t in tensors.items() if t.quant)
    assert quantized == sorted(n for n in floats if n.endswith(".weight") and floats[n].data.ndim == 2)
    block = {"q8_0": 34, "q4_0": 18}[fmt]
    wte = tensors["transformer.wte.weight"]
    assert wte.quant == fmt and wte.shape == (50, 32) and wte.data.shape == (50, block)
    from mithril_backend_c import kernels

    values = kernels.dequantize(wte.data, fmt, wte.shape)
    original = floats["transformer.wte.weight"].data
    assert np.abs(values - original).max() <= np.abs(original).max() / (100 if fmt == "q8_0" else 6)
    with pytest.raises(ValueError, match="needs rows of whole blocks"):
        Tensor("w", np.zeros((2, 10), np.uint8), shape=(2, 32), quant=fmt)


def test_argument_errors(gpt: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quantize must be None, 'q8_0' or 'q4_0', got 'q5_0'"):
        export_program(gpt.config, gpt.state_dict(), tmp_path / "a", quantize="q5_0")
    with pytest.raises(ValueError, match="prefill_chunk must be a positive int"):
        export_program(gpt.config, gpt.state_dict(), tmp_path / "b", prefill_chunk=0)


def test_quantized_resnet_classify(tools: dict[str, str], tmp_path: Path) -> None:
    """A ResNet whose convolutions after the stem and classifier are q8_0: close to float32."""
    spec = {"family": "resnet", "block": "basic", "depths": [1, 1], "widths": [32, 32], "stem_width": 32,
            "num_classes": 10}  # fmt: skip
    _, pm = resolve_model(spec, image_size=16)
    state = random_state(pm, 0)
    exported = export_program(spec, state, tmp_path / "rn", image_size=16, quantize="q8_0")
    build(exported.directory, tools)
    quantized = [t.name for t in read_weights(exported.directory / "weights.bin") if t.quant]
    assert len(quantized) >= 4 and not any("conv1" == name.split(".")[0] for name in quantized)  # not the stem
    image = np.random.default_rng(1).normal(size=(1, 3, 16, 16)).astype(np.float32)
    image.astype("<f4").tofile(tmp_path / "image.f32")
    done = run(exported.binary, tools, str(tmp_path / "image.f32"), "--logits", str(tmp_path / "logits.f32"))
    assert done.returncode == 0, done.stderr
    got = np.fromfile(tmp_path / "logits.f32", dtype="<f4")
    want = np.asarray(pm.evaluate(load_hf(pm, state), {"input": image})["output"]).reshape(-1)
    assert np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want**2)) < 0.05
