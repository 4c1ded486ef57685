"""Fuzz tests: C and GGML libraries built for fuzzed models go to a temporary cache removed afterwards
(every model is new, so a persistent cache would only grow), unless $MITHRIL_C_CACHE is set; only the
tests in this folder see it. ``known_bugs.py`` is importable from the tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True, scope="package")
def _fuzz_c_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if os.environ.get("MITHRIL_C_CACHE"):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MITHRIL_C_CACHE", str(tmp_path_factory.mktemp("mithril-fuzz-c")))
        yield
