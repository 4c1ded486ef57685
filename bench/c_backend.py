"""The C backend against its references, every ratio measured in this process:

- MLP 784-512-256-10, batch 128, float32: Mithril-C vs Mithril-NumPy, forward and forward+backward
  (target <= 1.0);
- the ResNet-18-shaped conv stack of ``bench/conv.py`` (1x3x224x224, float32): Mithril-C vs PyTorch
  eager, forward and forward+backward (target <= 2);
- per-call overhead of ``evaluate`` on a tiny model (Add of two 16-element vectors; target <= 10 us).

Sections whose reference is not installed (mithril-backend-numpy, torch) are skipped with a note.
Run: ``python bench/c_backend.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import mithril as ml  # noqa: E402
from _timing import interleaved, report  # noqa: E402
from mithril.models import MLP, Add  # noqa: E402

SIZES = (784, 512, 256, 10)
BATCH = 128


def _numpy_backend():
    try:
        return ml.NumpyBackend(dtype=ml.float32)
    except Exception:  # noqa: BLE001 - the NumPy backend is optional here
        return None


def mlp() -> None:
    from mithril_backend_c import toolchain

    blas = toolchain.blas_info()
    version = f" {blas['version']}" if blas.get("version") else ""
    print(f"C backend: BLAS {blas['name']}{version}; flags {' '.join(toolchain.flags())}")
    reference = _numpy_backend()
    if reference is None:
        print("mithril-backend-numpy is not installed: MLP comparison skipped")
        return
    model = MLP(input_size=SIZES[0], hidden_sizes=list(SIZES[1:-1]), output_size=SIZES[-1])
    c = ml.CBackend(dtype=ml.float32)
    pm_c = ml.compile(model, c, shapes={"input": [BATCH, SIZES[0]]})
    pm_np = ml.compile(model, reference, shapes={"input": [BATCH, SIZES[0]]})
    params = pm_np.randomize_params(seed=0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    g = rng.standard_normal((BATCH, SIZES[-1])).astype(np.float32)
    out_c, grads_c = pm_c.evaluate(params, {"input": x}, output_gradients={"output": g})
    out_np, grads_np = pm_np.evaluate(params, {"input": x}, output_gradients={"output": g})
    assert np.allclose(out_c["output"], out_np["output"], atol=1e-4)
    assert all(np.allclose(grads_c[k], grads_np[k], atol=1e-3) for k in grads_np)
    fwd = interleaved(
        {
            "Mithril NumPy": lambda: pm_np.evaluate(params, {"input": x}),
            "Mithril C": lambda: pm_c.evaluate(params, {"input": x}),
        }
    )
    report(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, forward", fwd, "Mithril NumPy", 1.0)
    both = interleaved(
        {
            "Mithril NumPy": lambda: pm_np.evaluate(params, {"input": x}, output_gradients={"output": g}),
            "Mithril C": lambda: pm_c.evaluate(params, {"input": x}, output_gradients={"output": g}),
        }
    )
    report(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, forward+backward", both, "Mithril NumPy", 1.0)


def conv() -> None:
    from conv import compare_with_torch

    backend = ml.CBackend(dtype=ml.float32)
    print(f"C threads: {backend.threads}")
    compare_with_torch(backend, "Mithril C", 2.0)


def overhead() -> None:
    backend = ml.CBackend(dtype=ml.float32, threads=1)
    pm = ml.compile(Add(), backend, shapes={"left": [16], "right": [16]})
    data = {"left": backend.ones(16), "right": backend.ones(16)}
    params: dict = {}
    for _ in range(1000):
        pm.evaluate(params, data)
    best = []
    for _ in range(7):
        n = 20000
        start = time.perf_counter()
        for _ in range(n):
            pm.evaluate(params, data)
        best.append((time.perf_counter() - start) / n)
    per_call = sorted(best)[len(best) // 2] * 1e6
    fn = pm._forward  # the generated entry point alone, without PhysicalModel's argument checks
    start = time.perf_counter()
    for _ in range(20000):
        fn(params, data)
    raw = (time.perf_counter() - start) / 20000 * 1e6
    print(
        f"per-call overhead, evaluate of Add on 16-element vectors: {per_call:.2f} us (target <= 10 us; "
        f"{'OK' if per_call <= 10 else 'ABOVE TARGET'}); the C entry point alone: {raw:.2f} us"
    )


def main() -> None:
    mlp()
    conv()
    overhead()


if __name__ == "__main__":
    main()
