"""Argument validation: the one place that decides what an accepted argument is and words the error.

Blocks (``Conv2d(kernel_size=...)``), primitive attributes (every ``Primitive(...)`` and every
``backend.<primitive>(...)`` call, through :data:`ATTRIBUTE_CHECKS`), ``ml.compile`` options and
``PhysicalModel`` methods all validate through these functions. Each returns the value normalised
(NumPy integers become ``int``, NumPy bools ``bool``) or raises :class:`~mithril.errors.ArgumentError`
(a ``ValueError`` and a ``TypeError``) naming where, the argument, what is accepted and what was given.

Example:
    >>> positive_int("Linear", "dimension", 4)
    4
    >>> positive_int("Linear", "dimension", "4")
    Traceback (most recent call last):
    ...
    mithril.errors.ArgumentError: Linear: dimension must be a positive int, got '4' (str)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .common import PaddingType
from .errors import ArgumentError
from .lazy_numpy import np

__all__ = [
    "ATTRIBUTE_CHECKS",
    "axis",
    "boolean",
    "check_attributes",
    "choice",
    "int_or_ints",
    "is_int",
    "key_names",
    "mapping",
    "number",
    "padding",
    "positive_int",
    "shape",
    "shape_template",
]


def _given(value: Any) -> str:
    """``'4' (str)``: the value and, where the repr does not show it, its type."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    if (isinstance(value, (bool, int, float)) and type(value) in (bool, int, float)) or value is None:
        return text
    return f"{text} ({type(value).__name__})"


def fail(where: str, name: str, accepted: str, value: Any) -> ArgumentError:
    """The error for argument ``name`` of ``where``: ``"<where>: <name> must be <accepted>, got <value>"``.

    >>> str(fail("Lambda", "fn", "a callable", 3))
    'Lambda: fn must be a callable, got 3'
    """
    prefix = f"{where}: " if where else ""
    return ArgumentError(f"{prefix}{name} must be {accepted}, got {_given(value)}")


def is_int(value: Any) -> bool:
    """An integer that is not a bool (NumPy integers included).

    >>> is_int(np.int32(3)), is_int(True), is_int(3.0)
    (True, False, False)
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(where: str, name: str, value: Any, *, optional: bool = False, minimum: int = 1) -> Any:
    """``value`` as an ``int >= minimum`` (``None`` passes when ``optional``).

    >>> positive_int("Conv2d", "padding", 0, minimum=0)
    0
    """
    if value is None and optional:
        return None
    if not is_int(value) or value < minimum:
        what = {1: "a positive int", 0: "a non-negative int"}.get(minimum, f"an int >= {minimum}")
        raise fail(where, name, what + (" or None" if optional else ""), value)
    return int(value)


def int_or_ints(where: str, name: str, value: Any, *, minimum: int, count: int | None = None) -> Any:
    """An int, or a tuple/list of ints (``count`` of them when given), each ``>= minimum``.

    >>> int_or_ints("Conv2d", "stride", (1, np.int64(2)), minimum=1)
    (1, 2)
    """
    what = {1: "a positive int", 0: "a non-negative int"}.get(minimum, f"an int >= {minimum}")
    if isinstance(value, (tuple, list)):
        items = list(value)
        if (
            not items
            or not all(is_int(v) and v >= minimum for v in items)
            or (count is not None and len(items) != count)
        ):
            entries = f"{count} of them" if count is not None else "them"
            raise fail(where, name, f"{what} or a tuple of {entries}", value)
        return type(value)(int(v) for v in items)
    if not is_int(value) or value < minimum:
        raise fail(where, name, f"{what} or a tuple of them", value)
    return int(value)


def padding(where: str, name: str, value: Any) -> Any:
    """``"same"``, ``"valid"`` (or ``mithril.common.PaddingType``), a non-negative int, per-axis ints or
    ``(before, after)`` pairs.

    >>> padding("Conv2d", "padding", ((1, 0), np.int64(2)))
    ((1, 0), 2)
    """
    if isinstance(value, PaddingType):
        return value.name.lower()
    if value in ("same", "valid"):
        return value
    items = value if isinstance(value, (tuple, list)) else [value]
    flat = [p for item in items for p in (item if isinstance(item, (tuple, list)) else [item])]
    if isinstance(value, str) or not flat or not all(is_int(p) and p >= 0 for p in flat):
        raise fail(where, name, "'same', 'valid', a non-negative int, per-axis ints or (before, after) pairs", value)
    if not isinstance(value, (tuple, list)):
        return int(value)
    return type(value)(
        type(item)(int(p) for p in item) if isinstance(item, (tuple, list)) else int(item) for item in value
    )


def number(
    where: str,
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    high_open: bool = False,
    optional: bool = False,
) -> Any:
    """A real number (not a bool) in ``[low, high]`` (``[low, high)`` with ``high_open``).

    >>> number("Dropout", "p", 0.25, low=0.0, high=1.0, high_open=True)
    0.25
    """
    if value is None and optional:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and value == value:  # NaN is never in range
        ok = (low is None or value >= low) and (high is None or (value < high if high_open else value <= high))
    elif ok:
        ok = low is None and high is None
    if not ok:
        if low is not None and high is not None:
            what = f"a number in [{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            what = f"a number >= {low}"
        else:
            what = "a number"
        raise fail(where, name, what + (" or None" if optional else ""), value)
    return value if isinstance(value, (int, float)) else float(value)


def positive_finite(where: str, name: str, value: Any, *, accepted: str = "a finite number > 0") -> float:
    """A real number (not a bool) that is finite and > 0, as a float; one that no float holds (``10**400``)
    is refused like ``inf``.

    >>> positive_finite("generate", "temperature", 1e-300)
    1e-300
    >>> positive_finite("run_demo", "lr", float("nan"))
    Traceback (most recent call last):
    ...
    mithril.errors.ArgumentError: run_demo: lr must be a finite number > 0, got nan
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number_ = float(value)
        except (OverflowError, TypeError, ValueError):
            number_ = math.inf
        if math.isfinite(number_) and number_ > 0:
            return number_
    raise fail(where, name, accepted, value)


def boolean(where: str, name: str, value: Any) -> bool:
    """``True`` or ``False`` (NumPy bools accepted).

    >>> boolean("Linear", "use_bias", np.bool_(True))
    True
    """
    if not isinstance(value, (bool, np.bool_)):
        raise fail(where, name, "True or False", value)
    return bool(value)


def choice(where: str, name: str, value: Any, choices: Iterable[Any]) -> Any:
    """One of ``choices`` (compared by value and type).

    >>> choice("CrossEntropy", "reduction", "sum", ("mean", "sum", "none"))
    'sum'
    """
    options = tuple(choices)
    if not any(value == c and type(value) is type(c) for c in options):
        raise fail(where, name, "one of " + ", ".join(repr(c) for c in options), value)
    return value


def axis(where: str, name: str, value: Any, *, optional: bool = True, multiple: bool = True) -> Any:
    """An axis (an int, negative counting from the end), ``None`` when ``optional``, or a tuple of axes.

    >>> axis("Sum", "axis", (0, np.int64(-1)))
    (0, -1)
    """
    if value is None and optional:
        return None
    if multiple and isinstance(value, (tuple, list)) and all(is_int(v) for v in value):
        return type(value)(int(v) for v in value)
    if not is_int(value):
        what = "an int axis" + (" or a tuple of them" if multiple else "") + (" or None" if optional else "")
        raise fail(where, name, what, value)
    return int(value)


def shape(where: str, name: str, value: Any, *, minimum: int = 0, allow_none: bool = False) -> Any:
    """A tuple/list of ints ``>= minimum`` (``None`` entries where ``allow_none``): ``reshape``'s target
    allows ``-1`` (inferred) and ``None`` (copy the input's dim), created arrays non-negative sizes.

    >>> shape("Reshape", "shape", [None, -1, np.int64(4)], minimum=-1, allow_none=True)
    [None, -1, 4]
    """
    if not isinstance(value, (tuple, list)) or not all(
        (is_int(v) and v >= minimum) or (allow_none and v is None) for v in value
    ):
        entries = f"ints >= {minimum}" + (" or None" if allow_none else "")
        raise fail(where, name, f"a tuple of {entries}", value)
    return type(value)(None if v is None else int(v) for v in value)


def shape_template(where: str, name: str, value: Any) -> list[Any]:
    """A shape template: a list/tuple of non-negative ints, symbol names (``"N"``), ``None`` (unknown) and at
    most one variadic segment (``("V", ...)`` or ``...``). NumPy ints become ``int``.

    >>> shape_template("IOKey('x')", "shape", ["N", np.int64(4)])
    ['N', 4]
    """
    accepted = "a list or tuple of non-negative ints, names, None and at most one ('V', ...)"
    if not isinstance(value, (list, tuple)):
        raise fail(where, name, accepted, value)
    result: list[Any] = []
    variadic = 0
    for item in value:
        if item is Ellipsis or (
            isinstance(item, tuple)
            and len(item) == 2
            and item[1] is Ellipsis
            and isinstance(item[0], (str, type(None)))
        ):
            variadic += 1
            result.append(item)
        elif item is None or (isinstance(item, str) and item):
            result.append(item)
        elif is_int(item) and item >= 0:
            result.append(int(item))
        else:
            raise fail(where, name, f"{accepted} (entry {item!r} is none of them)", value)
    if variadic > 1:
        raise fail(where, name, f"{accepted} (it has {variadic} variadic segments)", value)
    return result


def mapping(where: str, name: str, value: Any, *, optional: bool = True, what: str = "a dict of name -> value") -> Any:
    """A ``Mapping`` (``None`` passes when ``optional``).

    >>> mapping("ml.compile", "shapes", {"input": [2, 3]})
    {'input': [2, 3]}
    """
    if value is None and optional:
        return None
    if not isinstance(value, Mapping):
        raise fail(where, name, what + (" or None" if optional else ""), value)
    return value


def key_names(where: str, name: str, value: Any) -> set[str]:
    """A collection of non-empty key names (a single ``str`` is refused: ``data_keys="input"`` would be
    the set of its characters).

    >>> sorted(key_names("ml.compile", "data_keys", ["input", "target"]))
    ['input', 'target']
    """
    if value is None:
        return set()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) or isinstance(value, Mapping):
        hint = f"; for one key write {{{value!r}}}" if isinstance(value, str) else ""
        raise ArgumentError(f"{where}: {name} must be a set, list or tuple of key names, got {_given(value)}{hint}")
    names = list(value)
    bad = [v for v in names if not isinstance(v, str) or not v]
    if bad:
        raise ArgumentError(f"{where}: {name} must hold non-empty strings (key names), got {bad!r} in {names!r}")
    return set(names)


# -- primitive attributes ------------------------------------------------------------------------
_GELU_APPROXIMATE = {"tanh": True, "none": False}  # PyTorch's spelling, accepted as an alias


def _approximate(where: str, name: str, value: Any) -> bool:
    if isinstance(value, str) and value in _GELU_APPROXIMATE:
        return _GELU_APPROXIMATE[value]
    try:
        return boolean(where, name, value)
    except ArgumentError:
        raise fail(where, name, "True/False (or PyTorch's 'tanh'/'none')", value) from None


def _callable(where: str, name: str, value: Any) -> Any:
    if not callable(value):
        raise fail(where, name, "a callable", value)
    return value


_Check = Callable[[str, str, Any], Any]


def _bool(where: str, name: str, value: Any) -> bool:
    return boolean(where, name, value)


ATTRIBUTE_CHECKS: dict[str, _Check] = {
    # booleans
    **{key: _bool for key in ("keepdim", "causal", "categorical", "count_include_pad", "same_shape", "training")},
    "approximate": _approximate,
    # axes
    "axis": lambda w, n, v: axis(w, n, v),
    "axes": lambda w, n, v: (
        axis(w, n, v, multiple=True)
        if v is None or isinstance(v, (tuple, list))
        else axis(w, n, v, optional=False, multiple=True)
    ),
    **{
        key: (lambda w, n, v: axis(w, n, v, optional=False, multiple=False))
        for key in ("axis1", "axis2", "start_dim", "end_dim")
    },
    # windows
    "kernel_size": lambda w, n, v: int_or_ints(w, n, v, minimum=1),
    "stride": lambda w, n, v: None if v is None else int_or_ints(w, n, v, minimum=1),
    "dilation": lambda w, n, v: int_or_ints(w, n, v, minimum=1),
    "groups": lambda w, n, v: positive_int(w, n, v),
    "padding": padding,
    # numbers
    "p": lambda w, n, v: number(w, n, v, low=0.0, high=1.0, high_open=True),
    "eps": lambda w, n, v: number(w, n, v, low=0.0),
    **{key: (lambda w, n, v: number(w, n, v)) for key in ("slope", "nan")},
    **{key: (lambda w, n, v: number(w, n, v, optional=True)) for key in ("posinf", "neginf", "scale")},
    "correction": lambda w, n, v: number(w, n, v, low=0),
    "n": lambda w, n, v: positive_int(w, n, v),
    # a shape attribute (``reshape``, ``broadcast_to``, ``ones``, ``randn``): -1 and None are ``reshape``'s
    # (inferred / the input's dim); the primitives' shape rules refuse them where they mean nothing
    "shape": lambda w, n, v: (int(v),) if is_int(v) else shape(w, n, v, minimum=-1, allow_none=True),
    "fn": _callable,
}
"""Attribute name -> check, applied to every primitive that has an attribute of that name (the
catalogue uses one meaning per name: ``axis``, ``keepdim``, ``stride``, ...). A primitive's own
``check_attributes`` runs after these for what depends on the primitive (``reshape``'s ``shape``)."""


def check_attributes(where: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """Check and normalise ``attrs`` in place with :data:`ATTRIBUTE_CHECKS`; returns ``attrs``.

    >>> check_attributes("Primitive('sum')", {"axis": np.int64(1), "keepdim": False})
    {'axis': 1, 'keepdim': False}
    """
    for key, value in attrs.items():
        check = ATTRIBUTE_CHECKS.get(key)
        if check is not None:
            attrs[key] = check(where, key, value)
    return attrs
