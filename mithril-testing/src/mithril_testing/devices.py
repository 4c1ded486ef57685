"""Run code with several simulated devices: JAX reads ``XLA_FLAGS`` once, when it initialises, so a
multi-device check runs in a fresh interpreter.

Example:
    >>> run_with_jax_devices("import jax; emit(jax.device_count())", devices=4)   # doctest: +SKIP
    4
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

from mithril.errors import MithrilError

__all__ = ["run_with_jax_devices", "simulated_devices_env"]

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
