"""Observing or substituting the optimisation passes ``ml.compile`` runs, for tests and tools.

``ml.compile`` runs its optional optimisation passes by name through :func:`run_pass`:
``"constant_folding"`` (:func:`~mithril.compiler.passes.fold_constants`), ``"cse"``
(:func:`~mithril.compiler.passes.eliminate_common_subexpressions`) and ``"pruning"``
(:func:`~mithril.compiler.passes.prune`), once on the forward graph and again after the backward pass and the
training step joined it. Each returns how many nodes it changed (folded, merged, removed).

Within ``with pass_hook(hook):`` every such run calls ``hook(name, run)`` instead, where ``run()`` runs the pass
and returns its count; whatever the hook returns is the count. A hook observes (call ``run()``, record the
count, return it) or substitutes (return ``0`` without calling ``run()``: the pass is skipped and the graph left
as it is). Hooks nest: the outermost one is called first and its ``run`` calls the next. They are kept per
thread and per asyncio task (a :class:`contextvars.ContextVar`), so a hook never reaches another thread's
compile. Integer promotion, decomposition and the placement of host values are not optimisations (they give
the graph its meaning on the backend) and never go through a hook.

Example (the counts of one compile, and the same compile without common-subexpression elimination):
    >>> import mithril as ml
    >>> from mithril.models import IOKey, Model, Primitive
    >>> model = Model()
    >>> model |= Primitive("exp")(input="x", output=IOKey("a"))
    >>> model |= Primitive("exp")(input="x", output=IOKey("b"))
    >>> counts = {}
    >>> def record(name, run):
    ...     changed = run()
    ...     counts[name] = counts.get(name, 0) + changed
    ...     return changed
    >>> with pass_hook(record):
    ...     pm = ml.compile(model, ml.NumpyBackend(), shapes={"x": [2]}, data_keys=["x"], inference=True)
    >>> counts["cse"], pm.primitive_count
    (1, 1)
    >>> with pass_hook(lambda name, run: 0 if name == "cse" else run()):
    ...     pm = ml.compile(model, ml.NumpyBackend(), shapes={"x": [2]}, data_keys=["x"], inference=True)
    >>> pm.primitive_count
    2
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

from ...errors import ArgumentError
from .constant_folding import fold_constants
from .cse import eliminate_common_subexpressions
from .pruning import prune

__all__ = ["PASS_NAMES", "PassHook", "pass_hook", "run_pass"]

PassHook = Callable[[str, Callable[[], int]], int]
"""``hook(name, run) -> count``: called instead of the pass ``name``; ``run()`` runs it and returns its count."""

_PASSES: dict[str, Callable[..., int]] = {
    "constant_folding": fold_constants,
    "cse": eliminate_common_subexpressions,
    "pruning": prune,
}
PASS_NAMES: tuple[str, ...] = tuple(_PASSES)
"""The optimisation passes a hook sees, by the names ``ml.compile(optimizations=...)`` uses where it has one."""

_HOOKS: contextvars.ContextVar[tuple[PassHook, ...]] = contextvars.ContextVar("mithril_pass_hooks", default=())


@contextlib.contextmanager
def pass_hook(hook: PassHook) -> Iterator[None]:
    """Within the block, every optimisation pass ``ml.compile`` runs goes through ``hook(name, run)`` (see the
    module docstring). A ``hook`` that is not callable is an :class:`~mithril.errors.ArgumentError` (a
    ``TypeError``)."""
    if not callable(hook):
        raise ArgumentError(f"pass_hook: expected a function hook(name, run) -> int, got {hook!r}")
    token = _HOOKS.set((*_HOOKS.get(), hook))
    try:
        yield
    finally:
        _HOOKS.reset(token)


def run_pass(name: str, *args: Any) -> int:
    """Run the optimisation pass ``name`` (one of :data:`PASS_NAMES`) on ``args``, through the hooks installed
    by :func:`pass_hook`; returns how many nodes it changed."""
    function = _PASSES[name]
    hooks = _HOOKS.get()
    if not hooks:
        return function(*args)

    def call(depth: int) -> int:
        if depth == len(hooks):
            return function(*args)
        return int(hooks[depth](name, lambda: call(depth + 1)))

    return call(0)
