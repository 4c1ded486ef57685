"""Fuzz tests: C and GGML libraries built for fuzzed models go to a temporary cache removed at exit (every
model is new, so a persistent cache would only grow), unless $MITHRIL_C_CACHE is set. ``known_bugs.py``
is importable from the tests."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

if not os.environ.get("MITHRIL_C_CACHE"):
    _cache = tempfile.mkdtemp(prefix="mithril-fuzz-c-")
    os.environ["MITHRIL_C_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, True)
