"""Symbolic shapes: dimensions and variadic segments unified through union-find.

A :class:`Shape` is ``prefix + [variadic] + suffix``: a list of :class:`Dim` before and after at most one
:class:`Variadic` segment (a run of dims of unknown length). Unifying two shapes links their dims and
binds variadics, so every shape that shares a dim or a segment sees later refinements for free.

Example:
    >>> from mithril.shapes import Dim, Shape, Variadic, unify
    >>> batch = Variadic()
    >>> x = Shape([], batch, [Dim(4)])          # [..., 4]
    >>> y = Shape([Dim(32), Dim(), Dim()])       # [32, ?, ?]
    >>> unify(x, y)
    >>> x.ints()
    (32, None, 4)
"""

from __future__ import annotations

import collections
import itertools
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ShapeError
from ..journal import _CURRENT, touch
from ..union_find import find_root

__all__ = [
    "Dim",
    "Shape",
    "ShapeMismatch",
    "ShapeUndetermined",
    "Variadic",
    "changes_since",
    "describe_shape",
    "epoch",
    "note_change",
    "reset_change_log",
    "unify",
    "unify_dims",
]  # fmt: skip

_counter = itertools.count()
_EPOCH = [0]  # bumped on every refinement; rules use it to tell whether a pass made progress
_LOG_SIZE = 1 << 16
_LOG: collections.deque[int] = collections.deque(maxlen=_LOG_SIZE)  # ids of the roots refined, oldest first


def epoch() -> int:
    """A number that changes whenever any dim or variadic is refined (used by the solver)."""
    return _EPOCH[0]


def changes_since(position: int) -> list[int] | None:
    """``id()`` of every dim/variadic root refined since ``epoch()`` was ``position``; ``None`` when the
    bounded log no longer reaches back that far (the caller then re-checks everything)."""
    missed = _EPOCH[0] - position
    if missed > len(_LOG) or missed < 0:
        return None
    return list(itertools.islice(reversed(_LOG), missed))


def reset_change_log() -> None:
    """Forget the change log (every solver falls back to a full pass once); for tests and long sessions."""
    _LOG.clear()
    _EPOCH[0] += _LOG_SIZE + 1


def note_change(*changed: object) -> None:
    """Record that ``changed`` objects were refined: dims and variadics (done here) or graph values whose
    kind became known (done by the graph), so the solver wakes the rules that read them."""
    _bump(*changed)


def _bump(*changed: object) -> None:
    for obj in changed:
        _EPOCH[0] += 1
        _LOG.append(id(obj))


class ShapeMismatch(ShapeError):
    """Raised by unification; callers turn it into a :class:`~mithril.errors.ShapeError` with context."""


class ShapeUndetermined(ShapeError):
    """Two variadic shapes overlap ambiguously (``[..., 3]`` vs ``[N, C, ...]``): no single answer yet.

    Callers retry later (shape rules stay pending; connections become deferred equalities)."""


class Dim:
    """One dimension: a known ``int`` or a symbol, unified with others through union-find."""

    __slots__ = ("_id", "_parent", "_value")

    def __init__(self, value: int | None = None) -> None:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ShapeMismatch(f"a dimension must be a non-negative int, got {value!r}")
        self._parent: Dim | None = None
        self._value = value
        self._id = next(_counter)

    def find(self) -> Dim:
        return find_root(self)

    @property
    def value(self) -> int | None:
        return self.find()._value

    def set(self, value: int) -> None:
        """Give this dim a concrete value (error if it already has a different one)."""
        root = self.find()
        if root._value is None:
            touch(root)
            root._value = value
            _bump(root)
        elif root._value != value:
            raise ShapeMismatch(f"{root._value} != {value}")

    def __repr__(self) -> str:
        value = self.value
        return str(value) if value is not None else f"d{self.find()._id}"


def unify_dims(a: Dim, b: Dim) -> None:
    """Make ``a`` and ``b`` the same dimension (error if both are known and differ)."""
    ra, rb = a.find(), b.find()
    if ra is rb:
        return
    if ra._value is not None and rb._value is not None and ra._value != rb._value:
        raise ShapeMismatch(f"{ra._value} != {rb._value}")
    informative = ra._value is None or rb._value is None  # linking two equal known dims teaches nothing
    # A known dim stays the root (its value shows through); of two symbols the older stays, so the long-
    # lived dims of a model (batch, sequence) keep their identity and the rules reading them stay asleep.
    if ra._value is None and (rb._value is not None or ra._id > rb._id):
        touch(ra)
        ra._parent = rb
        moved = ra
    else:
        touch(rb)
        rb._parent = ra
        moved = rb
    if informative:
        _bump(moved)  # only shapes holding the re-parented root see a change; the surviving root's do not


class Variadic:
    """A run of dims of unknown length; once bound it stands for ``prefix + [inner] + suffix``."""

    __slots__ = ("_binding", "_id", "_parent")

    def __init__(self) -> None:
        self._parent: Variadic | None = None
        self._binding: tuple[list[Dim], Variadic | None, list[Dim]] | None = None
        self._id = next(_counter)

    def find(self) -> Variadic:
        return find_root(self)

    def bind(self, prefix: list[Dim], inner: Variadic | None, suffix: list[Dim]) -> None:
        root = self.find()
        if root._binding is not None:
            raise AssertionError("variadic already bound")  # callers normalise first
        touch(root)
        if inner is not None and inner.find() is root:
            if prefix or suffix:
                raise ShapeMismatch("a variadic segment cannot contain itself")
            return
        if inner is not None and not prefix and not suffix:
            root._parent = inner.find()
        else:
            root._binding = (list(prefix), inner, list(suffix))
        _bump(root)


def _expand(
    prefix: Iterable[Dim], var: Variadic | None, suffix: Iterable[Dim]
) -> tuple[list[Dim], Variadic | None, list[Dim]]:
    """Resolve bound variadics recursively into ``(prefix, unbound root variadic or None, suffix)``."""
    head = list(prefix)
    tail = list(suffix)
    while var is not None:
        root = var.find()
        if root._binding is None:
            return head, root, tail
        p, var, s = root._binding
        head.extend(p)
        tail[:0] = s
    return head, None, tail


class Shape:
    """A symbolic tensor shape (see module docstring). Shapes are views; dims and variadics carry state."""

    __slots__ = ("_prefix", "_suffix", "_var")

    def __init__(self, prefix: Sequence[Dim] = (), var: Variadic | None = None, suffix: Sequence[Dim] = ()) -> None:
        self._prefix = list(prefix)
        self._var = var
        self._suffix = list(suffix)

    @classmethod
    def of(cls, dims: Sequence[int | None]) -> Shape:
        """A fixed-rank shape from ints (``None`` for an unknown dim). ``Shape.of([2, None])``."""
        return cls([Dim(d) for d in dims])

    @classmethod
    def unknown(cls) -> Shape:
        """A shape of unknown rank."""
        return cls([], Variadic(), [])

    def parts(self) -> tuple[list[Dim], Variadic | None, list[Dim]]:
        """The normalised ``(prefix, variadic, suffix)``; ``variadic`` is ``None`` when the rank is known."""
        var = self._var
        if var is None:
            return self._prefix, None, self._suffix
        root = var.find()
        if root._binding is None:  # nothing to expand: no need to rewrite (or journal) the cache
            return self._prefix, root, self._suffix
        prefix, var, suffix = _expand(self._prefix, root, self._suffix)
        if _CURRENT:
            touch(self)
        self._prefix, self._var, self._suffix = prefix, var, suffix
        return prefix, var, suffix

    @property
    def rank(self) -> int | None:
        prefix, var, suffix = self.parts()
        return None if var is not None else len(prefix) + len(suffix)

    def dims(self) -> list[Dim] | None:
        """All dims when the rank is known, else ``None``."""
        prefix, var, suffix = self.parts()
        return None if var is not None else prefix + suffix

    def ints(self) -> tuple[int | None, ...] | None:
        """The dims as ints (``None`` where symbolic), or ``None`` when the rank is unknown."""
        dims = self.dims()
        return None if dims is None else tuple(d.value for d in dims)

    def static(self) -> tuple[int, ...] | None:
        """The fully known shape, or ``None`` if any dim (or the rank) is unknown."""
        values = self.ints()
        if values is None or any(v is None for v in values):
            return None
        return values  # type: ignore[return-value]

    def roots(self) -> list[object]:
        """The root dims (and the open variadic) of this shape: what a rule reading it depends on."""
        prefix, var, suffix = self.parts()
        found: list[object] = [d.find() for d in prefix]
        found.extend(d.find() for d in suffix)
        if var is not None:
            found.append(var)
        return found

    def min_rank(self) -> int:
        prefix, _, suffix = self.parts()
        return len(prefix) + len(suffix)

    def __repr__(self) -> str:
        prefix, var, suffix = self.parts()
        items = [repr(d) for d in prefix]
        if var is not None:
            items.append(f"(V{var._id}, ...)")
        items.extend(repr(d) for d in suffix)
        return "[" + ", ".join(items) + "]"


def unify(a: Shape, b: Shape) -> None:
    """Make two shapes equal, binding variadics and linking dims. Raises :class:`ShapeMismatch`."""
    p1, v1, s1 = a.parts()
    p2, v2, s2 = b.parts()
    if v1 is None and v2 is None:
        if len(p1) + len(s1) != len(p2) + len(s2):
            raise ShapeMismatch(f"rank {len(p1) + len(s1)} != rank {len(p2) + len(s2)}")
        for x, y in zip(p1 + s1, p2 + s2, strict=True):
            unify_dims(x, y)
        return
    if v1 is None:  # make ``a`` the variadic side
        p1, v1, s1, p2, v2, s2 = p2, v2, s2, p1, v1, s1
    assert v1 is not None
    if v2 is None:
        full = p2 + s2
        if len(full) < len(p1) + len(s1):
            raise ShapeMismatch(f"rank {len(full)} < required rank >= {len(p1) + len(s1)}")
        for x, y in zip(p1, full, strict=False):  # the fixed prefix and suffix against the ends of the longer shape
            unify_dims(x, y)
        for x, y in zip(reversed(s1), reversed(full), strict=False):
            unify_dims(x, y)
        v1.bind(full[len(p1) : len(full) - len(s1)], None, [])
        return
    # both variadic: align the common prefix and suffix, then share one fresh segment.
    n = min(len(p1), len(p2))
    for x, y in zip(p1[:n], p2[:n], strict=True):
        unify_dims(x, y)
    m = min(len(s1), len(s2))
    for i in range(1, m + 1):
        unify_dims(s1[-i], s2[-i])
    extra_p1, extra_p2 = p1[n:], p2[n:]
    extra_s1, extra_s2 = s1[: len(s1) - m], s2[: len(s2) - m]
    if (extra_p1 and extra_s2) or (extra_p2 and extra_s1):
        raise ShapeUndetermined(f"{a!r} and {b!r} can be matched in several ways")
    if v1.find() is v2.find():
        if extra_p1 or extra_p2 or extra_s1 or extra_s2:
            raise ShapeMismatch("a variadic segment cannot equal itself plus extra dims")
        return
    if not (extra_p1 or extra_p2 or extra_s1 or extra_s2):
        v1.bind([], v2, [])
        return
    shared = Variadic()
    v1.bind(extra_p2, shared, extra_s2)
    v2.bind(extra_p1, shared, extra_s1)


def describe_shape(shape: Shape) -> list[Any]:
    """A user-facing view of a symbolic shape: ints, ``"d<n>"`` symbols and ``"..."`` for a variadic."""
    prefix, var, suffix = shape.parts()
    items: list[Any] = [d.value if d.value is not None else repr(d) for d in prefix]
    if var is not None:
        items.append("...")
    items.extend(d.value if d.value is not None else repr(d) for d in suffix)
    return items


def shape_from_template(template: Sequence[object], symbols: dict[str, object]) -> Shape:
    """Build a :class:`Shape` from a user template such as ``["N", ("V", ...), 4, None]``.

    Strings are symbols shared through ``symbols`` (one template call or one ``set_shapes`` call);
    ``("V", ...)`` or ``...`` is the variadic segment; ``None`` is a fresh unknown dim.
    """
    if not isinstance(template, (list, tuple)):
        raise ShapeMismatch(
            f"a shape template must be a list or tuple such as ['N', 4], got {template!r} ({type(template).__name__})"
        )
    prefix: list[Dim] = []
    suffix: list[Dim] = []
    var: Variadic | None = None
    for item in template:
        if item is Ellipsis or (isinstance(item, tuple) and len(item) == 2 and item[1] is Ellipsis):
            if var is not None:
                raise ShapeMismatch(f"a shape may hold one variadic segment, got {list(template)!r}")
            name = item[0] if isinstance(item, tuple) else None
            if name is None:
                var = Variadic()
            else:
                found = symbols.setdefault(str(name), Variadic())
                if not isinstance(found, Variadic):
                    raise ShapeMismatch(f"symbol {name!r} used both as a dim and as a variadic")
                var = found
            continue
        if item is None:
            dim = Dim()
        elif isinstance(item, str):
            found = symbols.setdefault(item, Dim())
            if not isinstance(found, Dim):
                raise ShapeMismatch(f"symbol {item!r} used both as a dim and as a variadic")
            dim = found
        elif isinstance(item, Dim):
            dim = item
        elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
            if item < 0:
                raise ShapeMismatch(f"invalid shape entry {item!r} in {list(template)!r}: sizes are non-negative ints")
            dim = Dim(int(item))
        else:
            raise ShapeMismatch(
                f"invalid shape entry {item!r} in {list(template)!r}; use ints, names, None or ('V', ...)"
            )
        (suffix if var is not None else prefix).append(dim)
    return Shape(prefix, var, suffix)
