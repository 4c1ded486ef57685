"""An undo journal for the logical layer: a failed connection restores everything it changed.

Connecting models unifies shapes and merges values in place (union-find), so an error found halfway
through ``model |= child(...)`` would leave both models half-connected. Inside :func:`transaction`,
every object about to be written is first saved with :func:`touch` (its slots, a shallow copy of its
``__dict__``, or what its ``_journal_snapshot()`` returns); if the block raises, all saved objects are
restored, newest first.

Example:
    >>> from mithril.journal import touch, transaction
    >>> class Box:
    ...     __slots__ = ("value",)
    >>> box = Box(); box.value = 1
    >>> try:
    ...     with transaction():
    ...         touch(box); box.value = 2
    ...         raise ValueError("connection failed")
    ... except ValueError:
    ...     pass
    >>> box.value
    1
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

__all__ = ["active", "touch", "transaction"]


class _Trail:
    __slots__ = ("saved", "seen")

    def __init__(self) -> None:
        self.saved: list[tuple[Any, Any]] = []
        self.seen: set[int] = set()


_CURRENT: list[_Trail] = []  # the open transaction (at most one; nested blocks join it)


def active() -> bool:
    """Whether a transaction is open (writes must be announced with :func:`touch`)."""
    return bool(_CURRENT)


_MISSING: Any = object()


@functools.cache
def _slot_names(cls: type) -> tuple[str, ...] | None:
    """Every slot of ``cls`` and its bases, or ``None`` when its instances have a ``__dict__``."""
    names: list[str] = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        slots = klass.__dict__.get("__slots__")
        if slots is None:
            return None
        names.extend([slots] if isinstance(slots, str) else slots)
    return tuple(dict.fromkeys(n for n in names if n not in ("__weakref__", "__dict__")))


def touch(obj: Any) -> None:
    """Save ``obj``'s state before its first write in the open transaction (no-op outside one)."""
    if not _CURRENT:
        return
    trail = _CURRENT[0]
    key = id(obj)
    if key in trail.seen:
        return
    trail.seen.add(key)
    cls: type = type(obj)
    snapshot = getattr(cls, "_journal_snapshot", None)
    if snapshot is not None:  # large objects save only what they need to undo (see Graph)
        trail.saved.append((obj, _Custom(snapshot(obj))))
        return
    slots = _slot_names(cls)
    if slots is not None:
        trail.saved.append((obj, tuple(getattr(obj, name, _MISSING) for name in slots)))
    else:
        state = {k: (v.copy() if isinstance(v, (list, dict, set)) else v) for k, v in vars(obj).items()}
        trail.saved.append((obj, state))


class _Custom:
    """State saved by an object's own ``_journal_snapshot()``, given back to its ``_journal_restore``."""

    __slots__ = ("state",)

    def __init__(self, state: Any) -> None:
        self.state = state


def _restore(trail: _Trail) -> None:
    for obj, state in reversed(trail.saved):
        if isinstance(state, _Custom):
            obj._journal_restore(state.state)
        elif isinstance(state, dict):
            obj.__dict__.clear()
            obj.__dict__.update(state)
        else:
            cls: type = type(obj)
            for name, value in zip(_slot_names(cls) or (), state, strict=True):
                if value is _MISSING:
                    if hasattr(obj, name):
                        object.__delattr__(obj, name)
                else:
                    object.__setattr__(obj, name, value)


@contextlib.contextmanager
def transaction() -> Iterator[None]:
    """Run a block whose writes are undone if it raises. Nested blocks join the outer transaction."""
    if _CURRENT:
        yield
        return
    trail = _Trail()
    _CURRENT.append(trail)
    try:
        yield
    except BaseException:
        _restore(trail)
        raise
    finally:
        _CURRENT.clear()
