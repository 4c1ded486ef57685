"""Edge deployment figures (``mithril_models.export_program``), GPT-2 small and ResNet-18 with random weights:

- size of the exported binaries without their weights file (target <= 200 KB each);
- GPT-2 small greedy decoding, tokens/s, one thread each: the exported ``generate`` program vs the Mithril C
  backend from Python (``mithril_models.generate``) vs ``transformers``' ``generate`` (PyTorch, CPU)
  (target: the program >= PyTorch). Every figure is new tokens / wall time of the whole generation (prompt
  included; for the program also mapping and checksumming the weights file), and for the program also the
  per-token time after the first (``(t(N) - t(1)) / (N - 1)``). The program is the default export (decode
  steps of 64, 256 and 1024 cache slots; it runs the smallest that holds prompt + new tokens) built by
  ``build.sh`` (``-O3 -march=native``); for comparison also the same export built for the generic CPU
  (``ARCH=``), the export with the 1024-slot step only (``smaller_caches=()``) and the program linked with
  the scipy-openblas32 wheel's OpenBLAS (when installed);
- peak resident memory of ``generate`` vs the size of its weights file (target <= 1.2x).

Run: ``python bench/edge.py [--new-tokens 32] [--cache-len N]`` (once; it exports and compiles several
times, a few minutes on a laptop). Needs mithril-models, mithril-backend-c, torch and transformers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

PROMPT = [464, 3290, 318, 257, 1310, 286, 262, 995]


def run_program(binary: Path, *args: str) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in bytes and stdout of one run. The peak is the program's own ``VmHWM``
    (polled from /proc while it runs): ``ru_maxrss`` of a child would count the forked Python process."""
    start = time.perf_counter()
    process = subprocess.Popen([str(binary), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    status, peak = Path(f"/proc/{process.pid}/status"), 0
    while process.poll() is None:
        try:
            line = next(x for x in status.read_text().splitlines() if x.startswith("VmHWM:"))
            peak = max(peak, int(line.split()[1]) * 1024)
        except (OSError, StopIteration):
            pass
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{binary} failed: {err.decode()}")
    return elapsed, peak, out.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--cache-len", type=int, default=None, help="GPT-2 export: KV-cache slots (default 1024)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    import mithril as ml
    from mithril_models import export_program, from_hf_config, generate, load_hf
    from transformers import GPT2Config, GPT2LMHeadModel

    new = args.new_tokens
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(bos_token_id=None, eos_token_id=None)).eval()
    state = model.state_dict()
    with tempfile.TemporaryDirectory(prefix="mithril-edge-") as scratch:
        start = time.perf_counter()
        gpt = export_program(model.config, state, Path(scratch) / "gpt2", cache_len=args.cache_len)
        exported_s = time.perf_counter() - start
        gpt.build()
        built_s = time.perf_counter() - start - exported_s
        binary_kb, weights = gpt.binary.stat().st_size / 1024, gpt.weights_bytes
        tokens = ["--tokens", " ".join(map(str, PROMPT)), "--threads", "1"]

        def timed(binary: Path) -> tuple[float, float, int, list[int]]:
            """(seconds for all new tokens, seconds per token after the first, peak RSS, tokens)."""
            run_program(binary, *tokens, "--max-new-tokens", "1")  # warm the page cache
            one_s, _, _ = run_program(binary, *tokens, "--max-new-tokens", "1")
            all_s, peak, out = run_program(binary, *tokens, "--max-new-tokens", str(new))
            return all_s, (all_s - one_s) / (new - 1), peak, [int(t) for t in out.split()]

        program_s, per_token, peak, program_tokens = timed(gpt.binary)
        others = {}  # label -> (seconds, per token)
        generic = timed(gpt.build(arch=""))
        assert generic[3] == program_tokens
        others["built for the generic CPU (ARCH=)"] = generic[:2]
        try:  # the same program linked with the scipy-openblas32 wheel's OpenBLAS (the C backend's BLAS)
            import scipy_openblas32 as wheel

            lib = wheel.get_lib_dir()
            os.environ["BLAS"] = (
                f"-DMT_USE_BLAS -DMT_BLAS_OPENBLAS -DMT_BLAS_SCIPY -I{wheel.get_include_dir()} -L{lib} "
                f"-l{wheel.get_library()} -Wl,-rpath,{lib}"
            )
            blas = timed(gpt.build())
            assert blas[3] == program_tokens
            others["+ the wheel's OpenBLAS (BLAS=... sh build.sh)"] = blas[:2]
        except ImportError:
            pass
        finally:
            os.environ.pop("BLAS", None)
        if args.cache_len is None:
            single = export_program(model.config, state, Path(scratch) / "gpt2-one", smaller_caches=())
            one = timed(single.build())
            assert one[3] == program_tokens
            others["one 1024-slot step (smaller_caches=())"] = one[:2]

        with torch.no_grad():
            start = time.perf_counter()
            theirs = model.generate(torch.tensor([PROMPT]), max_new_tokens=new, do_sample=False)
            torch_s = time.perf_counter() - start
        theirs = theirs[0, len(PROMPT) :].tolist()

        pm = ml.compile(
            from_hf_config(model.config), ml.CBackend(dtype=ml.float32, threads=1), shapes={"input": [1, 64]},
            data_keys={"input"},
        )  # fmt: skip
        params = load_hf(pm, state)
        generate(pm, params, [PROMPT], new, top_k=1)  # compiles the decode steps
        start = time.perf_counter()
        ours = generate(pm, params, [PROMPT], new, top_k=1)[0].tolist()
        c_python_s = time.perf_counter() - start

        resnet = export_program({"family": "resnet18"}, _resnet_state(), Path(scratch) / "resnet18")
        resnet.build()

        print(f"GPT-2 small (random weights), prompt {len(PROMPT)} tokens, {new} new, 1 thread, caches of at most "
              f"{args.cache_len or 1024} slots; export {exported_s:.0f} s, build {built_s:.0f} s")  # fmt: skip
        print(f"  tokens identical: program == C backend: {program_tokens == ours}, == transformers: "
              f"{program_tokens == theirs}")  # fmt: skip
        print(f"  binary size without weights: generate {binary_kb:.0f} KB, "
              f"classify (ResNet-18) {resnet.binary.stat().st_size / 1024:.0f} KB (target <= 200 KB)")  # fmt: skip
        print(f"  exported program:       {new / program_s:6.2f} tokens/s ({1 / per_token:.2f} tokens/s after "
              f"the first: {1000 * per_token:.1f} ms/token)")  # fmt: skip
        for label, (seconds, step_s) in others.items():
            print(f"    {label}: {new / seconds:6.2f} tokens/s ({1000 * step_s:.1f} ms/token after the first)")
        print(f"  C backend from Python:  {new / c_python_s:6.2f} tokens/s")
        print(f"  transformers.generate:  {new / torch_s:6.2f} tokens/s (torch {torch.__version__}, 1 thread)")
        print(f"  peak RSS of generate: {peak / 2**20:.0f} MiB = {peak / weights:.3f} x the weights file "
              f"({weights / 2**20:.0f} MiB; target <= 1.2x)")  # fmt: skip


def _resnet_state() -> dict[str, np.ndarray]:
    """Random ResNet-18 weights by logical path (a state dict for export_program)."""
    from mithril_models.export import resolve_model

    _, pm = resolve_model({"family": "resnet18"}, image_size=224)
    return {pm.input_paths.get(k, k): np.asarray(v) for k, v in pm.randomize_params(seed=0).items()}


if __name__ == "__main__":
    main()
