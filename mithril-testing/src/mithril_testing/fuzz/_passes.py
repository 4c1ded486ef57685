"""Test-only switch to turn the compiler's optimisation passes off, to check that no pass changes a result.

``ml.compile`` has no option for it: :func:`passes_disabled` temporarily replaces the pass functions that
:mod:`mithril.compiler.compile` calls (constant folding, common-subexpression elimination, dead-node
pruning) by identities that leave the graph as it is. Integer promotion is not an optimisation (it gives
int inputs of float primitives their float semantics) and is never disabled.

It patches module globals, so it is process-wide and not thread-safe: use it around one ``ml.compile``
at a time, in tests.

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
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["PASSES", "VARIANTS", "passes_disabled", "passes_recorded"]

PASSES: dict[str, str] = {
    "fold": "fold_constants",
    "cse": "eliminate_common_subexpressions",
    "prune": "prune",
}
"""Short name -> the pass function's name in :mod:`mithril.compiler.compile`."""

VARIANTS: dict[str, tuple[str, ...]] = {
    "default": (),
    "no-fold": ("fold",),
    "no-cse": ("cse",),
    "no-prune": ("prune",),
    "no-passes": ("fold", "cse", "prune"),
}
"""Compilation variants a fuzz check runs: name -> passes disabled."""


def _identity(*args: Any, **kwargs: Any) -> int:
    """A pass that changes nothing (reports 0 nodes changed, as the passes do)."""
    return 0


def _compile_module() -> Any:
    import mithril.compiler.compile  # noqa: F401 - make sure it is loaded

    return sys.modules["mithril.compiler.compile"]


@contextlib.contextmanager
def passes_disabled(*names: str) -> Iterator[None]:
    """Within the block, ``ml.compile`` skips the named passes (``"fold"``, ``"cse"``, ``"prune"``).

    With no names nothing is disabled. Unknown names raise ``ValueError``.

    >>> with passes_disabled("fold"):
    ...     pass
    """
    unknown = set(names) - set(PASSES)
    if unknown:
        raise ValueError(f"unknown pass(es) {sorted(unknown)}; known: {', '.join(PASSES)}")
    module = _compile_module()
    saved = {}
    for name in names:
        attr = PASSES[name]
        if not hasattr(module, attr):
            raise RuntimeError(
                f"mithril.compiler.compile has no pass function {attr!r}; update mithril_testing.fuzz.PASSES"
            )
        saved[attr] = getattr(module, attr)
    try:
        for attr in saved:
            setattr(module, attr, _identity)
        yield
    finally:
        for attr, function in saved.items():
            setattr(module, attr, function)


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
    module = _compile_module()
    counts = dict.fromkeys(PASSES, 0)
    saved = {short: getattr(module, attr) for short, attr in PASSES.items()}

    def counting(short: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            changed = function(*args, **kwargs)
            counts[short] += int(changed or 0)
            return changed

        return wrapper

    try:
        for short, function in saved.items():
            setattr(module, PASSES[short], counting(short, function))
        yield counts
    finally:
        for short, function in saved.items():
            setattr(module, PASSES[short], function)
