"""Compiled models go to a per-session cache unless $MITHRIL_C_CACHE is set (reruns then hit the cache)."""

import os
from pathlib import Path

os.environ.setdefault("MITHRIL_C_CACHE", str(Path(__file__).resolve().parent.parent / ".c-cache"))
