"""Peak memory of loading a ~500 MB ``.safetensors`` checkpoint (GPT-2 small, float32, Hugging Face names)
into a compiled model with ``mithril_models.load_hf``. Target: peak resident memory added by the load
<= 1.3x the file size, with a progress bar on the way.

The file is written once; each backend loads it in a fresh subprocess that reports its resident memory
just before the load and its peak (``VmHWM``) after it, so the figure counts everything the load
allocates (the returned parameters included).

    python bench/load_checkpoint.py [--backends numpy,torch,jax,mlx]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import mithril as ml
from mithril_models import create_gpt, load_hf
name, path = sys.argv[1], sys.argv[2]
BACKENDS = {"numpy": "NumpyBackend", "torch": "TorchBackend", "jax": "JaxBackend", "mlx": "MlxBackend"}
backend = getattr(ml, BACKENDS[name])(dtype=ml.float32)
gpt = create_gpt(bias=True, block_size=1024, dims=768, num_heads=12, num_layers=12, vocab_size=50257)
pm = ml.compile(gpt, backend, shapes={"input": [1, 16]}, data_keys={"input"}, inference=True)
def status(field):  # VmHWM: this process image's peak (ru_maxrss would include the forking parent's)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) * 1024
def rss():
    return status("VmRSS")
import tqdm.auto  # the progress bar's library is not part of the load's memory
before = rss()
started = time.perf_counter()
params = load_hf(pm, path, progress=True)
seconds = time.perf_counter() - started
peak = status("VmHWM")
print(json.dumps({"before": before, "peak": peak, "after": rss(), "seconds": seconds, "tensors": len(params)}))
"""


def write_checkpoint(directory: Path) -> Path:
    import mithril as ml
    from mithril_models import create_gpt
    from mithril_models.checkpoints import save_safetensors, to_checkpoint

    gpt = create_gpt(bias=True, block_size=1024, dims=768, num_heads=12, num_layers=12, vocab_size=50257)
    pm = ml.compile(
        gpt, ml.NumpyBackend(dtype=ml.float32), shapes={"input": [1, 16]}, data_keys={"input"}, inference=True
    )
    path = directory / "gpt2.safetensors"
    save_safetensors(path, to_checkpoint(pm, pm.randomize_params(seed=0)), metadata={"format": "pt"})
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="numpy,torch,jax,mlx")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mithril-bench-") as tmp:
        path = write_checkpoint(Path(tmp))
        size = path.stat().st_size
        print(f"checkpoint: {path.name}, {size / 2**20:.0f} MiB (GPT-2 small, float32, Hugging Face names)")
        for name in args.backends.split(","):
            result = subprocess.run([sys.executable, "-c", CHILD, name, str(path)], capture_output=True, text=True)
            if result.returncode != 0:
                reason = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"
                print(f"  {name:<6} skipped: {reason}")
                continue
            figures = json.loads(result.stdout.strip().splitlines()[-1])
            added = figures["peak"] - figures["before"]
            ratio = added / size
            progress_shown = "loading" in result.stderr
            print(
                f"  {name:<6} load {figures['seconds']:5.2f} s; peak memory added {added / 2**20:6.0f} MiB = "
                f"{ratio:.2f}x the file "
                f"(target <= 1.3x: {'OK' if ratio <= 1.3 else 'MISSED'}); progress bar shown: {progress_shown}"
            )


if __name__ == "__main__":
    main()
