"""Bugs the fuzzer found that are not fixed yet, so the quick profile (``test_fuzz.py``) stays green.

Each entry names its regression test in ``regressions/`` (marked ``xfail(strict=True)``: when the bug is
fixed that test XPASSes and fails, and both it and this entry should be updated). ``matches`` recognises a
disagreement caused by the bug as narrowly as possible: the kind of failure *and* the model structure
that triggers it, so other bugs in the same models are still reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mithril_testing.fuzz import Disagreement

AUTOGRAD_BACKENDS = frozenset({"jax", "torch", "mlx"})


@dataclass(frozen=True)
class KnownBug:
    """A reported bug: where it shows, which regression test pins it, and how to recognise it."""

    name: str
    backends: frozenset[str]
    regressions: tuple[str, ...]
    diagnosis: str
    matches: Callable[[Disagreement], bool]

    def applies(self, found: Disagreement) -> bool:
        return found.backend in self.backends and self.matches(found)


def _kind(found: Disagreement) -> str:
    return found.category.split(":")[-1]


def _notes(found: Disagreement) -> str:
    return found.error + "\n" + "\n".join(m.note for m in found.mismatches)


KNOWN_BUGS: tuple[KnownBug, ...] = ()
"""None open (autograd-ignores-nondifferentiable was fixed by the compiler's stop_gradient pass)."""


def known_bug(found: Disagreement) -> KnownBug | None:
    """The known bug that explains ``found``, if any."""
    for bug in KNOWN_BUGS:
        if bug.applies(found):
            return bug
    return None
