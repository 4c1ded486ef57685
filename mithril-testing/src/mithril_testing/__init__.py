"""Reusable backend conformance suite: plain-NumPy references, test cases and a pytest base class.

    >>> from mithril.testing import CASES, REFERENCES
    >>> all(case.primitive in REFERENCES for case in CASES)
    True

``BackendConformanceTests`` needs pytest and is imported on first use, so ``CASES``, ``REFERENCES`` and
``TOLERANCES`` are usable without it.
"""

from __future__ import annotations

from typing import Any

from .cases import CASES, Case
from .references import REFERENCES

__all__ = ["BackendConformanceTests", "CASES", "Case", "REFERENCES", "TOLERANCES"]


def __getattr__(name: str) -> Any:
    if name in ("BackendConformanceTests", "TOLERANCES"):
        from . import conformance

        return getattr(conformance, name)
    raise AttributeError(f"module 'mithril.testing' has no attribute {name!r}")
