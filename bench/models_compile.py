"""Build + ``ml.compile`` time of the full-size models of mithril-models: GPT-2 small, ResNet-50, CLIP ViT-B/32
and T5-small (encoder and decoder). Target: <= 0.5 s each (build + compile, with gradients).

Compiled on every installed Python backend (NumPy with its symbolic backward graph; JAX, PyTorch and MLX
trace lazily, so their first-call JIT is not part of ``ml.compile`` and is not counted here). C and GGML
are left out: their compile is a C build measured by ``bench/c_backend.py``. Medians of 3 runs after a
warm-up (plugin loading and first imports excluded), each after a ``gc.collect()`` of the previous
run's models.

    python bench/models_compile.py [--backends numpy,torch,jax,mlx]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import mithril as ml

T5_SMALL = {
    "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_decoder_layers": 6,
    "num_heads": 8, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
    "layer_norm_epsilon": 1e-6, "feed_forward_proj": "relu", "tie_word_embeddings": True,
}  # fmt: skip


def _models() -> dict[str, tuple[Callable[[], Any], dict[str, list[int]], set[str]]]:
    from mithril_models import clip, create_gpt, resnet50, t5_decode, t5_encode

    return {
        "GPT-2 small (seq 128)": (
            lambda: create_gpt(bias=True, block_size=1024, dims=768, num_heads=12, num_layers=12, vocab_size=50257),
            {"input": [1, 128]},
            {"input"},
        ),
        "ResNet-50 (224x224)": (lambda: resnet50(), {"input": [1, 3, 224, 224]}, {"input"}),
        "CLIP ViT-B/32": (
            lambda: clip(512, 224, 12, 768, 32, 77, 49408, 512, 8, 12),
            {"image": [1, 3, 224, 224], "text": [1, 77]},
            {"image", "text"},
        ),
        "T5-small encoder (seq 128)": (lambda: t5_encode(T5_SMALL), {"input": [1, 128]}, {"input"}),
        "T5-small decoder (seq 128)": (
            lambda: t5_decode(T5_SMALL),
            {"input": [1, 128], "memory": [1, 128, 512]},
            {"input", "memory"},
        ),
    }


def measure(
    build: Callable[[], Any], shapes: dict[str, list[int]], data: set[str], backend: Any
) -> tuple[float, float, int]:
    gc.collect()  # the previous run's models, so no collection of them lands in this run's timing
    started = time.perf_counter()
    model = build()
    built = time.perf_counter()
    pm = ml.compile(model, backend, shapes=shapes, data_keys=data)
    done = time.perf_counter()
    return built - started, done - built, pm.primitive_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="numpy,torch,jax,mlx")
    args = parser.parse_args()
    for name in args.backends.split(","):
        try:
            backend = {"numpy": ml.NumpyBackend, "torch": ml.TorchBackend, "jax": ml.JaxBackend, "mlx": ml.MlxBackend}[
                name
            ]()
        except Exception as exc:
            print(f"{name}: skipped ({type(exc).__name__}: {exc})")
            continue
        print(f"{type(backend).__name__} (with gradients)")
        totals = {}
        for title, (build, shapes, data) in _models().items():
            measure(build, shapes, data, backend)  # warm-up
            runs = [measure(build, shapes, data, backend) for _ in range(3)]
            build_s = statistics.median(r[0] for r in runs)
            compile_s = statistics.median(r[1] for r in runs)
            total = build_s + compile_s
            totals[title] = total
            verdict = "OK" if total <= 0.5 else "MISSED"
            print(
                f"  {title:<28} build {build_s:6.3f} s + compile {compile_s:6.3f} s = {total:6.3f} s "
                f"({runs[0][2]} primitive calls)  target <= 0.5 s: {verdict}"
            )
        t5 = sum(v for k, v in totals.items() if k.startswith("T5"))
        print(f"  {'T5-small encoder + decoder':<28} {t5:6.3f} s  target <= 0.5 s: {'OK' if t5 <= 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
