"""Fixtures for the seed-example tests (helpers live in ``_seed_helpers.py``, importable from the tests).

``backend_or_numpy("jax", **options)`` builds the block's own backend when its plugin is installed and
falls back to ``ml.NumpyBackend`` (never a mock) when it is not; the backend actually used is recorded per
test (``user_properties``) and printed in the terminal summary under "seed backends".
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _seed_helpers import backend_class_or_numpy, backend_or_numpy  # noqa: F401

_USED: dict[str, list[str]] = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.skipped):
        for key, value in report.user_properties:
            if key == "seed_backend":
                _USED.setdefault(report.nodeid.split("::")[-1], []).append(value)


def pytest_terminal_summary(terminalreporter):
    if not _USED:
        return
    terminalreporter.section("seed backends")
    for name, used in sorted(_USED.items()):
        terminalreporter.write_line(f"{name}: {', '.join(dict.fromkeys(used))}")
