"""Mithril's six training scripts (``examples/model_api/*.py`` of Mithril's repository) run unchanged against
this project: each in its own process, from a temporary folder holding only a link to the checkout's
``examples`` (so ``import mithril`` means this project, never the checkout's package), must exit with 0; the
losses it prints must go down.

Skipped unless ``MITHRIL_CHECKOUT`` names a checkout (CI stays offline). The scripts train for thousands of
steps as published (minutes each):

    MITHRIL_CHECKOUT=/path/to/mithril python -m pytest tests/test_upstream_examples.py -n 2
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ENV = "MITHRIL_CHECKOUT"
CHECKOUT = os.environ.get(ENV)

# Scripts that train and print their losses: at least two must be read from the output (and go down).
# ``many_to_one_any_backend_training.py`` builds its model and defines ``compile_and_train`` without calling it.
PRINTS_LOSSES = {"variable_length_many_to_one_lstm"}

SCRIPTS = [
    pytest.param("convolution_with_svm", id="convolution_with_svm"),
    pytest.param("resnet_logical_models", id="resnet_logical_models"),
    pytest.param("linear_regression_jax_training", id="linear_regression_jax_training"),
    pytest.param("cnn_forcast_sine_training", id="cnn_forcast_sine_training"),
    pytest.param("many_to_one_any_backend_training", id="many_to_one_any_backend_training"),
    pytest.param("variable_length_many_to_one_lstm", id="variable_length_many_to_one_lstm"),
]

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def printed_losses(output: str) -> list[float]:
    """The losses a script printed: the number after ``->`` on ``Epoch: i / n -> loss`` lines, or before it
    on ``loss -> Epoch: i / n`` lines (``tensor(0.25)`` included).

    >>> printed_losses("Epoch: 0 / 10 ->  tensor(0.5)\\n0.25  -> Epoch: 5 / 10\\nother")
    [0.5, 0.25]
    """
    losses = []
    for line in output.splitlines():
        if "Epoch" not in line or "->" not in line:
            continue
        before, after = line.split("->", 1)
        found = _NUMBER.search(after if line.lstrip().startswith("Epoch") else before)
        if found:
            losses.append(float(found.group()))
    return losses


@pytest.mark.slow
@pytest.mark.skipif(not CHECKOUT, reason=f"set {ENV} to a checkout of Mithril's repository to run its training scripts")
@pytest.mark.parametrize("name", SCRIPTS)
def test_published_training_script_runs_unchanged(name):
    source = Path(CHECKOUT or "")
    script = source / "examples" / "model_api" / f"{name}.py"
    if not script.is_file():
        pytest.fail(
            f"{ENV}={CHECKOUT!r} has no examples/model_api/{name}.py; expected a checkout of synnada-ai/mithril"
        )
    with tempfile.TemporaryDirectory(prefix="mithril-model-api-") as root:
        (Path(root) / "examples").symlink_to(source / "examples", target_is_directory=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing may put the checkout's mithril first
        env["MPLBACKEND"] = "Agg"
        result = subprocess.run(
            [sys.executable, f"examples/model_api/{name}.py"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    tail = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, f"{name}.py exited with {result.returncode}:\n{tail}"
    losses = printed_losses(result.stdout)
    if name in PRINTS_LOSSES:
        assert len(losses) >= 2, f"{name}.py: expected the losses it prints, read {losses} from:\n{tail}"
    if len(losses) >= 2:
        assert losses[-1] < losses[0], f"{name}.py: the printed losses did not go down: {losses}"
