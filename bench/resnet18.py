"""ResNet-18 (torchvision architecture), batch 1, 1x3x224x224, float32, 2 threads everywhere, every
implementation measured in this process:

- inference (BatchNorm with running statistics): Mithril on NumPy, C, GGML, PyTorch and MLX (whichever
  are installed) vs hand-written PyTorch eager (``torch.no_grad()``, ``model.eval()``; targets: C <= 1.0,
  GGML <= 1.3, NumPy <= 1.5);
- Mithril on JAX vs a hand-written ``jax.jit`` ResNet-18 with the same weights (target <= 1.02);
- a training step (BatchNorm with batch statistics; forward and the backward pass to every parameter
  from a given output gradient): Mithril C vs PyTorch eager (``model.train()``, ``backward``; target
  <= 1.2), gradients checked against PyTorch's first.

The outputs of every implementation are checked against PyTorch (max relative error <= 1e-4) before
anything is timed. Each implementation runs ``--repeats`` timed calls per round, rounds alternate between
implementations; the medians are the figures (targets apply to them: "met" or "MISSED"), the best calls
are printed beside them (what an idle machine gives when other processes share the cores).

    python bench/resnet18.py [--rounds 7] [--repeats 5] [--backends numpy,c,ggml,jax,torch,mlx] [--no-train]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

THREADS = 2
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))
os.environ.setdefault("XLA_FLAGS", f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={THREADS}")

import mithril as ml  # noqa: E402
from _resnet18_models import jax_resnet18, random_params, torch_resnet18  # noqa: E402
from mithril_models import resnet18  # noqa: E402

SHAPE = (1, 3, 224, 224)
TOLERANCE = 1e-4
TARGETS = {"Mithril NumPy": 1.5, "Mithril C": 1.0, "Mithril GGML": 1.3}
TRAIN_TARGETS = {"Mithril C": 1.2}
SETTLE_SECONDS = 1.0
"""Pause before each implementation's block of calls: the previous one's worker threads (OpenBLAS's, two
OpenMP runtimes', ggml's) keep spinning after its last call. Measured with NumPy, C and PyTorch in one
process: after a 0.2 s pause C took 12.8 ms and NumPy 28.4 ms a call, after 1 s 10.6 and 24.9 (alone
in the process: 10.3 and 24-25)."""
GRAD_TOLERANCE = 1e-3
"""Max relative error of the training step's gradients against PyTorch's (float32 sums over 224x224
pixels in another order)."""


def _relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def _backends(names: list[str]) -> dict[str, object]:
    """Mithril backends to time, 2 threads each (those whose package is missing are skipped with a note)."""
    makers = {
        "numpy": ("Mithril NumPy", lambda: ml.NumpyBackend(dtype=ml.float32)),
        "c": ("Mithril C", lambda: ml.CBackend(dtype=ml.float32, threads=THREADS)),
        "ggml": ("Mithril GGML", lambda: ml.GGMLBackend(threads=THREADS)),
        "torch": ("Mithril Torch", lambda: ml.TorchBackend(dtype=ml.float32)),
        "mlx": ("Mithril MLX", lambda: ml.MlxBackend(dtype=ml.float32)),
        "jax": ("Mithril JAX", lambda: ml.JaxBackend(dtype=ml.float32)),
    }
    result = {}
    for name in names:
        label, make = makers[name]
        try:
            result[label] = make()
        except Exception as exc:
            print(f"{label}: skipped ({type(exc).__name__}: {exc})")
    return result


def _timed_call(label: str, pm: object, params: dict, data: dict) -> object:
    """``pm.evaluate`` that returns only once the result is computed (MLX evaluates lazily)."""
    if label == "Mithril MLX":
        import mlx.core as mx

        return lambda: mx.eval(pm.evaluate(params, data)["output"])
    return lambda: pm.evaluate(params, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backends", default="numpy,c,ggml,torch,mlx,jax")
    parser.add_argument("--no-train", action="store_true", help="skip the training step")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: nothing to compare against (pip install torch==2.13.0)")
        return
    torch.set_num_threads(THREADS)

    model = resnet18(num_classes=1000, training=False)  # the mithril-models builder, BatchNorm in inference mode
    backends = _backends(args.backends.split(","))
    compiled = {}
    for label, backend in backends.items():
        start = time.perf_counter()
        compiled[label] = ml.compile(
            model, backend, shapes={"input": list(SHAPE)}, data_keys={"input"}, inference=True, use_short_namings=False
        )
        print(f"{label}: compiled in {time.perf_counter() - start:.1f} s")
    if not compiled:
        return
    first = next(iter(compiled.values()))
    params = random_params({k: np.shape(v) for k, v in first.randomize_params(seed=0).items()})
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)

    net = torch_resnet18(params)
    tx = torch.from_numpy(x)
    with torch.no_grad():
        reference = net(tx).double().numpy()

    def torch_forward() -> object:
        with torch.no_grad():
            return net(tx)

    fns = {"PyTorch eager": torch_forward}
    for label, pm in compiled.items():
        backend = backends[label]
        p = {k: backend.array(v) for k, v in params.items()}
        data = {"input": backend.array(x)}
        error = _relative_error(backend.to_numpy(pm.evaluate(p, data)["output"]), reference)
        status = "OK" if error <= TOLERANCE else "MISMATCH"
        print(f"{label}: max relative error vs PyTorch {error:.2e} ({status})")
        if error > TOLERANCE:
            raise SystemExit(f"{label} computes a different function than PyTorch (error {error:.2e})")
        fns[label] = _timed_call(label, pm, p, data)

    jax_fns = {}
    if "Mithril JAX" in fns:
        import jax

        forward, jparams = jax_resnet18(params)
        jx = jax.numpy.asarray(x)
        error = _relative_error(np.asarray(forward(jparams, jx)), reference)
        print(f"hand-written jax.jit: max relative error vs PyTorch {error:.2e}")
        mithril_jax = fns.pop("Mithril JAX")

        def run_jax(fn=mithril_jax) -> None:
            jax.block_until_ready(fn())

        jax_fns = {"jax.jit (hand-written)": lambda: forward(jparams, jx).block_until_ready(), "Mithril JAX": run_jax}

    core = os.environ.get("OPENBLAS_CORETYPE")
    note = f"; $OPENBLAS_CORETYPE={core} (NumPy's BLAS kernels)" if core else ""
    print(f"threads: {THREADS} (torch {torch.get_num_threads()}); input {'x'.join(map(str, SHAPE))}, float32{note}")
    _report("ResNet-18 inference, batch 1, vs PyTorch eager", _sample(fns, args.rounds, args.repeats), "PyTorch eager")
    if jax_fns:
        title = "ResNet-18 inference, batch 1, JAX vs hand-written jax.jit"
        _report(title, _sample(jax_fns, args.rounds, args.repeats), "jax.jit (hand-written)", {"Mithril JAX": 1.02})
    if not args.no_train and "c" in args.backends.split(","):
        _training_step(torch, args.rounds, args.repeats)


def _training_step(torch: Any, rounds: int, repeats: int) -> None:
    """Forward + backward of ResNet-18 in training mode (batch statistics), Mithril C vs PyTorch eager, from
    the same weights and output gradient; gradients compared before timing."""
    backend = ml.CBackend(dtype=ml.float32, threads=THREADS)
    start = time.perf_counter()
    pm = ml.compile(resnet18(num_classes=1000, training=True), backend, shapes={"input": list(SHAPE)},
                    data_keys={"input"}, use_short_namings=False)  # fmt: skip
    print(f"\nMithril C, training step: compiled in {time.perf_counter() - start:.1f} s")
    params = random_params({k: np.shape(v) for k, v in pm.randomize_params(seed=0).items()})
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    g = np.random.default_rng(2).standard_normal((SHAPE[0], 1000)).astype(np.float32)
    net = torch_resnet18(params).train()
    tx, tg = torch.from_numpy(x), torch.from_numpy(g)
    _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})
    net(tx).backward(tg)
    error = max(_relative_error(grads[k], p.grad.double().numpy()) for k, p in net.named_parameters())
    print(f"Mithril C: max relative error of the gradients vs PyTorch {error:.2e}")
    if error > GRAD_TOLERANCE:
        raise SystemExit(f"Mithril C's gradients differ from PyTorch's (error {error:.2e})")

    def torch_step() -> None:
        net.zero_grad(set_to_none=True)
        net(tx).backward(tg)

    fns = {
        "PyTorch eager": torch_step,
        "Mithril C": lambda: pm.evaluate(params, {"input": x}, output_gradients={"output": g}),
    }
    title = "ResNet-18 training step (forward + backward), batch 1, vs PyTorch eager"
    _report(title, _sample(fns, rounds, repeats), "PyTorch eager", TRAIN_TARGETS)


def _sample(fns: dict[str, Callable[[], object]], rounds: int, repeats: int) -> dict[str, list[float]]:
    """Per-call times of each function: ``rounds`` rounds, each running every function ``repeats`` times
    after a pause (:data:`SETTLE_SECONDS`: the previous one's thread pool goes idle) and one untimed call,
    in alternating order."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for name in names:
        fns[name]()
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            time.sleep(SETTLE_SECONDS)
            fns[name]()
            for _ in range(repeats):
                start = time.perf_counter()
                fns[name]()
                samples[name].append(time.perf_counter() - start)
    return samples


def _report(title: str, samples: dict[str, list[float]], baseline: str, targets: dict[str, float] = TARGETS) -> None:
    """Median and best time per call, and their ratios to ``baseline`` (targets apply to the medians; the
    best times show what an idle machine gives when other processes share the cores)."""
    print(f"\n{title}")
    print(f"  {'':<26} {'median':>10} {'ratio':>6}   {'best':>10} {'ratio':>6}")
    median = {name: statistics.median(values) for name, values in samples.items()}
    best = {name: min(values) for name, values in samples.items()}
    for name in samples:
        ratio, best_ratio = median[name] / median[baseline], best[name] / best[baseline]
        target = targets.get(name)
        mark = f"  (target <= {target:.2f}: {'met' if ratio <= target else 'MISSED'})" if target else ""
        line = f"{median[name] * 1e3:7.2f} ms {ratio:6.2f}   {best[name] * 1e3:7.2f} ms {best_ratio:6.2f}"
        print(f"  {name:<26} {line}{mark}")


if __name__ == "__main__":
    main()
