"""``make gpu-check`` (``bench/gpu_check.py``) must work the day a GPU is there: its quick CPU run goes through
every step here (conformance in a child pytest, GPT-2 against transformers, ResNet-18 against PyTorch,
bf16-mixed, recording into the docs page), and without a GPU the real run says so and exits 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.py"
PAGE = ROOT / "docs" / "backends" / "gpu.md"

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_the_quick_cpu_run_goes_through_every_step_and_records_the_page(tmp_path: Path) -> None:
    page = tmp_path / "gpu.md"
    shutil.copy(PAGE, page)
    run = _run("--device", "cpu", "--quick", "--frameworks", "torch", "--record", str(page))
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert any(
        line.startswith("conformance, torch on cpu:") and "passed" in line and "failed" not in line for line in lines
    )
    assert any("greedy decoding" in line and "tokens identical" in line for line in lines), run.stdout
    errors = [float(line.split("(error ")[1].rstrip(")")) for line in lines if "(error " in line]
    assert len(errors) == 2 and max(errors) < 1e-4, run.stdout  # GPT-2 and ResNet-18 compute the references' function
    assert any("bf16-mixed" in line for line in lines)
    recorded = page.read_text()
    assert "Not run yet" not in recorded and "| GPT-2, Mithril torch on cpu" in recorded
    assert recorded.endswith(PAGE.read_text().split("<!-- gpu-check: end -->", 1)[1])  # the rest kept


def test_the_page_says_whether_it_was_run() -> None:
    text = PAGE.read_text()
    assert text.count("<!-- gpu-check: begin -->") == 1 and text.count("<!-- gpu-check: end -->") == 1


def test_without_a_gpu_the_check_says_so_and_exits_0() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: make gpu-check runs for real")
    run = _run("--frameworks", "torch")
    assert run.returncode == 0 and "no GPU is visible" in run.stdout, run.stdout + run.stderr
