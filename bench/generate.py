"""Generation speed: ``Pretrained.generate`` (``mithril_models.generate``) against ``transformers.generate``
(PyTorch, KV cache) on the same random weights, in one process:

1. tokens/s for GPT-2 small (``GPT2Config()``), T5-small (``T5Config`` of t5-small's sizes) and a Llama of
   ~100M parameters (GQA), greedy and 4 beams, batch 1 and 8, on Mithril PyTorch and JAX: the ratio is
   Mithril's tokens/s over ``transformers``' (target >= 1.0); the tokens must be identical;
2. T5 on JAX: the latency of the first token on the first call (the encoder, the cross caches and the one
   decoder step compiled) and on later calls, against ``transformers``' first token (a streamer's time
   stamps), and how many decoder steps were compiled (target: one for every position, no re-tracing per
   token);
3. prefill: a 128-token prompt processed by the compiled prefill step (chunks of 64 tokens) against
   token by token (``prefill_chunk=1``), GPT-2 small on NumPy and PyTorch (target >= 5x faster).

Each model is saved with ``save_pretrained`` into a temporary folder and opened with ``from_pretrained``.
The machine is shared: run ``uptime`` next to it and read the ratios, not the absolute rates. The last
lines list every ratio with its target and whether it was met (``OK``/``MISSED``).

    [BENCH_THREADS=2] python bench/generate.py [--models gpt2,t5,llama] [--backends torch,jax] [--new 24]
                                               [--rounds 3] [--skip-speed] [--skip-latency] [--skip-prefill]
                                               [--quick]

``--quick``: 8 new tokens, one timed round (the same rows, noisier figures).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

THREADS = int(os.environ.get("BENCH_THREADS", "2"))
"""Threads of every implementation (``BENCH_THREADS``): on a loaded 2-core machine, 2 OpenMP threads per
process spin against the other jobs and both PyTorch implementations slow down by 5-10x; 1 is steadier."""
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))

from _timing import SETTLE_SECONDS  # noqa: E402

PROMPT = 16
CASES = [(1, 1), (1, 4), (8, 1), (8, 4)]
"""(batch, num_beams)."""
VERDICTS: list[str] = []
"""One line per measured figure with a target, printed again at the end (:func:`verdict`)."""


def verdict(label: str, value: str, met: bool, target: str) -> str:
    """``"OK"`` or ``"MISSED"``, recording ``label: value (target ...: OK)`` for the summary."""
    word = "OK" if met else "MISSED"
    VERDICTS.append(f"{label:<52} {value:>10}   target {target:<8} {word}")
    return word


def _reference(name: str):
    """The ``transformers`` model (random weights, eval mode, no end-of-sequence id)."""
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    if name == "gpt2":
        config = transformers.GPT2Config()
        model = transformers.GPT2LMHeadModel(config)
    elif name == "t5":
        config = transformers.T5Config(
            d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_heads=8, vocab_size=32128, decoder_start_token_id=0
        )
        model = transformers.T5ForConditionalGeneration(config)
    else:  # ~100M parameters: 8 layers of 768, grouped-query attention (4 key-value heads), untied head
        config = transformers.LlamaConfig(
            vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
            num_key_value_heads=4, max_position_embeddings=512,
        )  # fmt: skip
        model = transformers.LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.generation_config.decoder_start_token_id = 0 if name == "t5" else None
    return model.eval()


def _backend(name: str):
    import mithril as ml

    return {"torch": lambda: ml.TorchBackend(dtype=ml.float32), "jax": lambda: ml.JaxBackend(dtype=ml.float32),
            "numpy": lambda: ml.NumpyBackend(dtype=ml.float32)}[name]()  # fmt: skip


def _prompts(vocab: int, batch: int) -> list[list[int]]:
    """``batch`` prompts of ``PROMPT - i % 4`` tokens (a padded batch, as real ones are)."""
    rng = np.random.default_rng(batch)
    return [rng.integers(1, vocab, PROMPT - i % 4).tolist() for i in range(batch)]


def _alternating(fns: dict[str, object], rounds: int) -> dict[str, float]:
    """Median seconds of each function, the functions alternating round by round (noise hits all alike)."""
    samples: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            time.sleep(SETTLE_SECONDS)
            started = time.perf_counter()
            fn()
            samples[label].append(time.perf_counter() - started)
    return {label: statistics.median(values) for label, values in samples.items()}


def saved_pretrained(model: Any, name: str) -> str:
    """A temporary folder holding ``model.save_pretrained``, removed when the bench exits (GPT-2 small's
    weights are 475 MiB; each run used to leave them behind)."""
    folder = tempfile.mkdtemp(prefix=f"bench-generate-{name}-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    model.save_pretrained(folder)
    return folder


def speed_section(names: list[str], backends: list[str], new: int, rounds: int) -> None:
    from mithril_models import from_pretrained
    from mithril_models.testing import transformers_generate

    for name in names:
        model = _reference(name)
        folder = saved_pretrained(model, name)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        print(
            f"\n{name} ({params:.0f}M parameters), {PROMPT}-token prompts, {new} new tokens "
            "(tokens/s, higher is better)"
        )
        opened = {}
        for backend in backends:
            started = time.perf_counter()
            opened[backend] = from_pretrained(folder, _backend(backend))
            print(f"  Mithril {backend}: from_pretrained {time.perf_counter() - started:.2f} s")
        for batch, beams in CASES:
            rows = _prompts(model.config.vocab_size, batch)
            want = transformers_generate(model, rows, max_new_tokens=new, min_new_tokens=new, num_beams=beams)
            fns = {
                "transformers.generate": lambda m=model, r=rows, b=beams: transformers_generate(
                    m, r, max_new_tokens=new, min_new_tokens=new, num_beams=b
                )
            }
            same = {}
            for backend, pretrained in opened.items():
                started = time.perf_counter()
                got = pretrained.generate(rows, max_new_tokens=new, num_beams=beams)
                first = time.perf_counter() - started
                same[backend] = (bool(np.array_equal(got, want)), first)
                fns[f"Mithril {backend}"] = lambda p=pretrained, r=rows, b=beams: p.generate(
                    r, max_new_tokens=new, num_beams=b
                )
            times = _alternating(fns, rounds)
            base = batch * new / times["transformers.generate"]
            label = f"batch {batch}, {'greedy' if beams == 1 else f'{beams} beams'}"
            print(f"  {label}:")
            for impl, seconds in times.items():
                rate = batch * new / seconds
                extra = ""
                if impl != "transformers.generate":
                    identical, first = same[impl.split()[-1]]
                    word = verdict(f"{name} {impl.split()[-1]} {label}: tokens/s ratio", f"{rate / base:.2f}",
                                   rate / base >= 1.0 and identical, ">= 1.00")  # fmt: skip
                    extra = f"  (target >= 1.00: {word}; tokens identical: {identical}; first call {first:.2f} s)"
                print(f"    {impl:<24} {rate:9.1f} tokens/s   ratio {rate / base:5.2f}{extra}")


class _Stamps:
    """A ``transformers`` streamer that keeps the time of every new token (its first ``put`` is the
    decoder's start token, not a generated one)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.calls = 0

    def put(self, _: object) -> None:
        self.calls += 1
        if self.calls > 1:
            self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def _hf_first_token(model, rows: list[list[int]], new: int) -> float:
    """Seconds to ``transformers``' first new token (T5, greedy)."""
    import torch

    stamps = _Stamps()
    started = time.perf_counter()
    with torch.no_grad():
        model.generate(torch.tensor(rows), max_new_tokens=new, do_sample=False, pad_token_id=0, streamer=stamps)
    return stamps.times[0] - started


def latency_section(new: int) -> None:
    """T5-small on JAX: first-token latency on the first (compiling) and later calls against
    ``transformers``' (PyTorch), and how many decoder steps were compiled."""
    from mithril_models import from_pretrained
    from mithril_models.generation import decoders

    model = _reference("t5")
    folder = saved_pretrained(model, "t5-latency")
    t5 = from_pretrained(folder, _backend("jax"))
    rows = _prompts(model.config.vocab_size, 1)
    print(f"\nT5-small on JAX, one {PROMPT}-token prompt, {new} new tokens")
    latencies = []
    for call in ("first call (compiles)", "second call", "third call"):
        stamps: list[float] = []
        time.sleep(SETTLE_SECONDS)
        started = time.perf_counter()
        t5.generate(rows, max_new_tokens=new, on_token=lambda _, s=stamps: s.append(time.perf_counter()))
        total = time.perf_counter() - started
        rate = (new - 1) / (stamps[-1] - stamps[0])
        latencies.append(stamps[0] - started)
        print(f"  {call:<22} first token {1e3 * latencies[-1]:8.1f} ms, then {rate:7.1f} tokens/s "
              f"(whole call {total:.2f} s)")  # fmt: skip
    _hf_first_token(model, rows, new)  # warm-up
    time.sleep(SETTLE_SECONDS)
    theirs = statistics.median(_hf_first_token(model, rows, new) for _ in range(3))
    ours = min(latencies[1:])
    print(f"  transformers.generate  first token {1e3 * theirs:8.1f} ms (PyTorch, median of 3); Mithril JAX later "
          f"calls / transformers: {ours / theirs:.2f} (reported, no target)")  # fmt: skip
    steps = next(iter(decoders._STEPS[t5.models["decoder"]].values()))
    count = len(steps._steps)
    word = verdict("t5 jax: decoder steps compiled for all positions", str(count), count == 1, "1")
    print(f"  decoder steps compiled: {count} for all {new} positions (target 1: {word})")


def prefill_section(backends: list[str], rounds: int) -> None:
    """A 128-token prompt: chunked prefill (64 tokens per call) against one token per call, GPT-2 small."""
    from mithril_models import from_pretrained

    model = _reference("gpt2")
    folder = saved_pretrained(model, "prefill")
    rows = np.random.default_rng(5).integers(0, model.config.vocab_size, (1, 128))
    print("\nGPT-2 small prefill of a 128-token prompt (generate with max_new_tokens=1)")
    for backend in backends:
        gpt = from_pretrained(folder, _backend(backend))
        chunked = gpt.generate(rows, max_new_tokens=1)
        stepped = gpt.generate(rows, max_new_tokens=1, prefill_chunk=1)
        times = _alternating(
            {
                "token by token": lambda g=gpt: g.generate(rows, max_new_tokens=1, prefill_chunk=1),
                "chunks of 64": lambda g=gpt: g.generate(rows, max_new_tokens=1),
            },
            rounds,
        )
        speedup = times["token by token"] / times["chunks of 64"]
        same = bool(np.array_equal(chunked, stepped))
        word = verdict(
            f"gpt2 {backend}: prefill speedup (128 tokens)", f"{speedup:.1f}x", speedup >= 5 and same, ">= 5x"
        )
        print(f"  {backend}: token by token {times['token by token'] * 1e3:8.1f} ms, chunks of 64 "
              f"{times['chunks of 64'] * 1e3:8.1f} ms, speedup {speedup:5.1f}x (target >= 5: {word}); "
              f"same token: {same}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gpt2,t5,llama")
    parser.add_argument("--backends", default="torch,jax")
    parser.add_argument("--new", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-prefill", action="store_true")
    parser.add_argument("--quick", action="store_true", help="8 new tokens, one timed round")
    args = parser.parse_args()
    if args.quick:
        args.new, args.rounds = 8, 1
    backends = [b for b in args.backends.split(",") if b]
    if not args.skip_speed:
        speed_section([m for m in args.models.split(",") if m], backends, args.new, args.rounds)
    if not args.skip_latency:
        latency_section(args.new)
    if not args.skip_prefill:
        prefill_section(["numpy", "torch"], args.rounds)
    met = sum(line.endswith(" OK") for line in VERDICTS)
    print(f"\nSummary: {met} of {len(VERDICTS)} targets met (ratios need identical tokens to count)")
    for line in VERDICTS:
        print(f"  {line}")


if __name__ == "__main__":
    main()
