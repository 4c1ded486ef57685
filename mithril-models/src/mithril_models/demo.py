"""The models section of ``mithril demo``: a small GPT-2 and a small ResNet on every installed backend.

Both are built with the builders, given random weights, written as one ``.safetensors`` file each in the
checkpoint's own names (Hugging Face GPT-2, torchvision ResNet), then loaded back with :func:`load_hf`
on every backend. Each backend generates greedy tokens and classifies an image; the table shows the time
taken and the agreement with NumPy (the greedy tokens and the class must be identical, the ResNet's logits
within ``mithril.demo.DEVIATION_TOLERANCE``).

Example:
    $ mithril demo
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ModelRow", "run"]

PROMPT = [[3, 14, 15, 9, 2, 6]]
NEW_TOKENS = 8
IMAGE_SHAPE = (1, 3, 32, 32)


@dataclass
class ModelRow:
    backend: str
    load_ms: float
    generate_ms: float
    classify_ms: float
    tokens: list[int]
    logits_deviation: float
    same_tokens: bool
    same_class: bool


def _checkpoints(directory: Path) -> tuple[Any, Any, Path, Path]:
    """Build both models, give them random weights and write them in their checkpoints' names."""
    import mithril as ml

    from .checkpoints import save_safetensors, to_checkpoint
    from .gpt import create_gpt
    from .resnet import resnet

    gpt = create_gpt(bias=True, block_size=32, dims=48, num_heads=4, num_layers=2, vocab_size=64)
    net = resnet(block="basic", depths=(1, 1), widths=(8, 16), stem_width=8, num_classes=5)
    reference = ml.NumpyBackend(dtype=ml.float32)
    files: list[Path] = []
    for model, shapes, name in ((gpt, {"input": [1, 32]}, "gpt2"), (net, {"input": list(IMAGE_SHAPE)}, "resnet")):
        pm = ml.compile(model, reference, shapes=shapes, data_keys={"input"}, inference=True)
        params = pm.randomize_params(seed=0)
        for key, param_path in pm.input_paths.items():  # strong positions: varied (not repetitive) greedy tokens
            if param_path.endswith("wpe.weight"):
                params[key] = params[key] * 40.0
        for key in pm.buffer_keys:  # non-trivial running statistics, so loading them matters
            params[key] = params[key] + np.random.default_rng(1).uniform(0.1, 0.5, params[key].shape).astype(np.float32)
        path = directory / f"{name}.safetensors"
        save_safetensors(path, to_checkpoint(pm, params), metadata={"format": "pt", "written_by": "mithril demo"})
        files.append(path)
    return gpt, net, files[0], files[1]


def _run_backend(
    backend: Any, gpt: Any, net: Any, gpt_file: Path, net_file: Path, image: np.ndarray
) -> tuple[ModelRow, np.ndarray]:
    import mithril as ml

    from .checkpoints import load_hf
    from .generation import generate

    started = time.perf_counter()
    gpt_pm = ml.compile(gpt, backend, shapes={"input": [1, 32]}, data_keys={"input"}, inference=True)
    net_pm = ml.compile(net, backend, shapes={"input": list(IMAGE_SHAPE)}, data_keys={"input"}, inference=True)
    gpt_params, net_params = load_hf(gpt_pm, gpt_file), load_hf(net_pm, net_file)
    load_ms = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    tokens = generate(gpt_pm, gpt_params, PROMPT, NEW_TOKENS, top_k=1)
    generate_ms = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    logits = backend.to_numpy(net_pm.evaluate(net_params, {"input": backend.array(image)})["output"])
    classify_ms = (time.perf_counter() - started) * 1e3
    row = ModelRow(type(backend).__name__, load_ms, generate_ms, classify_ms, tokens[0].tolist(), 0.0, True, True)
    return row, np.asarray(logits, dtype=np.float64)


def run(print_fn: Callable[[str], None] = print) -> list[ModelRow]:
    """Run the section on every installed backend, print its table; raise ``DemoFailed`` if a backend
    fails or disagrees with NumPy on the greedy tokens, the predicted class or the ResNet's logits."""
    import mithril as ml
    from mithril.extend import DemoFailed, available_backends, backend_class, deviation_failure, print_table

    print_fn(
        "mithril-models: a small GPT-2 and ResNet written as .safetensors (HF / torchvision names), "
        "loaded on every backend"
    )
    image = np.random.default_rng(2).normal(size=IMAGE_SHAPE).astype(np.float32)
    rows: list[ModelRow] = []
    failures: list[str] = []  # printed as they happen
    disagreements: list[str] = []  # printed under the table
    with tempfile.TemporaryDirectory(prefix="mithril-demo-") as tmp:
        gpt, net, gpt_file, net_file = _checkpoints(Path(tmp))
        reference: tuple[list[int], np.ndarray] | None = None
        names = sorted(n for n in available_backends() if n != "*")
        for name in sorted(names, key=lambda n: n != "numpy"):
            try:
                backend = backend_class(name)(dtype=ml.float32, seed=0)
                row, logits = _run_backend(backend, gpt, net, gpt_file, net_file, image)
            except Exception as exc:  # one broken backend must not hide the others' results
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
                print_fn(f"  FAILED {failures[-1]}")
                continue
            if reference is None:
                reference = (row.tokens, logits)
            row.logits_deviation = float(np.abs(logits - reference[1]).max())
            row.same_tokens = row.tokens == reference[0]
            row.same_class = int(logits.argmax()) == int(reference[1].argmax())
            if not (row.same_tokens and row.same_class):
                disagreements.append(
                    f"{row.backend}: greedy tokens {row.tokens} / class {int(logits.argmax())} differ from NumPy's"
                )
            failure = deviation_failure(row.backend, "ResNet logits", row.logits_deviation)
            if failure is not None:
                disagreements.append(failure)
            rows.append(row)
    columns = f"{'backend':<16}{'load ms':>10}{'generate ms':>13}{'classify ms':>13}{'max dev (ResNet)':>18}"
    lines = [
        f"{r.backend:<16}{r.load_ms:>10.1f}{r.generate_ms:>13.1f}{r.classify_ms:>13.2f}{r.logits_deviation:>18.2e}  "
        f"{' '.join(map(str, r.tokens))} ({'yes' if r.same_tokens else 'NO'})"
        for r in rows
    ]
    print_table(print_fn, f"{columns}  greedy tokens (same as NumPy?)", lines, disagreements)
    if failures or disagreements:
        raise DemoFailed(failures + disagreements)
    return rows
