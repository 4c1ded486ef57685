"""Mithril's robust functions, written once with primitives: ``robust_log``, ``robust_sqrt``, ``robust_power``,
``stable_reciprocal`` and the log of probabilities that the losses take (``probability_log``).

Each switches to a finite form below a threshold ``t``. Left ``None``, ``t`` is Mithril's constant for the dtype
the model computes in, read at run time by the ``dtype_constant`` primitive (:mod:`mithril.numerics`): float64's
smallest normal number (about 2.2e-308) on a float64 backend, float32's (about 1.2e-38) on a float32 one. A
number given instead is used as it is. Every backend runs these same primitives, so they agree.

Example:
    >>> from mithril.framework.keys import IOKey
    >>> from mithril.models import Model
    >>> model = Model()
    >>> model.expose(robust_log(model, IOKey("input")), "output")
    >>> model.input_keys
    ['input']
"""

from __future__ import annotations

import math
from typing import Any

from ... import validation
from ...deprecation import warn_deprecated
from ...framework.model import Model
from ._util import op

__all__ = [
    "checked_threshold",
    "probability_log",
    "robust_log",
    "robust_power",
    "robust_sqrt",
    "stable_reciprocal",
    "threshold_of",
]


def checked_threshold(owner: str, threshold: float | None, *, eps: float | None = None) -> float | None:
    """A block's ``threshold=`` argument checked: ``None`` (the dtype's constant) as it is, a number > 0 as a
    float; ``eps=`` is the deprecated spelling, used when ``threshold`` is not given.

    >>> checked_threshold("KLDivergence", 1e-3)
    0.001
    """
    if eps is not None:
        warn_deprecated(f"{owner}(eps=)", "threshold=")
        threshold = eps if threshold is None else threshold
    if threshold is None:
        return None
    threshold = validation.number(owner, "threshold", threshold)
    if not 0.0 < threshold < math.inf:  # NaN fails this compare too
        raise validation.fail(owner, "threshold", "a finite number > 0", threshold)
    return threshold


def threshold_of(model: Model, like: Any, threshold: float | None, constant: str = "min_positive_normal") -> Any:
    """``threshold`` when given, else Mithril's per-dtype ``constant`` (``"min_positive_normal"`` or
    ``"stable_reciprocal_threshold"``) of ``like``'s dtype, a 0-d tensor computed by the model."""
    if threshold is not None:
        return float(threshold)
    return op(model, "dtype_constant", like, constant=constant)


def _log(model: Model, t: Any) -> Any:
    return math.log(t) if isinstance(t, float) else op(model, "log", t)


def _power(model: Model, t: Any, exponent: float) -> Any:
    return t**exponent if isinstance(t, float) else op(model, "power", t, exponent)


def _magnitude(model: Model, x: Any) -> Any:
    """``|x|`` whose gradient at 0 is +1 (Mithril's robust log takes ``x >= 0`` as positive there), the same on
    every backend (``abs``'s gradient at its kink is 0 on some, 1 on others)."""
    return op(model, "where", op(model, "less", x, 0.0), op(model, "neg", x), x)


def _size(model: Model, x: Any) -> Any:
    """``|x|`` as ``sign(x) * x``: gradient ``sign(x)``, 0 at 0 on every backend (Mithril's robust square root and
    power scale their gradients by ``sign(x)``)."""
    return op(model, "multiply", op(model, "sign", x), x)


def robust_log(model: Model, x: Any, threshold: float | None = None) -> Any:
    """Mithril's robust log in ``model``: ``log|x|`` where ``|x| >= t``, below it the tangent line at ``t``,
    ``log(t) + |x| / t - 1`` (``log(t) - 1`` at 0: about -709.4 in float64, -88.3 in float32), with gradient
    ``sign(x) / t`` there (``+1 / t`` at 0). Never NaN or ``-inf``."""
    t = threshold_of(model, x, threshold)
    size = _magnitude(model, x)
    small = op(model, "less", size, t)
    shift = _log(model, t) - 1.0 if isinstance(t, float) else op(model, "subtract", _log(model, t), 1.0)
    # min(|x|, t) / t: the line where it is taken, and no overflow (|x| / tiny) where it is not
    line = op(model, "add", op(model, "divide", op(model, "minimum", size, t), t), shift)
    # log of t where the line is taken: the branch not taken must have a finite gradient (0 * inf is NaN)
    exact = op(model, "log", op(model, "where", small, t, size))
    return op(model, "where", small, line, exact)


def robust_sqrt(model: Model, x: Any, threshold: float | None = None) -> Any:
    """Mithril's robust square root in ``model``: ``sqrt|x|`` where ``|x| >= t``, ``|x| / sqrt(t)`` below it
    (the gradient at 0 is 0, as Mithril's ``sign(x) * ...``)."""
    t = threshold_of(model, x, threshold)
    size = _size(model, x)
    small = op(model, "less", size, t)
    line = op(model, "multiply", size, _power(model, t, -0.5))
    exact = op(model, "sqrt", op(model, "where", small, t, size))
    return op(model, "where", small, line, exact)


def robust_power(model: Model, base: Any, exponent: Any, threshold: float | None = None) -> Any:
    """Mithril's robust power in ``model``: ``|base| ** exponent``, except where that is steeper than the line
    ``|base| / t`` below ``t`` (``|base| < t`` and ``exponent < 1 - log(t) / log|base|``), where it is the line:
    0 at 0, never NaN, finite gradients."""
    t = threshold_of(model, base, threshold)
    size = _size(model, base)
    # the bound only decides where the line is taken: no gradient through it (log 0 and log 1 would make one NaN)
    log_t, log_size = _log(model, t), op(model, "log", op(model, "stop_gradient", size))
    if isinstance(log_t, float):  # log(t) / log|base| without a Python number left of divide (refused on MLX)
        ratio = op(model, "multiply", op(model, "power", log_size, -1.0), log_t)
    else:
        ratio = op(model, "divide", log_t, log_size)
    bound = op(model, "subtract", 1.0, ratio)
    linear = op(model, "logical_and", op(model, "less", size, t), op(model, "less", exponent, bound))
    # the power of 1 where the line is taken: its gradient stays finite (0 * inf would be NaN)
    powered = op(model, "power", op(model, "where", linear, 1.0, size), exponent)
    # min(|base|, t) / t: the line where it is taken, and no overflow (|base| / tiny) where it is not
    return op(model, "where", linear, op(model, "divide", op(model, "minimum", size, t), t), powered)


def stable_reciprocal(model: Model, x: Any, threshold: float | None = None) -> Any:
    """Mithril's stable reciprocal in ``model``: ``1 / x`` where ``|x| >= t``; inside ``(-t, t)`` the tangent
    line at ``±t``, ``±2 / t - x / t**2`` (``+`` at 0), so values and gradients (``-1 / t**2`` there) stay finite
    and continuous at ``±t``. ``t`` defaults to Mithril's ``stable_reciprocal_threshold`` of the dtype."""
    t = threshold_of(model, x, threshold, "stable_reciprocal_threshold")
    small = op(model, "less", op(model, "abs", x), t)
    sign = op(model, "where", op(model, "less", x, 0.0), -1.0, 1.0)
    inverse = _power(model, t, -1.0)
    twice = 2.0 * inverse if isinstance(inverse, float) else op(model, "multiply", inverse, 2.0)
    slope = _power(model, t, -2.0)
    inner = op(model, "where", small, x, 0.0)  # x where the line is taken: no overflow (x / t**2) elsewhere
    line = op(model, "subtract", op(model, "multiply", sign, twice), op(model, "multiply", inner, slope))
    safe = op(model, "where", small, t, x)  # no division by (nearly) 0 on the branch not taken
    # safe ** -1 rather than 1.0 / safe: the shared divide cannot take a Python number on the left on MLX
    return op(model, "where", small, line, op(model, "power", safe, -1.0))


def probability_log(model: Model, p: Any, robust: bool | None, threshold: float | None = None) -> Any:
    """``log p`` as the losses take it: ``robust=True`` is Mithril's :func:`robust_log`; ``False`` the exact
    log (``-inf`` at 0, as Mithril's default); ``None`` (this project's default) ``log(max(p, t))``, the exact
    log for every ``p >= t`` (the dtype's smallest normal number unless ``threshold`` is given) and finite,
    with gradient 0, below it."""
    if robust is True:
        return robust_log(model, p, threshold)
    if robust is False:
        return op(model, "log", p)
    return op(model, "log", op(model, "maximum", p, threshold_of(model, p, threshold)))
