"""Mithril's test kit: the backend conformance suite, plain-NumPy references and test cases.

    >>> from mithril_testing import CASES, REFERENCES
    >>> all(case.primitive in REFERENCES for case in CASES)
    True

A backend package's tests subclass :class:`BackendConformanceTests` (``mithril_testing.conformance``) to run
every primitive x dtype, forward and gradient, against the references; ``mithril_testing.fuzz`` is the
differential fuzzer, ``mithril_testing.blocks`` runs a model on every installed backend and
``mithril_testing.devices`` runs code with several simulated JAX devices (or processes);
``mithril_testing.models`` and ``mithril_testing.caches`` hold small models and cache damages that tests and
benchmarks share.

``BackendConformanceTests`` and ``TOLERANCES`` import pytest and are imported on first use, so ``CASES`` and
``REFERENCES`` are usable without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cases import CASES, Case
from .references import REFERENCES

if TYPE_CHECKING:
    from .conformance import TOLERANCES, BackendConformanceTests

__all__ = ["CASES", "REFERENCES", "TOLERANCES", "BackendConformanceTests", "Case"]


def __getattr__(name: str) -> Any:
    if name in ("BackendConformanceTests", "TOLERANCES"):
        from . import conformance

        return getattr(conformance, name)
    raise AttributeError(f"module 'mithril_testing' has no attribute {name!r}")
