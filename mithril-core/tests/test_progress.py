"""mithril.progress: shown on a terminal after the delay, silent otherwise or when switched off."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest
from mithril.plugins.lookup import available_backends

SCRIPT = """
import time
from mithril.progress import task
with task("compiling model.c", delay=0.2):
    time.sleep(1.0)
with task("quick work", delay=5.0):
    pass
print("done")
"""


def _run_on_terminal(env: dict[str, str] | None = None, script: str = SCRIPT) -> str:
    """Run ``script`` in a child process whose standard streams are a 160-column pseudo-terminal."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=300) == 0, output.decode()
    return output.decode()


def test_long_task_is_shown_on_a_terminal_and_short_one_is_not() -> None:
    output = _run_on_terminal({**os.environ, "MITHRIL_PROGRESS": "1"})
    assert "compiling model.c" in output
    assert "quick work" not in output
    assert "done" in output


def test_switched_off_by_environment_variable() -> None:
    output = _run_on_terminal({**os.environ, "MITHRIL_PROGRESS": "0"})
    assert "compiling model.c" not in output
    assert "done" in output


@pytest.mark.parametrize("verbose", [None, False])
def test_silent_when_standard_error_is_not_a_terminal(verbose: bool | None) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace('delay=0.2', f"delay=0.2, verbose={verbose}")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert result.stderr == ""
    assert "done" in result.stdout


def test_verbose_true_shows_it_anywhere() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("delay=0.2", "delay=0.2, verbose=True")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "compiling model.c" in result.stderr


@pytest.mark.skipif(
    not {"jax", "mlx", "torch"} & set(available_backends()), reason="needs a backend that compiles on the first call"
)
def test_first_jit_call_is_announced_then_the_plain_function_runs() -> None:
    script = """
import mithril as ml, mithril.progress, numpy as np
from mithril.plugins.lookup import available_backends
from mithril.models import Linear
mithril.progress.DEFAULT_DELAY = 0.0
name = next(b for b in ("jax", "mlx", "torch") if b in available_backends())
backend = {"jax": ml.JaxBackend, "mlx": ml.MlxBackend, "torch": ml.TorchBackend}[name]()
pm = ml.compile(Linear(2), backend, shapes={"input": [1, 3]}, jit=True)
wrapper = pm._forward
params = pm.randomize_params()
pm.evaluate(params, {"input": np.ones((1, 3), dtype=np.float32)})
assert pm._forward is not wrapper  # the plain compiled function from now on
pm.evaluate(params, {"input": np.ones((1, 3), dtype=np.float32)})
print("done")
"""
    text = _run_on_terminal(script=script)
    assert "compiling Linear forward (first call)" in text and "done" in text


def test_saving_a_checkpoint_and_demo_training_show_progress() -> None:
    script = """
import mithril.progress, numpy as np
mithril.progress.DEFAULT_DELAY = 0.0
from mithril.serialization import save_safetensors
save_safetensors("/dev/null", {"w": np.zeros((256, 1024), np.float32)})
import mithril as ml
from mithril.demo import _train, classification_data
_train(ml.NumpyBackend(), 5, 0.1, classification_data(n=32), lambda line: None)
print("done")
"""
    text = _run_on_terminal(script=script)
    assert "writing null" in text and "training Model on NumpyBackend" in text and "done" in text  # fit's bar


def test_a_terminal_that_reports_no_width_still_shows_the_bar() -> None:
    script = """
import fcntl, struct, sys, termios, time
fcntl.ioctl(sys.stderr.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))  # a fresh pty
from mithril.progress import task
with task("compiling model.c", total=4, unit="part", delay=0.0) as advance:
    for _ in range(4):
        advance(1)
        time.sleep(0.1)
print("done")
"""
    text = _run_on_terminal({**os.environ, "MITHRIL_PROGRESS": "1", "COLUMNS": ""}, script=script)
    assert "compiling model.c" in text and "done" in text
