"""Mithril's published programs, imported unchanged from a checkout of Mithril's repository.

The tests that use them skip unless ``MITHRIL_CHECKOUT`` names a checkout (CI stays offline). Only the
checkout's ``examples`` package is put on the path, through a symlink in a temporary folder, so
``import mithril`` keeps meaning this project.

    MITHRIL_CHECKOUT=/path/to/mithril python -m pytest tests/published
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

ENV = "MITHRIL_CHECKOUT"


def checkout() -> Path:
    """The checkout named by ``MITHRIL_CHECKOUT``, or skip the calling test."""
    given = os.environ.get(ENV)
    if not given:
        pytest.skip(f"set {ENV} to a checkout of Mithril's repository to run its published programs")
    path = Path(given)
    if not (path / "examples").is_dir():
        pytest.fail(f"{ENV}={given!r} has no examples/ folder; expected a checkout of synnada-ai/mithril")
    return path


def examples_root(source: Path) -> Path:
    """A temporary folder holding only a link to ``source / "examples"`` (never the checkout's ``mithril``)."""
    root = Path(tempfile.mkdtemp(prefix="mithril-examples-"))
    (root / "examples").symlink_to(source / "examples", target_is_directory=True)
    return root


def published(module: str) -> ModuleType:
    """``examples.<module>`` from the checkout, imported unchanged (``published("gpt.model")``)."""
    source = checkout()
    root = str(examples_root(source))
    sys.path.insert(0, root)
    try:
        return importlib.import_module(f"examples.{module}")
    finally:
        sys.path.remove(root)
