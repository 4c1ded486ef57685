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

SCRIPT = """
import time
from mithril.progress import task
with task("compiling model.c", delay=0.2):
    time.sleep(1.0)
with task("quick work", delay=5.0):
    pass
print("done")
"""


def _run_on_terminal(env: dict[str, str]) -> str:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True
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
    assert process.wait(timeout=60) == 0
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
