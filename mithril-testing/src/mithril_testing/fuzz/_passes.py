"""Test-only switches over the compiler's optimisation passes: turn them off, to check that no pass changes a
result, and count what each changed.

``ml.compile`` has no option for it: both go through core's pass hook (:func:`mithril.extend.pass_hook`), which
sees every run of constant folding, common-subexpression elimination and dead-node pruning. Integer promotion is
not an optimisation (it gives int inputs of float primitives their float semantics) and is never disabled.

The hooks hold for the thread (and asyncio task) that entered the block, and nest.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Model, Primitive, IOKey
    >>> model = Model()
    >>> model |= Primitive("add")(left="x", right=1.0, output=IOKey("y"))
    >>> with passes_disabled("cse", "prune"):
    ...     pm = ml.compile(model, ml.NumpyBackend(), shapes={"x": [2]}, data_keys=["x"])
    >>> pm.evaluate({}, {"x": ml.NumpyBackend().array([1.0, 2.0])})["y"].tolist()
    [2.0, 3.0]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from mithril.extend import PASS_NAMES, pass_hook

__all__ = ["PASSES", "VARIANTS", "passes_disabled", "passes_recorded"]

PASSES: dict[str, str] = {
    "fold": "constant_folding",
    "cse": "cse",
    "prune": "pruning",
}
"""Short name -> the pass's name in :data:`mithril.extend.PASS_NAMES`."""

VARIANTS: dict[str, tuple[str, ...]] = {
    "default": (),
    "no-fold": ("fold",),
    "no-cse": ("cse",),
    "no-prune": ("prune",),
    "no-passes": ("fold", "cse", "prune"),
}
"""Compilation variants a fuzz check runs: name -> passes disabled."""

_SHORT = {name: short for short, name in PASSES.items()}


@contextlib.contextmanager
def passes_disabled(*names: str) -> Iterator[None]:
    """Within the block, ``ml.compile`` skips the named passes (``"fold"``, ``"cse"``, ``"prune"``): each
    leaves the graph as it is and reports 0 nodes changed.

    With no names nothing is disabled. Unknown names raise ``ValueError``.

    >>> with passes_disabled("fold"):
    ...     pass
    """
    unknown = set(names) - set(PASSES)
    if unknown:
        raise ValueError(f"unknown pass(es) {sorted(unknown)}; known: {', '.join(PASSES)}")
    stale = [PASSES[short] for short in names if PASSES[short] not in PASS_NAMES]
    if stale:
        raise RuntimeError(f"mithril has no optimisation pass {stale}; update mithril_testing.fuzz.PASSES")
    skipped = {PASSES[short] for short in names}

    def skip(name: str, run: Callable[[], int]) -> int:
        return 0 if name in skipped else run()

    with pass_hook(skip):
        yield


@contextlib.contextmanager
def passes_recorded() -> Iterator[dict[str, int]]:
    """Within the block, count what each pass changes: yields ``{"fold": n, "cse": n, "prune": n}``, the
    nodes each pass folded/merged/removed over the ``ml.compile`` calls made in the block.

    A variant that disables only passes which changed nothing compiles to the same program, so the fuzz
    checker need not compile it.

    >>> import mithril as ml
    >>> from mithril.models import IOKey, Model, Primitive
    >>> model = Model()
    >>> model |= Primitive("exp")(input="x", output=IOKey("y"))
    >>> with passes_recorded() as changed:
    ...     _ = ml.compile(model, ml.NumpyBackend(), shapes={"x": [2]}, data_keys=["x"])
    >>> changed
    {'fold': 0, 'cse': 0, 'prune': 0}
    """
    counts = dict.fromkeys(PASSES, 0)

    def count(name: str, run: Callable[[], int]) -> int:
        changed = run()
        short = _SHORT.get(name)
        if short is not None:
            counts[short] += int(changed or 0)
        return changed

    with pass_hook(count):
        yield counts
