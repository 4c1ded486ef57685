"""Edge deployment figures (``mithril_models.export_program``), GPT-2 small with random weights
(``GPT2Config()``, seed 0), float32 and block-quantized (``quantize="q8_0"``, ``"q4_0"``):

- ``sizes``: ``weights.bin`` and the binary (targets: ``weights.bin`` >= 3.5x / 6x smaller than float32, the
  binary without its weights <= 200 KB);
- ``decode``: greedy decoding, one thread: tokens/s after the first (``(t(33) - t(1)) / 32`` of the whole
  program; wall and CPU time, median of rounds; targets: q8_0 >= 2x float32, q4_0 >= 3x);
- ``prefill``: a 128-token prompt in prefill steps of 32 tokens against token by token (``--prefill 0``),
  the same tokens (target >= 5x, on the prompt's CPU time that ``generate --timings 1`` prints; the whole
  runs', loading included, beside it);
- ``rss``: peak resident memory of ``generate`` (prompt 8, 32 new tokens) over the size of its weights file
  (target <= 1.1x);
- ``accuracy``: last-position logits of 20 prompts (English text, one token per byte) against float32,
  relative RMS (targets: q8_0 <= 1%, q4_0 <= 6%), beside the same measure for ggml's own quantization of
  these weights (the hand-built ggml graph below, quantized against its float32 graph: what the formats
  give on this random model) and the error of the quantized weights alone (:func:`float64_logits`: the
  format's floor on these weights, whatever the kernels), and the same quantized model on the GGML
  backend (``ml.compile(..., quantize=...)``, the program's decode steps) against the program (target
  <= 1e-5);
- ``ggml``: time per token of the program's decode step against a hand-built ggml graph of GPT-2 with
  the same quantized weights (the program's own ``weights.bin``), computed by ``ggml-python`` in this
  process on one thread (graph building not timed; target <= 1.05x);
- ``torch``: the float32 program against ``transformers.generate`` and the C backend from Python.

Run: ``python bench/edge.py [sizes decode prefill rss accuracy ggml torch]`` (all by default; exports
three programs, a few minutes). Needs mithril-models, mithril-backend-c, mithril-backend-ggml (ggml-python),
torch and transformers.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _edge_ggml import HandBuiltGPT2

FORMATS = ("float32", "q8_0", "q4_0")
PROMPT = [464, 3290, 318, 257, 1310, 286, 262, 995]
NEW = 32
TEXTS = [
    "The quick brown fox jumps over the lazy dog.", "Edge devices run small language models offline.",
    "A compiler turns a graph of operations into code.", "Quantized weights take a quarter of the memory.",
    "The weather today is sunny with a light breeze.", "She opened the door and looked outside.",
    "Numbers are stored in blocks of thirty-two values.", "Tokens per second measure decoding speed.",
    "The river flows slowly through the old town.", "He wrote the report before the meeting began.",
    "Memory bandwidth limits the speed of inference.", "A program reads its weights from a mapped file.",
    "The cat sat quietly on the warm windowsill.", "Matrix products dominate the cost of a layer.",
    "They planned a trip to the mountains in spring.", "Each block has a scale and its quantized values.",
    "The library exports standalone C programs.", "Children played in the park until sunset.",
    "Floating point sums depend on their order.", "The last position's logits choose the next token.",
]  # fmt: skip


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def load_line() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run(binary: Path, *args: str) -> tuple[float, float, str, str]:
    """Wall seconds, CPU seconds (user + system of the child), stdout and stderr of one run of ``binary``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([str(binary), *args], capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{binary} failed: {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout, done.stderr


def prompt_cpu(stderr: str) -> float:
    """CPU seconds of the prompt alone (to the first token's logits), from ``generate --timings 1``."""
    found = re.search(r"; prompt of \d+ tokens [a-z ]+ [\d.]+ ms \(CPU ([\d.]+) ms\)", stderr)
    if found is None:
        raise RuntimeError(f"no prompt timing in the program's stderr: {stderr!r}")
    return float(found.group(1)) / 1e3


def peak_rss(binary: Path, *args: str) -> int:
    """The program's own peak resident memory (``VmHWM``, polled from /proc while it runs)."""
    process = subprocess.Popen([str(binary), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    status, peak = Path(f"/proc/{process.pid}/status"), 0
    while process.poll() is None:
        try:
            line = next(x for x in status.read_text().splitlines() if x.startswith("VmHWM:"))
            peak = max(peak, int(line.split()[1]) * 1024)
        except (OSError, StopIteration):
            pass
        time.sleep(0.002)
    process.communicate()
    return peak


def tokens(ids: list[int]) -> list[str]:
    return ["--tokens", " ".join(map(str, ids)), "--threads", "1"]


def logits(binary: Path, ids: list[int], *extra: str) -> np.ndarray:
    """The last position's logits of the prompt ``ids`` (``--logits``)."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as out:
        run(binary, *tokens(ids), "--max-new-tokens", "1", "--logits", out.name, *extra)
        return np.fromfile(out.name, dtype=np.float32)


def relative_rms(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want**2)))


class Programs:
    """The three exported programs of one random GPT-2 small (built once, in a temporary folder)."""

    def __init__(self, scratch: Path) -> None:
        import torch
        from mithril_models import export_program
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        self.model = GPT2LMHeadModel(GPT2Config(bos_token_id=None, eos_token_id=None)).eval()
        self.state = self.model.state_dict()
        self.exported, self.seconds = {}, {}
        for fmt in FORMATS:
            start = time.perf_counter()
            quantize = None if fmt == "float32" else fmt
            exported = export_program(self.model.config, self.state, scratch / fmt, quantize=quantize)
            exported.build()
            self.exported[fmt], self.seconds[fmt] = exported, time.perf_counter() - start

    def binary(self, fmt: str) -> Path:
        return self.exported[fmt].binary


def sizes(programs: Programs) -> None:
    base = programs.exported["float32"].weights_bytes
    print("Sizes (GPT-2 small, random weights)")
    for fmt, target in zip(FORMATS, (None, 3.5, 6.0), strict=True):
        exported = programs.exported[fmt]
        ratio = base / exported.weights_bytes
        mark = "" if target is None else f" (target >= {target}x: {verdict(ratio >= target)})"
        kb = exported.binary.stat().st_size / 1024
        print(f"  {fmt:8} weights.bin {exported.weights_bytes / 2**20:7.1f} MiB = 1/{ratio:.2f} of float32{mark}; "
              f"binary {kb:.0f} KB (target <= 200 KB: {verdict(kb <= 200)}); "
              f"export + build {programs.seconds[fmt]:.0f} s")  # fmt: skip


def decode(programs: Programs, rounds: int = 5) -> None:
    """Seconds per token after the first (median over rounds, the formats interleaved), wall and CPU."""
    samples: dict[str, list[tuple[float, float]]] = {fmt: [] for fmt in FORMATS}
    for fmt in FORMATS:
        run(programs.binary(fmt), *tokens(PROMPT), "--max-new-tokens", "1")  # the page cache
    for _ in range(rounds):
        for fmt in FORMATS:
            one = run(programs.binary(fmt), *tokens(PROMPT), "--max-new-tokens", "1")
            many = run(programs.binary(fmt), *tokens(PROMPT), "--max-new-tokens", str(NEW + 1))
            samples[fmt].append(((many[0] - one[0]) / NEW, (many[1] - one[1]) / NEW))
    wall = {fmt: statistics.median(s[0] for s in samples[fmt]) for fmt in FORMATS}
    cpu = {fmt: statistics.median(s[1] for s in samples[fmt]) for fmt in FORMATS}
    print(f"Decode, one thread, prompt {len(PROMPT)} tokens, {NEW} new (median of {rounds} rounds; {load_line()})")
    for fmt, target in zip(FORMATS, (None, 2.0, 3.0), strict=True):
        speedup = cpu["float32"] / cpu[fmt]
        mark = "" if target is None else (
            f"; x{speedup:.2f} float32 by CPU time (target >= {target}x: {verdict(speedup >= target)})"
        )
        print(f"  {fmt:8} {1 / wall[fmt]:6.1f} tokens/s ({wall[fmt] * 1e3:.2f} ms/token wall, "
              f"{cpu[fmt] * 1e3:.2f} ms CPU){mark}")  # fmt: skip


def prefill(programs: Programs, rounds: int = 3) -> None:
    """A 128-token prompt: prefill steps against token by token, the same first token. The target is
    judged on the prompt's own CPU time (``--timings 1``: loading the weights left out, the same in both
    modes); the whole run's ratio is printed beside it."""
    prompt = np.random.default_rng(1).integers(0, 50257, 128).tolist()
    print(f"Prefill, one thread, a 128-token prompt then 1 token (median of {rounds} rounds; {load_line()})")
    for fmt in FORMATS:
        chunked, single = [], []
        for _ in range(rounds):
            a = run(programs.binary(fmt), *tokens(prompt), "--max-new-tokens", "1", "--timings", "1")
            b = run(programs.binary(fmt), *tokens(prompt), "--max-new-tokens", "1", "--prefill", "0", "--timings", "1")
            chunked.append((*a[:2], prompt_cpu(a[3])))
            single.append((*b[:2], prompt_cpu(b[3])))
            same = a[2] == b[2]
        med = {name: [statistics.median(r[i] for r in runs) for i in range(3)]
               for name, runs in (("chunked", chunked), ("single", single))}  # fmt: skip
        ratio, whole = med["single"][2] / med["chunked"][2], med["single"][1] / med["chunked"][1]
        print(f"  {fmt:8} the prompt in chunks of 32: {med['chunked'][2] * 1e3:.1f} ms, token by token "
              f"{med['single'][2] * 1e3:.1f} ms (CPU): x{ratio:.2f} (target >= 5x: {verdict(ratio >= 5)}); "
              f"whole runs {med['chunked'][0]:.3f} s / {med['single'][0]:.3f} s wall, x{whole:.2f} by CPU time; "
              f"same token: {same}")  # fmt: skip


def rss(programs: Programs) -> None:
    print(f"Peak resident memory of generate (prompt {len(PROMPT)} tokens, {NEW} new)")
    for fmt in FORMATS:
        peak = peak_rss(programs.binary(fmt), *tokens(PROMPT), "--max-new-tokens", str(NEW))
        weights = programs.exported[fmt].weights_bytes
        print(f"  {fmt:8} {peak / 2**20:6.1f} MiB = {peak / weights:.3f}x the weights file "
              f"({weights / 2**20:.1f} MiB; target <= 1.1x: {verdict(peak <= 1.1 * weights)})")  # fmt: skip


def accuracy(programs: Programs, ggml_prompts: int = 3) -> None:
    """Quantized logits against float32 (20 prompts), and the GGML backend against the program."""
    prompts = [list(text.encode()) for text in TEXTS]  # one token per byte (ids < 256)
    reference = [logits(programs.binary("float32"), ids) for ids in prompts]
    print(f"Accuracy: last-position logits of {len(prompts)} prompts against float32, relative RMS")
    float_graph = HandBuiltGPT2(programs.exported["float32"].directory / "weights.bin", "f32")
    ggml_reference = [float_graph.last_logits(ids) for ids in prompts]
    float_graph.close()
    exact = float64_logits(programs.model, prompts)  # the reference of the weights-alone figures
    for fmt, target in (("q8_0", 0.01), ("q4_0", 0.06)):
        errors = [
            relative_rms(logits(programs.binary(fmt), ids), want) for ids, want in zip(prompts, reference, strict=True)
        ]
        graph = HandBuiltGPT2(programs.exported[fmt].directory / "weights.bin", fmt)
        theirs = [relative_rms(graph.last_logits(ids), want) for ids, want in zip(prompts, ggml_reference, strict=True)]
        graph.close()
        floor = [
            relative_rms(got, want)
            for got, want in zip(float64_logits(programs.model, prompts, fmt), exact, strict=True)
        ]
        print(f"  {fmt:8} mean {np.mean(errors):.4f}, max {np.max(errors):.4f} (target <= {target}: "
              f"{verdict(np.max(errors) <= target)}); ggml's own {fmt} graph against its float32 graph, the same "
              f"weights: mean {np.mean(theirs):.4f}, max {np.max(theirs):.4f}; the weights alone (dequantized, "
              f"float64 transformers): mean {np.mean(floor):.4f}, max {np.max(floor):.4f}")  # fmt: skip
    for fmt in ("q8_0", "q4_0"):
        worst = max(
            relative_rms(ggml_decode_logits(programs, fmt, ids), logits(programs.binary(fmt), ids, "--prefill", "0"))
            for ids in prompts[:ggml_prompts]
        )
        print(f"  GGML backend (quantize={fmt!r}, the program's decode steps) against the program, {ggml_prompts} "
              f"prompts: max relative RMS {worst:.2e} (target <= 1e-5: {verdict(worst <= 1e-5)})")  # fmt: skip


def float64_logits(model: Any, prompts: list[list[int]], fmt: str | None = None) -> list[np.ndarray]:
    """The last logits of ``prompts`` from a float64 copy of ``model`` (a ``transformers`` GPT-2), no kernel
    of ours; with ``fmt``, every 2-d weight (the tensors the program stores quantized) first replaced by its
    ``fmt`` blocks dequantized (:func:`accuracy`'s "weights alone": the format's floor on these weights, with
    no quantized activations and no float32 sums)."""
    import copy

    import torch
    from mithril_backend_c.kernels import dequantize, quantize
    from transformers.pytorch_utils import Conv1D

    net = copy.deepcopy(model)
    if fmt is not None:
        transposed = {id(m.weight) for m in net.modules() if isinstance(m, Conv1D)}  # [in, out]: rows are columns
        with torch.no_grad():
            for weight in net.parameters():  # each tied tensor once (wte is also the LM head)
                if weight.ndim == 2:
                    rows = weight.numpy().T if id(weight) in transposed else weight.numpy()
                    rounded = dequantize(quantize(rows, fmt), fmt, rows.shape)  # blocks of 32 along each row
                    weight.copy_(torch.from_numpy(rounded.T if id(weight) in transposed else rounded))
    net = net.double()
    with torch.no_grad():
        return [net(torch.tensor([ids])).logits[0, -1].numpy() for ids in prompts]


def ggml_decode_logits(programs: Programs, fmt: str, ids: list[int]) -> np.ndarray:
    """The last logits of ``ids`` fed token by token to the program's decode step compiled for the GGML
    backend with ``quantize=fmt`` (cached per format)."""
    import mithril as ml
    from mithril_models import load_hf
    from mithril_models.gpt.config import config_from_hf
    from mithril_models.gpt.decode import GPTDecodeStep
    from mithril_models.kv_cache import cache_names

    key = ("ggml", fmt)
    if key not in programs.exported:
        config = config_from_hf(programs.model.config)
        caches = cache_names(config.num_layers)
        shapes = {name: [1, config.num_heads, 64, config.head_dim] for pair in caches for name in pair}
        shapes["input"] = [1, 1]
        data_keys = {"input", "positions", *(past for past, _ in caches)}
        step = GPTDecodeStep(config, 1, 64)
        pm = ml.compile(step, ml.GGMLBackend(threads=1), shapes=shapes, data_keys=data_keys, inference=True,
                        quantize=fmt)  # fmt: skip
        programs.exported[key] = (pm, load_hf(pm, programs.state), caches, shapes)
    pm, params, caches, shapes = programs.exported[key]
    data = {past: np.zeros(shapes[past], np.float32) for past, _ in caches}
    for position, token in enumerate(ids):
        data["input"], data["positions"] = np.array([[token]]), np.array([position])
        out = pm.evaluate(params, data)
        data.update({past: out[present] for past, present in caches})
    return np.asarray(out["output"][0])


def ggml(programs: Programs, rounds: int = 5) -> None:
    """The program's time per token against the hand-built ggml graph with the same weights, measured in
    alternating rounds (CPU time: the program's (t(33) - t(1)) / 32, ggml's median compute per token). Five
    rounds: the host has phases of ~40% slower CPUs, and with three one such phase over a program run set the
    median (q8_0 8.40 ms/token against 5.9-6.1 in the runs around it)."""
    print(f"Hand-built ggml graph (ggml-python, the same quantized weights, one thread; {rounds} alternating rounds; "
          f"{load_line()})")  # fmt: skip
    for fmt in ("q8_0", "q4_0"):
        graph = HandBuiltGPT2(programs.exported[fmt].directory / "weights.bin", fmt)
        binary, ours, theirs = programs.binary(fmt), [], []
        for _ in range(rounds):
            one = run(binary, *tokens(PROMPT), "--max-new-tokens", "1")
            many = run(binary, *tokens(PROMPT), "--max-new-tokens", str(NEW + 1))
            ours.append((many[1] - one[1]) / NEW)
            seconds, top = graph.time_per_token(PROMPT, NEW)
            theirs.append(seconds)
        program_s, ggml_s = statistics.median(ours), statistics.median(theirs)
        agrees = top == int(logits(binary, PROMPT).argmax())
        ratio = program_s / ggml_s
        print(f"  {fmt:8} program {program_s * 1e3:.2f} ms/token, ggml {ggml_s * 1e3:.2f} ms/token: x{ratio:.2f} "
              f"(target <= 1.05: {verdict(ratio <= 1.05)}); first new token the same: {agrees}")  # fmt: skip
        graph.close()


def torch_section(programs: Programs) -> None:
    """The float32 program against transformers' generate and the C backend from Python (1 thread)."""
    import mithril as ml
    import torch
    from mithril_models import from_hf_config, generate, load_hf

    torch.set_num_threads(1)
    wall, _, out, _ = run(programs.binary("float32"), *tokens(PROMPT), "--max-new-tokens", str(NEW))
    program_tokens = [int(t) for t in out.split()]
    with torch.no_grad():
        start = time.perf_counter()
        theirs = programs.model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False)
        torch_s = time.perf_counter() - start
    pm = ml.compile(from_hf_config(programs.model.config), ml.CBackend(dtype=ml.float32, threads=1),
                    shapes={"input": [1, 64]}, data_keys={"input"})  # fmt: skip
    params = load_hf(pm, programs.state)
    generate(pm, params, [PROMPT], NEW, top_k=1)
    start = time.perf_counter()
    ours = generate(pm, params, [PROMPT], NEW, top_k=1)[0].tolist()
    c_s = time.perf_counter() - start
    print(f"float32 program against PyTorch ({load_line()}): tokens identical to transformers: "
          f"{program_tokens == theirs[0, len(PROMPT):].tolist()}, "
          f"to the C backend: {program_tokens == ours}")  # fmt: skip
    print(f"  program {NEW / wall:6.2f} tokens/s (whole run), transformers.generate {NEW / torch_s:6.2f}, "
          f"C backend from Python {NEW / c_s:6.2f}")  # fmt: skip


def main() -> None:
    sections = ("sizes", "decode", "prefill", "rss", "accuracy", "ggml", "torch")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", nargs="*", help=f"of {', '.join(sections)} (default: all)")
    chosen = parser.parse_args().section or list(sections)
    print(load_line())
    with tempfile.TemporaryDirectory(prefix="mithril-edge-") as scratch:
        programs = Programs(Path(scratch))
        for name in chosen:
            {"sizes": sizes, "decode": decode, "prefill": prefill, "rss": rss, "accuracy": accuracy, "ggml": ggml,
             "torch": torch_section}[name](programs)  # fmt: skip
    print(load_line())


if __name__ == "__main__":
    main()
