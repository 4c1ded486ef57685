"""GPT-2 small (124M, random weights from ``GPT2Config()``) on every installed backend, in one process:

1. forward and forward+backward, batch 1, sequence 128, vs ``transformers.GPT2LMHeadModel`` in PyTorch eager
   (target <= 1.0 for Mithril PyTorch) and vs a hand-written ``jax.jit`` GPT-2 (target <= 1.02 for
   Mithril JAX); the other backends are reported against PyTorch eager;
2. greedy decoding, 16-token prompt, 64 new tokens: tokens/s vs ``transformers``' ``generate`` (PyTorch,
   KV cache), target >= 1.0 for Mithril PyTorch and JAX; the tokens must be identical.

Weights go from the transformers model into every Mithril model through ``mithril_models.load_hf``, so all
implementations compute the same function (outputs are checked before timing).

MLX is left out by default where it runs on the CPU (see :func:`default_backends`).

    python bench/gpt2.py [--backends torch,jax,numpy,mlx,c,ggml] [--skip-train] [--skip-generate] [--seq 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

THREADS = 2
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))

import mithril as ml  # noqa: E402
from _hand_written import jax_gpt2  # noqa: E402
from _timing import interleaved, report  # noqa: E402

LAYERS, HEADS = 12, 12
PROMPT, NEW_TOKENS = 16, 64


def _relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def _reference():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    return model


def _backend(name: str):
    makers = {
        "torch": lambda: ml.TorchBackend(dtype=ml.float32),
        "jax": lambda: ml.JaxBackend(dtype=ml.float32),
        "numpy": lambda: ml.NumpyBackend(dtype=ml.float32),
        "mlx": lambda: ml.MlxBackend(dtype=ml.float32),
        "c": lambda: ml.CBackend(dtype=ml.float32, threads=THREADS),
        "ggml": lambda: ml.GGMLBackend(threads=THREADS),
    }
    return makers[name]()


def _backends(names: list[str]):
    """``(name, backend)`` for each of ``names`` this machine can make; the others are printed as skipped."""
    for name in names:
        try:
            backend = _backend(name)
        except Exception as exc:
            print(f"{name}: skipped ({type(exc).__name__}: {exc})")
            continue
        yield name, backend


def _mithril_gpt2(hf):
    """Mithril's GPT-2 small with the sizes of ``hf``'s vocabulary."""
    from mithril_models import create_gpt

    return create_gpt(
        bias=True, block_size=1024, dims=768, num_heads=HEADS, num_layers=LAYERS, vocab_size=hf.config.vocab_size
    )


def forward_section(hf, names: list[str], seq: int, with_backward: bool) -> None:
    import torch

    ids_np = np.random.default_rng(0).integers(0, hf.config.vocab_size, (1, seq))
    ids = torch.tensor(ids_np)
    hf_params = [p for p in hf.parameters()]

    def hf_forward():
        with torch.no_grad():
            return hf(ids).logits

    cot_np = np.random.default_rng(1).normal(size=(1, seq, hf.config.vocab_size)).astype(np.float32)
    cot = torch.tensor(cot_np)

    def hf_forward_backward():
        logits = hf(ids).logits
        return torch.autograd.grad(logits, hf_params, cot)

    reference = hf_forward().numpy()
    for name, backend in _backends(names):
        _forward_backend(name, backend, hf, ids_np, cot_np, reference, hf_forward, hf_forward_backward, with_backward)


def _forward_backend(
    name, backend, hf, ids_np, cot_np, reference, hf_forward, hf_forward_backward, with_backward
) -> None:
    from mithril_models import load_hf

    seq = ids_np.shape[1]
    gpt = _mithril_gpt2(hf)
    native = name in ("c", "ggml")  # forward only: their gradients of GPT-2 small take a long C build
    started = time.perf_counter()
    pm = ml.compile(
        gpt,
        backend,
        shapes={"input": [1, seq]},
        data_keys={"input"},
        use_short_namings=False,
        inference=not with_backward or native,
    )
    compile_s = time.perf_counter() - started
    if name == "ggml":
        import ggml

        built = "with" if ggml.ggml_cpu_has_llamafile() else "WITHOUT (see mithril-backend-ggml's README)"
        print(f"libggml built {built} llamafile's matrix products")
    params = load_hf(pm, hf.state_dict())
    data = {"input": backend.array(ids_np, "int")}
    out = backend.to_numpy(pm.evaluate(params, data)["output"])
    print(
        f"Mithril {name}: compiled in {compile_s:.2f} s; max relative error vs transformers "
        f"{_relative_error(out, reference):.1e}"
    )
    label, sync = f"Mithril {name}", _sync(name)
    baseline = "transformers (PyTorch eager)"
    title = f"GPT-2 small, batch 1, seq {seq}"
    fwd = interleaved(
        {baseline: hf_forward, label: lambda: sync(pm.evaluate(params, data)["output"])}, rounds=5, repeats=3
    )
    report(f"{title}, forward", fwd, baseline, 1.0 if name == "torch" else None)
    if name == "jax":
        import jax

        jax_forward, jax_forward_backward = jax_gpt2(LAYERS, HEADS)
        jax_ids = backend.array(ids_np, "int")
        hand = interleaved(
            {
                "hand-written jax.jit": lambda: jax.block_until_ready(jax_forward(params, jax_ids)),
                label: lambda: sync(pm.evaluate(params, data)["output"]),
            },
            rounds=5,
            repeats=3,
        )
        report(f"{title}, forward", hand, "hand-written jax.jit", 1.02)
    if not with_backward or native:
        return
    g = {"output": backend.array(cot_np)}
    both = interleaved(
        {baseline: hf_forward_backward, label: lambda: sync(pm.evaluate(params, data, output_gradients=g)[1])},
        rounds=5,
        repeats=3,
    )
    report(f"{title}, forward+backward", both, baseline, 1.0 if name == "torch" else None)
    if name == "jax":
        hand = interleaved(
            {
                "hand-written jax.jit": lambda: jax.block_until_ready(
                    jax_forward_backward(params, jax_ids, g["output"])
                ),
                label: lambda: sync(pm.evaluate(params, data, output_gradients=g)[1]),
            },
            rounds=5,
            repeats=3,
        )
        report(f"{title}, forward+backward", hand, "hand-written jax.jit", 1.02)


def _sync(name: str):
    if name == "jax":
        import jax

        return jax.block_until_ready
    if name == "mlx":
        import mlx.core as mx

        return lambda value: mx.eval(value)
    return lambda value: value


def generate_section(hf, names: list[str]) -> None:
    import torch

    prompt = np.random.default_rng(2).integers(0, hf.config.vocab_size, (1, PROMPT))
    pad = hf.config.eos_token_id

    def hf_generate():
        with torch.no_grad():
            out = hf.generate(
                torch.tensor(prompt),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=pad,
            )
        return out[:, PROMPT:].numpy()

    reference = hf_generate()
    for name, backend in _backends(names):
        _generate_backend(name, backend, hf, prompt, reference, hf_generate)


def _generate_backend(name, backend, hf, prompt, reference, hf_generate) -> None:
    from mithril_models import generate, load_hf

    gpt = _mithril_gpt2(hf)
    pm = ml.compile(gpt, backend, shapes={"input": [1, PROMPT + NEW_TOKENS]}, data_keys={"input"}, inference=True)
    params = load_hf(pm, hf.state_dict())
    started = time.perf_counter()
    tokens = generate(pm, params, prompt, NEW_TOKENS, top_k=1)
    first = time.perf_counter() - started
    same = bool(np.array_equal(tokens, reference))
    print(
        f"Mithril {name}: first generate (compiles the decode step) {first:.2f} s; tokens identical to transformers: "
        f"{same}"
    )
    baseline = "transformers.generate (PyTorch)"
    times = interleaved(
        {baseline: hf_generate, f"Mithril {name}": lambda: generate(pm, params, prompt, NEW_TOKENS, top_k=1)},
        rounds=3,
        repeats=2,
    )
    print(f"GPT-2 small greedy decoding, {PROMPT}-token prompt, {NEW_TOKENS} new tokens (tokens/s, higher is better)")
    base = NEW_TOKENS / times[baseline]
    for label, seconds in times.items():
        rate = NEW_TOKENS / seconds
        mark = ""
        if label != baseline and name in ("torch", "jax"):
            mark = f"  (target >= 1.00: {'OK' if rate / base >= 1.0 else 'MISSED'})"
        print(f"  {label:<34} {rate:9.1f} tokens/s   ratio {rate / base:5.2f}{mark}")


DEFAULT_BACKENDS = "torch,jax,numpy,mlx,c,ggml"


def default_backends() -> str:
    """Every backend, MLX only where it runs on a GPU: MLX's CPU build for Linux multiplies matrices at
    about 5 GFLOP/s (a GPT-2 forward takes ~14 s, the LM head alone ~5 s a token), so this bench would run
    for over half an hour; ``--backends ...,mlx`` still includes it."""
    try:
        import mlx.core as mx

        on_gpu = mx.default_device() == mx.gpu
    except (ImportError, AttributeError, RuntimeError):
        return DEFAULT_BACKENDS  # not installed: skipped with its reason, as any missing backend is
    if on_gpu:
        return DEFAULT_BACKENDS
    print("mlx: skipped by default on the CPU (its matrix products run at ~5 GFLOP/s: a GPT-2 forward takes ~14 s);"
          " pass --backends with mlx to include it")  # fmt: skip
    return ",".join(n for n in DEFAULT_BACKENDS.split(",") if n != "mlx")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default=None, help=f"comma-separated, of {DEFAULT_BACKENDS} (default: "
                        "all; MLX only on a GPU)")  # fmt: skip
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--skip-forward", action="store_true")
    parser.add_argument("--skip-backward", action="store_true")
    parser.add_argument("--skip-generate", action="store_true")
    args = parser.parse_args()
    names = [n for n in (args.backends or default_backends()).split(",") if n]
    hf = _reference()
    if not args.skip_forward:
        forward_section(hf, names, args.seq, not args.skip_backward)
    if not args.skip_generate:
        generate_section(hf, names)


if __name__ == "__main__":
    main()
