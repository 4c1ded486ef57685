"""Helpers of the ``export_program`` tests (``test_export_program.py``, ``test_export_quantized.py``,
``test_export_llama.py``): the compiler-only and empty PATHs the programs are built and run with, building
and running them (the random-weight references are ``_hf_references``'). ``conftest.py`` puts this folder on
``sys.path`` and provides the ``tools`` fixture."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import mithril as ml
import numpy as np
import pytest

from mithril_models import from_hf_config, load_hf
from mithril_models.kv_cache import cache_names

TOOLS = ("cc", "as", "ld", "sh", "dirname", "rm", "make")


def tool_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environments: ``build`` has a PATH of the compiler tools only (no Python), ``run`` an empty PATH."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    assert not any(p.name.startswith("python") for p in bin_dir.iterdir())
    return {"build": str(bin_dir), "run": str(tmp_path_factory.mktemp("empty"))}


def build(directory: Path, tools: dict[str, str], cflags: str = "-O2 -Werror") -> None:
    """``sh build.sh`` with only the compiler tools on PATH; every warning is an error."""
    env = {"PATH": tools["build"], "CFLAGS": cflags, "HOME": str(directory)}
    done = subprocess.run(["/bin/sh", "build.sh"], cwd=directory, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stderr, done.stderr


def run(binary: Path, tools: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The program with an empty PATH, from an unrelated working directory."""
    env = {"PATH": tools["run"]}
    return subprocess.run([str(binary), *args], cwd=tools["run"], env=env, capture_output=True, text=True)


def run_tokens(binary: Path, tools: dict[str, str], *args: str) -> list[int]:
    done = run(binary, tools, *args)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [int(t) for t in done.stdout.split()]


def ggml_decode(
    step: Any, num_layers: int, cache_shape: list[int], state: dict[str, Any], fmt: str, prompt: list[int]
) -> np.ndarray:
    """The last logits of ``prompt`` fed token by token to the decode ``step`` (a ``GPTDecodeStep`` or
    ``LlamaDecodeStep`` of batch 1; each of its ``num_layers`` caches ``cache_shape``) on the GGML backend,
    compiled with ``quantize=fmt`` and the weights of the ``transformers`` ``state`` dict."""
    caches = cache_names(num_layers)
    shapes = {name: cache_shape for pair in caches for name in pair} | {"input": [1, 1]}
    data_keys = {"input", "positions", *(past for past, _ in caches)}
    pm = ml.compile(step, ml.GGMLBackend(threads=2), shapes=shapes, data_keys=data_keys, inference=True, quantize=fmt)
    params = load_hf(pm, state)
    data: dict[str, np.ndarray] = {past: np.zeros(cache_shape, np.float32) for past, _ in caches}
    for position, token in enumerate(prompt):
        data["input"], data["positions"] = np.array([[token]]), np.array([position])
        out = pm.evaluate(params, data)
        data.update({past: out[present] for past, present in caches})
    return np.asarray(out["output"][0])


def numpy_gpt(model: Any) -> tuple[Any, dict[str, Any]]:
    pm = ml.compile(from_hf_config(model.config), ml.NumpyBackend(dtype=ml.float32), data_keys={"input"})
    return pm, load_hf(pm, model.state_dict())


def random_state(pm: Any, seed: int) -> dict[str, np.ndarray]:
    """Random parameters and running statistics (variances positive), by logical path."""
    rng = np.random.default_rng(seed)
    state = {}
    for key, value in pm.randomize_params(seed=seed).items():
        path = pm.input_paths.get(key, key)
        shape = np.shape(value)
        if path.endswith("running_var"):
            state[path] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        elif path.endswith("running_mean") or path.endswith("bias"):
            state[path] = rng.normal(0, 0.1, shape).astype(np.float32)
        else:
            state[path] = np.asarray(value, np.float32)
    return state
