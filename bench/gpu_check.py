"""The GPU check (``make gpu-check``): what a GPU must show, in one run of under 8 minutes on one card.

1. The conformance suite (``bench/gpu_conformance.py``) on ``TorchBackend(device="cuda")`` and on JAX's GPU
   platform: every primitive, float32 and float64, forward and gradients.
2. GPT-2 small (random weights from ``GPT2Config()``): forward and forward+backward at batch 8, sequence 128,
   and greedy decoding (64 tokens), Mithril PyTorch and Mithril JAX against ``transformers`` on the same GPU;
   tokens must be identical.
3. ResNet-18 inference, batch 32, 224x224, against a hand-written PyTorch ResNet-18 on the same GPU.
4. ``precision="bf16-mixed"``: GPT-2's forward+backward time against float32, and how far its logits move.
5. A data-parallel step (``device_mesh=(2,)``, ``parallelism="data"``) when JAX sees two GPUs.

Every check prints its ratio as it finishes; ``--record docs/backends/gpu.md`` writes the table, with the
card's name, into that page. On a machine without a GPU it says so and exits 0; ``--device cpu --quick`` runs
the same code on the CPU with small sizes (the test suite does that, so the script cannot rot unseen).

    python bench/gpu_check.py [--record docs/backends/gpu.md] [--quick] [--device cpu] [--frameworks torch,jax]
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import mithril as ml
from _resnet18_models import random_params, torch_resnet18
from _timing import median_seconds

HERE = Path(__file__).parent
BEGIN, END = "<!-- gpu-check: begin -->", "<!-- gpu-check: end -->"


@dataclass
class Sizes:
    """Model and input sizes: the real check, or the quick CPU run of the test suite."""

    layers: int = 12
    dims: int = 768
    heads: int = 12
    batch: int = 8
    seq: int = 128
    new_tokens: int = 64
    image: int = 224
    images: int = 32
    repeats: int = 10
    conformance_filter: str = ""


QUICK = Sizes(
    layers=2,
    dims=64,
    heads=2,
    batch=2,
    seq=16,
    new_tokens=8,
    image=32,
    images=2,
    repeats=2,
    conformance_filter="matmul or add",
)


@dataclass
class Results:
    """The rows of the report, printed as they come."""

    rows: list[tuple[str, str]] = field(default_factory=list)

    def add(self, check: str, result: str) -> None:
        print(f"{check}: {result}", flush=True)
        self.rows.append((check, result))

    def markdown(self, card: str) -> str:
        when = datetime.date.today().isoformat()
        lines = [f"Run on **{card}** on {when} (`python bench/gpu_check.py`).", "", "| check | result |", "|---|---|"]
        lines += [f"| {check} | {result} |" for check, result in self.rows]
        return "\n".join(lines)


@dataclass
class Target:
    """One framework's device: ``torch`` as ``"cuda"``/``"cpu"``, ``jax`` as ``"gpu"``/``"cpu"``."""

    framework: str
    device: str

    def backend(self, dtype: ml.Dtype = ml.float32, **options: Any) -> Any:
        if self.framework == "torch":
            return ml.TorchBackend(dtype=dtype, device=self.device, **options)
        return ml.JaxBackend(dtype=dtype, device=self.device, **options)


def find_targets(device: str) -> list[Target]:
    """The frameworks that see a GPU (or, with ``device="cpu"``, every installed one on the CPU)."""
    targets = []
    try:
        import torch

        if device == "cpu" or torch.cuda.is_available():
            targets.append(Target("torch", "cpu" if device == "cpu" else "cuda"))
    except ImportError:
        pass
    try:
        import jax

        if device == "cpu" or any(d.platform == "gpu" for d in jax.devices()):
            targets.append(Target("jax", "cpu" if device == "cpu" else "gpu"))
    except (ImportError, RuntimeError):
        pass
    return targets


def card_name(device: str) -> str:
    if device == "cpu":
        return "the CPU (quick run, no GPU)"
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} visible)"
    import jax

    return ", ".join(str(d.device_kind) for d in jax.devices("gpu"))


def sync(target: Target) -> Callable[[Any], Any]:
    """A function waiting for ``target``'s queued work (timings must not stop at a kernel launch)."""
    if target.framework == "jax":
        import jax

        return jax.block_until_ready
    import torch

    def wait(value: Any) -> Any:
        if target.device != "cpu":
            torch.cuda.synchronize()
        return value

    return wait


def conformance(targets: list[Target], sizes: Sizes, results: Results) -> None:
    """The conformance suite in a child pytest per framework; reports its summary line."""
    for target in targets:
        env = dict(os.environ, **{f"MITHRIL_GPU_{target.framework.upper()}": target.device})
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(HERE / "gpu_conformance.py"),
            "-q",
            "-p",
            "no:randomly",
            "-n",
            "0",
            "-o",
            "addopts=",
            "-p",
            "no:cacheprovider",
        ]
        if sizes.conformance_filter:
            command += ["-k", sizes.conformance_filter]
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
        summary = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?)\s*=*$", run.stdout, re.M)
        failed = re.findall(r"^FAILED (\S+)", run.stdout, re.M)
        text = summary[-1] if summary else f"no summary (exit {run.returncode}): {run.stdout[-300:]}{run.stderr[-300:]}"
        results.add(
            f"conformance, {target.framework} on {target.device}", text + (f"; failed: {failed[:8]}" if failed else "")
        )


def timed(fn: Callable[..., Any], repeats: int, *args: Any, **kwargs: Any) -> float:
    """Median seconds of ``fn(*args, **kwargs)`` (arguments bound now, not looked up when it runs)."""
    return median_seconds(partial(fn, *args, **kwargs), repeats=repeats, warmup=2)


def run_step(done: Callable[[Any], Any], pm: Any, params: Any, data: Any, grads: Any = None) -> Any:
    """One forward (``grads`` None) or forward+backward of ``pm``, waited for."""
    if grads is None:
        return done(pm.evaluate(params, data)["output"])
    return done(pm.evaluate(params, data, output_gradients=grads)[1])


def torch_device(targets: list[Target]) -> str:
    """The device the PyTorch references run on: the GPU PyTorch sees, else the CPU."""
    return next((t.device for t in targets if t.framework == "torch"), "cpu")


def gpt2_inputs(hf: Any, sizes: Sizes) -> tuple[np.ndarray, np.ndarray]:
    """Token ids ``[batch, seq]`` and an output cotangent for GPT-2's forward+backward checks."""
    ids = np.random.default_rng(0).integers(0, hf.config.vocab_size, (sizes.batch, sizes.seq))
    cotangent = np.random.default_rng(1).normal(size=(sizes.batch, sizes.seq, hf.config.vocab_size))
    return ids, cotangent.astype(np.float32)


def transformers_gpt2(sizes: Sizes, device: str) -> Any:
    """The reference GPT-2 (random weights, seed 0) on ``device``, in eval mode."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=sizes.layers, n_embd=sizes.dims, n_head=sizes.heads)
    return GPT2LMHeadModel(config).eval().to(device)


def _mithril_gpt2(hf: Any, target: Target, sizes: Sizes, length: int, **options: Any) -> tuple[Any, Any, Any]:
    from mithril_models import create_gpt, load_hf

    config = hf.config
    gpt = create_gpt(
        bias=True,
        block_size=config.n_positions,
        dims=config.n_embd,
        num_heads=config.n_head,
        num_layers=config.n_layer,
        vocab_size=config.vocab_size,
    )
    backend = target.backend()
    pm = ml.compile(
        gpt, backend, shapes={"input": [sizes.batch, length]}, data_keys={"input"}, use_short_namings=False, **options
    )
    params = load_hf(pm, {k: v.detach().cpu() for k, v in hf.state_dict().items()})
    return backend, pm, params


def gpt2(hf: Any, targets: list[Target], sizes: Sizes, results: Results) -> None:
    """GPT-2 forward, forward+backward and greedy decoding against transformers (``hf``) on the same device."""
    import torch

    device = next(hf.parameters()).device
    ids_np, cot_np = gpt2_inputs(hf, sizes)
    ids, cot = torch.tensor(ids_np, device=device), torch.tensor(cot_np, device=device)
    hf_params = list(hf.parameters())
    wait = sync(Target("torch", device.type))
    with torch.no_grad():
        reference = hf(ids).logits.float().cpu().numpy()
    with torch.no_grad():
        hf_forward = timed(lambda: wait(hf(ids).logits), sizes.repeats)
    hf_both = timed(lambda: wait(torch.autograd.grad(hf(ids).logits, hf_params, cot)), sizes.repeats)
    for target in targets:
        backend, pm, params = _mithril_gpt2(hf, target, sizes, sizes.seq)
        data, grads = {"input": backend.array(ids_np, "int")}, {"output": backend.array(cot_np)}
        done = sync(target)
        error = _relative(backend.to_numpy(pm.evaluate(params, data)["output"]), reference)
        forward = timed(run_step, sizes.repeats, done, pm, params, data)
        both = timed(run_step, sizes.repeats, done, pm, params, data, grads)
        label = f"GPT-2, Mithril {target.framework} on {target.device}, batch {sizes.batch} x {sizes.seq}"
        results.add(f"{label}: forward", f"{forward / hf_forward:.2f}x transformers' time (error {error:.1e})")
        results.add(f"{label}: forward+backward", f"{both / hf_both:.2f}x transformers' time")
    _generate(hf, targets, sizes, results)


def _generate(hf: Any, targets: list[Target], sizes: Sizes, results: Results) -> None:
    import torch
    from mithril_models import generate

    prompt = np.random.default_rng(2).integers(0, hf.config.vocab_size, (1, 16))
    device = next(hf.parameters()).device

    def hf_generate() -> np.ndarray:
        with torch.no_grad():
            out = hf.generate(
                torch.tensor(prompt, device=device),
                max_new_tokens=sizes.new_tokens,
                min_new_tokens=sizes.new_tokens,
                do_sample=False,
                pad_token_id=hf.config.eos_token_id,
            )
        return out[:, prompt.shape[1] :].cpu().numpy()

    reference = hf_generate()
    baseline = timed(hf_generate, max(2, sizes.repeats // 4))
    for target in targets:
        one = Sizes(**{**sizes.__dict__, "batch": 1})
        _, pm, params = _mithril_gpt2(hf, target, one, prompt.shape[1] + sizes.new_tokens, inference=True)
        tokens = generate(pm, params, prompt, sizes.new_tokens)
        seconds = timed(generate, max(2, sizes.repeats // 4), pm, params, prompt, sizes.new_tokens)
        same = "identical" if np.array_equal(np.asarray(tokens), reference) else "DIFFERENT"
        results.add(
            f"GPT-2 greedy decoding, {sizes.new_tokens} tokens, Mithril {target.framework} on {target.device}",
            f"{baseline / seconds:.2f}x transformers' tokens/s; tokens {same}",
        )


def resnet18(targets: list[Target], sizes: Sizes, results: Results) -> None:
    """ResNet-18 inference against a hand-written PyTorch ResNet-18 on the same device."""
    import torch
    from mithril_models import resnet18 as build

    shape = [sizes.images, 3, sizes.image, sizes.image]
    model = build(num_classes=1000, training=False)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    params: dict[str, np.ndarray] | None = None
    device = torch_device(targets)
    for target in targets:
        backend = target.backend()
        pm = ml.compile(
            model, backend, shapes={"input": shape}, data_keys={"input"}, inference=True, use_short_namings=False
        )
        if params is None:
            params = random_params({k: np.shape(v) for k, v in pm.randomize_params(seed=0).items()})
            net, tx = torch_resnet18(params).to(device), torch.tensor(x, device=device)
            wait = sync(Target("torch", device))
            with torch.no_grad():
                reference = net(tx).double().cpu().numpy()
                baseline = timed(lambda: wait(net(tx)), sizes.repeats)  # noqa: B023 (called at once, here)
        p, data, done = {k: backend.array(v) for k, v in params.items()}, {"input": backend.array(x)}, sync(target)
        error = _relative(backend.to_numpy(pm.evaluate(p, data)["output"]), reference)
        seconds = timed(run_step, sizes.repeats, done, pm, p, data)
        results.add(
            f"ResNet-18 inference, batch {sizes.images}, Mithril {target.framework} on {target.device}",
            f"{seconds / baseline:.2f}x PyTorch's time (error {error:.1e})",
        )


def mixed_precision(hf: Any, targets: list[Target], sizes: Sizes, results: Results) -> None:
    """``precision="bf16-mixed"`` GPT-2 (``hf``'s weights) forward+backward against float32 on each backend."""
    ids_np, cot_np = gpt2_inputs(hf, sizes)
    for target in targets:
        runs = {}
        for precision in (None, "bf16-mixed"):
            backend, pm, params = _mithril_gpt2(hf, target, sizes, sizes.seq, precision=precision)
            data, grads, done = {"input": backend.array(ids_np, "int")}, {"output": backend.array(cot_np)}, sync(target)
            logits = backend.to_numpy(pm.evaluate(params, data)["output"])
            runs[precision] = (timed(run_step, sizes.repeats, done, pm, params, data, grads), logits)
        (fp32, ref), (bf16, got) = runs[None], runs["bf16-mixed"]
        results.add(
            f"GPT-2 forward+backward, bf16-mixed, Mithril {target.framework} on {target.device}",
            f"{bf16 / fp32:.2f}x float32's time; logits {_relative(got, ref):.1e} from float32",
        )


def data_parallel(targets: list[Target], results: Results) -> None:
    """One data-parallel forward+backward over two devices of JAX's platform, against the same on one."""
    target = next((t for t in targets if t.framework == "jax"), None)
    if target is None:
        results.add("data-parallel step on 2 devices", "skipped: JAX is not installed")
        return
    import jax

    count = len(jax.devices(target.device))
    if count < 2:
        results.add("data-parallel step on 2 devices", f"skipped: JAX sees {count} {target.device} device")
        return
    model = ml.Model()
    model |= ml.Linear(256)(input="input")
    model += ml.Relu()
    model += ml.Linear(10)(output="output")
    x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    g = np.random.default_rng(1).standard_normal((64, 10)).astype(np.float32)
    gradients, weights = [], None
    for mesh in ((1,), (2,)):
        backend = ml.JaxBackend(device=target.device, device_mesh=mesh)
        pm = ml.compile(model, backend, shapes={"input": [64, 128]}, data_keys={"input"}, parallelism="data")
        if weights is None:
            weights = {k: backend.to_numpy(v) for k, v in pm.randomize_params(seed=0).items()}
        params = {k: backend.array(v) for k, v in weights.items()}
        _, grads = pm.evaluate(params, {"input": backend.array(x)}, output_gradients={"output": backend.array(g)})
        gradients.append({k: backend.to_numpy(v) for k, v in grads.items()})
    worst = max(_relative(gradients[1][k], gradients[0][k]) for k in gradients[0])
    results.add(
        f"data-parallel forward+backward on 2 {target.device} devices", f"gradients match one device's to {worst:.1e}"
    )


def _relative(got: Any, ref: np.ndarray) -> float:
    got = np.asarray(got, np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def record(path: Path, text: str) -> None:
    """Replace the results between the gpu-check markers of ``path`` with ``text``."""
    page = path.read_text()
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{path}: the markers {BEGIN} and {END} are missing; nothing recorded")
    head, rest = page.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")
    print(f"recorded in {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="cpu: the same checks on the CPU")
    parser.add_argument("--quick", action="store_true", help="small sizes (the test suite's run)")
    parser.add_argument("--frameworks", default="torch,jax", help="which of torch,jax to check")
    parser.add_argument("--record", type=Path, help="write the results into this page (docs/backends/gpu.md)")
    args = parser.parse_args(argv)
    targets = [t for t in find_targets(args.device) if t.framework in args.frameworks.split(",")]
    if not targets:
        print("gpu-check: no GPU is visible to PyTorch or JAX on this machine; nothing was run")
        return 0
    sizes, results, started = (QUICK if args.quick else Sizes()), Results(), time.perf_counter()
    print(f"gpu-check on {card_name(args.device)}: {', '.join(f'{t.framework}:{t.device}' for t in targets)}")
    conformance(targets, sizes, results)
    hf = transformers_gpt2(sizes, torch_device(targets))
    gpt2(hf, targets, sizes, results)
    resnet18(targets, sizes, results)
    mixed_precision(hf, targets, sizes, results)
    data_parallel(targets, results)
    print(f"gpu-check took {time.perf_counter() - started:.0f} s")
    if args.record:
        record(args.record, results.markdown(card_name(args.device)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
