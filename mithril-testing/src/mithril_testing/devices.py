"""Run code with several simulated devices: JAX reads ``XLA_FLAGS`` once, when it initialises, so a
multi-device check runs in a fresh interpreter. Multi-process checks take a free local port
(:func:`free_port`) or run a script under ``torchrun`` on 127.0.0.1 (:func:`run_torchrun`).

Example:
    >>> run_with_jax_devices("import jax; emit(jax.device_count())", devices=4)   # doctest: +SKIP
    4
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from typing import Any

from mithril.errors import MithrilError

__all__ = ["free_port", "run_torchrun", "run_with_jax_devices", "simulated_devices_env"]

_PRELUDE = """
import json as _json, sys as _sys
def emit(value):
    _sys.stdout.write("\\n@@result " + _json.dumps(value) + "\\n")
"""


def simulated_devices_env(devices: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``XLA_FLAGS`` asking for ``devices`` host devices."""
    env = dict(os.environ if base is None else base)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    return env


def run_with_jax_devices(code: str, devices: int, timeout: float = 300) -> Any:
    """Run ``code`` in a new interpreter where JAX has ``devices`` CPU devices; ``code`` calls
    ``emit(value)`` (JSON-serialisable) and the last emitted value is returned. A failure raises
    :class:`~mithril.errors.MithrilError` with the child's output."""
    source = _PRELUDE + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", source],
        env=simulated_devices_env(devices),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    results = [line[len("@@result ") :] for line in done.stdout.splitlines() if line.startswith("@@result ")]
    if done.returncode != 0 or not results:
        raise MithrilError(
            f"run_with_jax_devices: the child exited with {done.returncode}\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return json.loads(results[-1])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for a coordinator or ``torchrun``'s master)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_torchrun(
    script: str | os.PathLike[str], *args: str | os.PathLike[str], processes: int = 2, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``script args...`` under ``torchrun --nproc_per_node processes`` with its master on 127.0.0.1 (a free
    port); the finished process, its output captured as text, whatever its exit status."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script), *map(str, args),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
