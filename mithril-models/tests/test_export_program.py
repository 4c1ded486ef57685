"""``export_program``: GPT-2 and ResNet as standalone C programs, built with plain ``cc`` by a PATH that
holds the compiler tools only and run with a PATH that holds nothing (no Python anywhere). Random
weights; the references are ``mithril_models.generate`` / evaluate on the NumPy backend and
``transformers``' greedy generate."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.errors import BackendNotAvailableError
from transformers import GPT2LMHeadModel

from _export_helpers import build, numpy_gpt, random_state, run, run_tokens
from _hf_references import gpt2_reference, greedy_tokens
from mithril_models import export_program, generate, load_hf, save_safetensors
from mithril_models.export import read_weights, resolve_model
from mithril_models.export.weights import INPUT, Tensor, write_weights
from mithril_models.resnet import resnet18

PROMPT = [42, 31, 25, 13, 15]
NEW = 11  # 5 + 11 - 1 = 15 of the 16 cache slots

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


@pytest.fixture(scope="module")
def gpt() -> GPT2LMHeadModel:
    return gpt2_reference()


@pytest.fixture(scope="module")
def gpt_program(gpt: GPT2LMHeadModel, tools: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpt") / "program"
    exported = export_program(gpt.config, gpt.state_dict(), out)
    assert exported.program == "generate" and exported.binary == out / "generate"
    build(out, tools)
    return out / "generate"


def test_greedy_tokens_are_those_of_generate_and_transformers(
    gpt: GPT2LMHeadModel, gpt_program: Path, tools: dict[str, str]
) -> None:
    got = run_tokens(gpt_program, tools, "--tokens", " ".join(map(str, PROMPT)), "--max-new-tokens", str(NEW))
    pm, params = numpy_gpt(gpt)
    ours = generate(pm, params, [PROMPT], NEW, top_k=1)[0].tolist()
    theirs = greedy_tokens(gpt, [PROMPT], NEW, min_gap=1e-3)[0].tolist()  # no near-ties
    assert len(set(theirs)) > 3  # not one token repeated
    assert got == ours == theirs
    # the weights file is found next to the program and by --weights; a prompt filling the cache works
    weights = str(gpt_program.parent / "weights.bin")
    again = run_tokens(gpt_program, tools, "--tokens", "7,31", "--max-new-tokens", "15", "--weights", weights)
    assert again == generate(pm, params, [[7, 31]], 15, top_k=1)[0].tolist()
    assert run(gpt_program, tools, "--tokens", "3", "--max-new-tokens", "0").stdout == "\n"


def test_seeded_top_k_is_reproducible_and_samples_among_the_k_most_likely(
    gpt: GPT2LMHeadModel, gpt_program: Path, tools: dict[str, str]
) -> None:
    def sample(seed: int, k: int = 3) -> list[int]:
        args = ("--tokens", "1 2 3", "--max-new-tokens", "12", "--top-k", str(k), "--seed", str(seed))
        return run_tokens(gpt_program, tools, *args)

    first = sample(5)
    assert first == sample(5)
    assert len({tuple(sample(seed)) for seed in range(6)}) > 1
    sequence = [1, 2, 3, *first]
    with torch.no_grad():
        logits = gpt(torch.tensor([sequence])).logits[0, 2 : 2 + len(first)]
    ranks = (logits > logits.gather(1, torch.tensor(first)[:, None])).sum(-1)
    assert ranks.max().item() < 3, f"ranks of the sampled tokens: {ranks.tolist()}"
    assert len(set(sample(9, k=50))) > 3  # the full distribution: many tokens


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tokens", "1 50"], "token id 50 (token 1) is out of range 0..49"),
        (["--tokens", "1 -1"], "token id -1"),
        (["--tokens", "1 x2"], "'x2' (token 1) is not an integer"),
        (["--tokens", "99999999999999999999"], "not an integer"),
        (["--tokens", " "], "no token ids"),
        (["--max-new-tokens", "3"], "--tokens"),
        (["--tokens", "1", "--max-new-tokens", "17"], "0..16"),
        (["--tokens", "1 2 3 4 5", "--max-new-tokens", "13"], "needs 17 positions, the export's cache holds 16"),
        (["--tokens", " ".join(["1"] * 17)], "more than 16 tokens"),
        (["--tokens", "1", "--top-k", "0"], "--top-k"),
        (["--tokens", "1", "--top-k", "51"], "--top-k"),
        (["--tokens", "1", "--temperature", "-1"], "--temperature"),
        (["--tokens", "1", "--threads", "0"], "--threads"),
        (["--tokens", "1", "--unknown", "1"], "unknown option '--unknown'"),
        (["--tokens"], "--tokens needs a value"),
        (["--tokens", "1", "--max-new-tokens", "2", "--weights", "/nonexistent/w.bin"], "cannot open"),
    ],
)
def test_bad_arguments_exit_with_one_line(
    gpt_program: Path, tools: dict[str, str], args: list[str], message: str
) -> None:
    done = run(gpt_program, tools, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("generate: ") and message in done.stderr


def damaged_files(directory: Path, tmp: Path) -> dict[str, tuple[Path, str]]:
    """Weights files a program must refuse, with the words of its message."""
    good = (directory / "weights.bin").read_bytes()
    cases: dict[str, tuple[bytes, str]] = {
        "empty": (b"", "shorter than its 64-byte header"),
        "truncated": (good[: len(good) - 64], "truncated"),
        "not weights": (b"x" * 4096, "does not start with MTWEIGHT"),
        "flipped bit": (good[:-8] + bytes([good[-8] ^ 1]) + good[-7:], "checksum"),
    }
    tensors = read_weights(directory / "weights.bin")
    other = [tensors[0], Tensor(tensors[1].name, np.zeros((3, *tensors[1].shape[1:]), np.float32)), *tensors[2:]]
    paths = {}
    for name, (data, words) in cases.items():
        paths[name] = (tmp / f"{name}.bin", words)
        paths[name][0].write_bytes(data)
    shape = ", ".join(map(str, other[1].shape))
    paths["wrong shape"] = (tmp / "shape.bin", f"tensor '{tensors[1].name}' has shape [{shape}]")
    write_weights(paths["wrong shape"][0], other)
    renamed = [Tensor("other.name", np.asarray(tensors[0].data)), *tensors[1:]]
    paths["wrong name"] = (tmp / "name.bin", "named 'other.name'")
    write_weights(paths["wrong name"][0], renamed)
    paths["fewer tensors"] = (tmp / "fewer.bin", f"holds {len(tensors) - 1} tensors")
    write_weights(paths["fewer tensors"][0], tensors[:-1])
    return paths


def test_damaged_or_foreign_weights_are_refused(gpt_program: Path, tools: dict[str, str], tmp_path: Path) -> None:
    for name, (path, words) in damaged_files(gpt_program.parent, tmp_path).items():
        done = run(gpt_program, tools, "--tokens", "1", "--max-new-tokens", "2", "--weights", str(path))
        assert done.returncode == 2 and done.stdout == "", name
        assert done.stderr.count("\n") == 1 and words in done.stderr, (name, done.stderr)


def test_weights_file_holds_the_parameters_with_header_and_inputs(gpt: GPT2LMHeadModel, gpt_program: Path) -> None:
    tensors = {t.name: t for t in read_weights(gpt_program.parent / "weights.bin")}
    state = gpt.state_dict()
    np.testing.assert_array_equal(tensors["transformer.wte.weight"].data, state["transformer.wte.weight"].numpy())
    c_attn = state["transformer.h.1.attn.c_attn.weight"].numpy().T  # HF Conv1D stores [in, out]
    np.testing.assert_array_equal(tensors["transformer.h.1.attn.c_attn.weight"].data, c_attn)
    assert tensors["input"].role == INPUT and tensors["input"].shape == (1, 1)
    assert tensors["past_key_0"].shape == (1, 4, 16, 8)
    data = [t for t in tensors.values() if t.data is not None]
    assert all(t.data.ctypes.data % 64 == 0 for t in data)  # aligned in the mapped file


def test_programs_have_no_writable_globals(gpt_program: Path) -> None:
    """Reentrant: no object file of the program defines writable data (nm's B/D/b/d/C symbols)."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs nm")
    objects = sorted(gpt_program.parent.glob("*.o"))
    assert {o.name for o in objects} >= {"main.o", "model.o"}
    for obj in objects:
        listing = subprocess.run([nm, str(obj)], capture_output=True, text=True, check=True).stdout
        writable = [line for line in listing.splitlines() if line.split()[-2:-1] and line.split()[-2] in "BDbdCGgSs"]
        assert writable == [], f"{obj.name}: {writable}"


def test_make_builds_the_same_program(gpt: GPT2LMHeadModel, tools: dict[str, str], tmp_path: Path) -> None:
    if not (Path(tools["build"]) / "make").exists():
        pytest.skip("needs make")
    config = {"family": "gpt2", **_builder_options(gpt)}
    exported = export_program(config, gpt.state_dict(), tmp_path / "p", cache_len=8)
    env = {"PATH": tools["build"], "HOME": str(tmp_path)}
    done = subprocess.run(["make", "-C", str(exported)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    tokens = run_tokens(exported.binary, tools, "--tokens", "4 5 6", "--max-new-tokens", "6")
    pm, params = numpy_gpt(gpt)
    assert tokens == generate(pm, params, [[4, 5, 6]], 6, top_k=1)[0].tolist()
    done = run(exported.binary, tools, "--tokens", "4 5 6", "--max-new-tokens", "7")
    assert done.returncode == 2 and "the export's cache holds 8" in done.stderr


def test_steps_for_smaller_caches_share_kernels_and_give_the_same_tokens(
    gpt: GPT2LMHeadModel, tools: dict[str, str], tmp_path: Path
) -> None:
    """A program with decode steps of 4, 8 and 16 cache slots runs the smallest that holds the prompt and
    the new tokens: the tokens are those of generate at every boundary (4, 5, 8, 9, 15 positions)."""
    exported = export_program(gpt.config, gpt.state_dict(), tmp_path / "steps", smaller_caches=(8, 4), prefill_chunk=1)
    one = export_program(gpt.config, gpt.state_dict(), tmp_path / "one", smaller_caches=(), prefill_chunk=1)
    model_c, single = (exported.directory / "model.c").read_text(), (one.directory / "model.c").read_text()
    assert [f"int mithril_slots{n}_evaluate(const" in model_c for n in (4, 8, 16)] == [True, True, True]
    assert "int mithril_slots16_evaluate(const" in single and "mithril_slots8" not in single
    kernels, alone = model_c.count("\nMT_KERNEL "), single.count("\nMT_KERNEL ")
    assert alone < kernels < 2 * alone  # the weight products, layer norms, ... are defined once
    build(exported.directory, tools)
    pm, params = numpy_gpt(gpt)
    for prompt, new in [([3], 4), ([3], 5), ([3, 4], 7), ([42, 31, 25, 13], 6), ([42, 31, 25, 13, 15], 11)]:
        got = run_tokens(exported.binary, tools, "--tokens", " ".join(map(str, prompt)), "--max-new-tokens", str(new))
        assert got == generate(pm, params, [prompt], new, top_k=1)[0].tolist(), (prompt, new)
    assert (
        "the export's cache holds 16" in run(exported.binary, tools, "--tokens", "1 2", "--max-new-tokens", "16").stderr
    )
    with pytest.raises(ValueError, match=r"smaller_caches must be ints in 1..15 \(below cache_len=16\), got \[16\]"):
        export_program(gpt.config, gpt.state_dict(), tmp_path / "bad", smaller_caches=(4, 16))


def test_build_targets_this_cpu_unless_told_otherwise(
    gpt: GPT2LMHeadModel, tools: dict[str, str], tmp_path: Path
) -> None:
    """build.sh adds -march=native when the compiler takes it and its program runs (not cross-compiling);
    ARCH= leaves it out, ARCH=... replaces it; CFLAGS replaces the default -O3."""
    exported = export_program(gpt.config, gpt.state_dict(), tmp_path / "p", cache_len=4)
    env = {"PATH": tools["build"], "HOME": str(tmp_path)}

    def flags(**extra: str) -> str:
        done = subprocess.run(
            ["/bin/sh", "build.sh"], cwd=exported.directory, env={**env, **extra}, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split("CFLAGS: ")[1].split(";")[0]

    native = subprocess.run(
        [tools["build"] + "/cc", "-march=native", "-E", "-x", "c", "/dev/null"], capture_output=True, env=env
    )
    plain = "-O3 -fno-math-errno"
    assert flags() in ({f"{plain} -march=native"} if native.returncode == 0 else {plain, f"{plain} -mcpu=native"})
    assert flags(ARCH="") == plain
    # warning-free without OpenMP too (its pragmas vanish)
    assert flags(CFLAGS="-O1 -Werror", ARCH="-mtune=generic", MITHRIL_OPENMP="0") == "-O1 -Werror -mtune=generic"
    pm, params = numpy_gpt(gpt)  # the last build (-O1, a generic CPU, no OpenMP) still gives generate's tokens
    tokens = run_tokens(exported.binary, tools, "--tokens", "4 5", "--max-new-tokens", "3")
    assert tokens == generate(pm, params, [[4, 5]], 3, top_k=1)[0].tolist()


def _builder_options(model: GPT2LMHeadModel) -> dict[str, Any]:
    c = model.config
    return {"bias": True, "block_size": c.n_positions, "dims": c.n_embd, "num_heads": c.n_head,
            "num_layers": c.n_layer, "vocab_size": c.vocab_size}  # fmt: skip


def test_config_forms_give_the_same_model(gpt: GPT2LMHeadModel) -> None:
    forms = [gpt.config, gpt.config.to_dict(), {"family": "gpt2", **_builder_options(gpt)}]
    shapes = [resolve_model(form, cache_len=4)[1].shapes for form in forms]
    assert shapes[0] == shapes[1] == shapes[2] and shapes[0]["past_key_0"] == [1, 4, 4, 8]
    with pytest.raises(ValueError, match="unknown family 'bert'"):
        resolve_model({"family": "bert"})
    with pytest.raises(ValueError, match="model_type 'bert'"):
        resolve_model({"model_type": "bert"})
    with pytest.raises(ValueError, match=r"cache_len must be an int in 1..block_size=16, got 17"):
        resolve_model(gpt.config, cache_len=17)


def test_cli_export_model(gpt: GPT2LMHeadModel, tools: dict[str, str], tmp_path: Path) -> None:
    from mithril.cli import main

    config = tmp_path / "config.json"
    config.write_text(json.dumps(gpt.config.to_dict()))
    pm, params = numpy_gpt(gpt)
    weights = tmp_path / "model.safetensors"
    save_safetensors(weights, {k: v.numpy() for k, v in gpt.state_dict().items() if not k.endswith(".attn.bias")})
    out = tmp_path / "out"
    assert main(["export-model", "--config", str(config), "--weights", str(weights), "--out", str(out)]) == 0
    build(out, tools)
    tokens = run_tokens(out / "generate", tools, "--tokens", "9 8", "--max-new-tokens", "5")
    assert tokens == generate(pm, params, [[9, 8]], 5, top_k=1)[0].tolist()
    assert main(["export-model", "--config", str(config), "--weights", str(weights), "--out", str(out)]) == 1
    quantized = tmp_path / "q8"
    args = ["--config", str(config), "--weights", str(weights), "--out", str(quantized), "--quantize", "q8_0"]
    assert main(["export-model", *args, "--prefill-chunk", "4"]) == 0
    assert (quantized / "weights.bin").stat().st_size < (out / "weights.bin").stat().st_size / 3


def resnet_check(model: Any, program: Path, tools: dict[str, str], image: np.ndarray, state: dict[str, Any]) -> None:
    """The program's logits against the NumPy backend's, within 1e-5 (relative to the largest logit)."""
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float32), shapes={"input": list(image.shape)}, inference=True)
    expected = np.asarray(pm.evaluate(load_hf(pm, state), {"input": image})["output"]).reshape(-1)
    image.astype("<f4").tofile(program.parent / "image.f32")
    logits = program.parent / "logits.f32"
    done = run(program, tools, str(program.parent / "image.f32"), "--logits", str(logits))
    assert done.returncode == 0, done.stderr
    got = np.fromfile(logits, dtype="<f4")
    assert np.abs(got - expected).max() <= 1e-5 * max(1.0, np.abs(expected).max())
    lines = [line.split() for line in done.stdout.splitlines()]
    order = np.argsort(-expected, kind="stable")[: len(lines)]
    assert [int(c) for c, _ in lines] == order.tolist() and len(lines) == min(5, expected.size)
    probabilities = np.exp(expected - expected.max()) / np.exp(expected - expected.max()).sum()
    np.testing.assert_allclose([float(s) for _, s in lines], probabilities[order], atol=2e-6)


def test_without_the_c_backend_the_error_names_the_edge_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "mithril_backend_c", None)  # as if mithril-backend-c were not installed
    with pytest.raises(BackendNotAvailableError, match=r'pip install "mithril-models\[edge\]"'):
        export_program({"family": "resnet18"}, {}, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_resnet18_classify_matches_numpy(tools: dict[str, str], tmp_path: Path) -> None:
    _, pm = resolve_model({"family": "resnet18", "num_classes": 1000}, image_size=64)
    state = random_state(pm, 0)
    exported = export_program({"family": "resnet18"}, state, tmp_path / "rn", image_size=64)
    assert exported.program == "classify"
    build(exported.directory, tools)
    image = np.random.default_rng(1).normal(size=(1, 3, 64, 64)).astype(np.float32)
    resnet_check(resnet18(), exported.binary, tools, image, state)
    assert read_weights(exported.directory / "weights.bin")[-1].shape == (1, 3, 64, 64)
    bad = tmp_path / "short.f32"
    bad.write_bytes(b"\0" * 100)
    for args, words in [
        ([str(bad)], "has 100 bytes, expected 49152: raw little-endian float32 NCHW [1, 3, 64, 64]"),
        ([], "usage: classify"),
        (["/nonexistent.f32"], "cannot open the input file"),
        ([str(bad), str(bad)], "one input file expected"),
    ]:
        done = run(exported.binary, tools, *args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    for name, (path, words) in damaged_files(exported.directory, tmp_path).items():
        done = run(exported.binary, tools, str(bad), "--weights", str(path))
        assert done.returncode == 2 and words in done.stderr, (name, done.stderr)


@pytest.mark.slow
def test_gpt2_small_sized_export_generates_the_numpy_tokens(tools: dict[str, str], tmp_path: Path) -> None:
    small = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}  # GPT-2 small
    model = gpt2_reference(small, std=0.02)
    exported = export_program(model.config, model.state_dict(), tmp_path / "gpt2", cache_len=64)
    build(exported.directory, tools)
    prompt = [464, 3290, 318, 257]
    tokens = run_tokens(exported.binary, tools, "--tokens", " ".join(map(str, prompt)), "--max-new-tokens", "8")
    with torch.no_grad():
        theirs = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0, len(prompt) :].tolist()
    assert tokens == theirs
    assert exported.weights_bytes >= 124_000_000 * 4
