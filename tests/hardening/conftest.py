"""The hardening tests' shared names live in ``_hardening_helpers.py``, importable from the tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
