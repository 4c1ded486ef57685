"""Parallelism on 4 simulated JAX CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``,
set here before JAX starts; the devices share this machine's cores).

Prints, measured in this process:
- data-parallel training step (forward + backward) of an MLP and a 2-layer GPT block stack over 4
  devices vs the same step on one device (the cost of partitioning; target <= 1.3);
- model parallel: per-device parameter bytes / total parameter bytes (target: 1/4 for the split weights);
- compile time a parallel plan adds to a 12-layer GPT-2-small-shaped model (target <= 0.1 s).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

DEVICES = 4
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}".strip()
sys.path.insert(0, str(Path(__file__).parent))

import mithril as ml  # noqa: E402
import numpy as np  # noqa: E402
from _timing import interleaved, report  # noqa: E402
from gpt_blocks import block_stack, gpt  # noqa: E402
from mithril.models import MLP  # noqa: E402
from mithril.parallel import parameter_bytes_per_device  # noqa: E402


def training_step(model, shapes: dict, mode: str | None, mesh: tuple[int, ...] | None):
    """``step()`` running forward + backward with data already placed, as a training loop holds it."""
    backend = ml.JaxBackend(device_mesh=mesh) if mesh else ml.JaxBackend()
    pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), parallelism=mode)
    params = pm.randomize_params(seed=0)
    rng = np.random.default_rng(0)
    data = {k: backend.array(rng.standard_normal(s).astype(np.float32)) for k, s in shapes.items()}
    if pm.plan is not None:
        data = {k: backend.place(v, pm.plan.spec(k)) for k, v in data.items()}
    out_shape = tuple(pm.evaluate(params, data)["output"].shape)
    cot = {"output": backend.array(np.ones(out_shape, np.float32))}

    def step() -> None:
        _, grads = pm.evaluate(params, data, output_gradients=cot)
        for g in grads.values():
            g.block_until_ready()

    return step, pm, params


def data_parallel() -> None:
    cases = {
        "MLP 784-512-256-10, batch 256": (
            MLP(input_size=784, hidden_sizes=[512, 256], output_size=10),
            {"input": [256, 784]},
        ),
        "GPT block stack (2 x 256 dims), batch 8 x 64": (
            block_stack(num_layers=2, dims=256, heads=4),
            {"input": [8, 64, 256]},
        ),
    }
    for title, (model, shapes) in cases.items():
        single, _, _ = training_step(model, shapes, None, None)
        parallel, _, _ = training_step(model, shapes, "data", (DEVICES,))
        times = interleaved({"one device": single, f"data-parallel over {DEVICES}": parallel}, rounds=5, repeats=5)
        report(f"Data-parallel training step, {title}", times, "one device", target=1.3)


def model_parallel() -> None:
    model = block_stack(num_layers=2, dims=256, heads=4)
    _, pm, params = training_step(model, {"input": [8, 64, 256]}, "model", (DEVICES,))
    shapes = {k: tuple(v.shape) for k, v in params.items()}
    per_device, total = parameter_bytes_per_device(pm.plan, shapes, 4)
    split = [k for k in pm.plan.specs if k in params]
    split_device = sum(params[k].addressable_shards[0].data.nbytes for k in split)
    split_total = sum(params[k].nbytes for k in split)
    print(
        f"Model parallel over {DEVICES} devices, GPT block stack (2 x 256 dims): {len(split)} of {len(params)} "
        "parameters split"
    )
    print(
        f"  per-device / total parameter bytes: {per_device / total:.3f} (all parameters; norms and row-parallel "
        "biases are replicated)"
    )
    print(
        f"  per-device / total bytes of the split weights (measured on device 0): {split_device / split_total:.3f} "
        f"(target 1/{DEVICES} = {1 / DEVICES:.3f})"
    )


def plan_compile_time() -> None:
    backend = ml.JaxBackend(device_mesh=(DEVICES,))
    shapes = {"input": [8, 128], "positions": [128]}

    def compile_seconds(mode: str | None) -> float:
        model = gpt()
        start = time.perf_counter()
        ml.compile(model, backend, shapes=shapes, data_keys={"input", "positions"}, parallelism=mode)
        return time.perf_counter() - start

    compile_seconds(None)  # warm-up (plugin loading)
    runs = {mode: [] for mode in (None, "model", "data")}
    for _ in range(3):
        for mode in runs:
            runs[mode].append(compile_seconds(mode))
    base = statistics.median(runs[None])
    print("Compile time of a 12-layer GPT-2-small-shaped model on JAX, with and without a parallel plan")
    print(f"  no plan            {base:.3f} s")
    for mode in ("data", "model"):
        added = statistics.median(runs[mode]) - base
        print(
            f"  parallelism={mode!r:8} {statistics.median(runs[mode]):.3f} s   added {added * 1e3:+.1f} ms  (target "
            f"<= 100 ms: {'OK' if added <= 0.1 else 'MISSED'})"
        )


def main() -> None:
    data_parallel()
    model_parallel()
    plan_compile_time()


if __name__ == "__main__":
    main()
