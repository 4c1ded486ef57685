"""Learning-rate schedules: the rate as a function of the step count (0 for the first update), computed
inside the compiled training step and, for display, as a float.

Each schedule is written once over a ``math`` object (:mod:`mithril.optim._math`), so ``schedule(10)``
(a float, what ``fit`` shows) and the compiled step use one formula. Schedules compose: :func:`join`
runs one schedule, then another from a boundary step; ``linear_warmup(...)`` followed by
``cosine_decay(...)`` is :func:`warmup_cosine`.

Example:
    >>> from mithril.optim import schedules
    >>> s = schedules.warmup_cosine(peak=1e-3, warmup_steps=10, decay_steps=90)
    >>> round(s(0), 6), round(s(10), 6), round(s(100), 6)
    (0.0, 0.001, 0.0)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from .. import validation
from ..errors import ArgumentError
from ._math import FloatMath

_PI = math.pi

__all__ = [
    "Schedule",
    "as_schedule",
    "constant",
    "cosine_decay",
    "join",
    "linear_warmup",
    "step_decay",
    "warmup_cosine",
]


class Schedule:
    """A learning rate by step. Subclasses implement :meth:`value` over ``math`` (floats or graph values)."""

    def value(self, step: Any, math: Any) -> Any:
        raise NotImplementedError

    def __call__(self, step: int | float) -> float:
        """The rate at ``step`` (0 is the first update), as a float."""
        if not isinstance(step, numbers.Real) or isinstance(step, bool) or not step >= 0:
            raise ArgumentError(f"{type(self).__name__}: the step must be a number >= 0, got {step!r}")
        return float(self.value(float(step), FloatMath()))

    def config(self) -> dict[str, Any]:
        """The schedule's name and arguments (JSON): what a saved training state records."""
        return {"schedule": type(self).__name__, **{k: _config(v) for k, v in vars(self).items()}}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _config(value: Any) -> Any:
    if isinstance(value, Schedule):
        return value.config()
    if isinstance(value, (list, tuple)):
        return [_config(v) for v in value]
    return value


def _rate(where: str, name: str, value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0.0
    return validation.positive_finite(where, name, value, accepted="a finite number >= 0")


def _steps(where: str, name: str, value: Any) -> int:
    return int(validation.positive_int(where, name, value))


class Constant(Schedule):
    """The same rate at every step."""

    def __init__(self, lr: float) -> None:
        self.lr = _rate("constant", "lr", lr)

    def value(self, step: Any, math: Any) -> Any:
        return self.lr


class LinearWarmup(Schedule):
    """From ``start`` to ``peak`` linearly over ``warmup_steps``, then ``peak``."""

    def __init__(self, peak: float, warmup_steps: int, start: float = 0.0) -> None:
        self.peak, self.warmup_steps, self.start = (
            _rate("linear_warmup", "peak", peak),
            _steps("linear_warmup", "warmup_steps", warmup_steps),
            _rate("linear_warmup", "start", start),
        )

    def value(self, step: Any, math: Any) -> Any:
        fraction = math.minimum(step, float(self.warmup_steps)) / float(self.warmup_steps)
        return self.start + (self.peak - self.start) * fraction


class CosineDecay(Schedule):
    """From ``peak`` to ``peak * final_fraction`` along half a cosine over ``decay_steps``, then constant
    (``optax.cosine_decay_schedule``'s ``alpha`` is ``final_fraction``)."""

    def __init__(self, peak: float, decay_steps: int, final_fraction: float = 0.0) -> None:
        self.peak, self.decay_steps = (
            _rate("cosine_decay", "peak", peak),
            _steps("cosine_decay", "decay_steps", decay_steps),
        )
        self.final_fraction = float(
            validation.number("cosine_decay", "final_fraction", final_fraction, low=0.0, high=1.0)
        )

    def value(self, step: Any, math: Any) -> Any:
        progress = math.minimum(step, float(self.decay_steps)) / float(self.decay_steps)
        cosine = 0.5 * (math.cos(progress * _PI) + 1.0)
        return self.peak * (self.final_fraction + (1.0 - self.final_fraction) * cosine)


class StepDecay(Schedule):
    """``lr * gamma ** floor(step / step_size)`` (PyTorch's ``StepLR``)."""

    def __init__(self, lr: float, step_size: int, gamma: float = 0.1) -> None:
        self.lr, self.step_size = _rate("step_decay", "lr", lr), _steps("step_decay", "step_size", step_size)
        self.gamma = float(validation.number("step_decay", "gamma", gamma, low=0.0, high=1.0))

    def value(self, step: Any, math: Any) -> Any:
        return self.lr * math.power(self.gamma, math.floor(step / float(self.step_size)))


class Join(Schedule):
    """``schedules[0]`` before ``boundaries[0]``, ``schedules[1]`` (counting from 0 again) until
    ``boundaries[1]``, and so on (``optax.join_schedules``)."""

    def __init__(self, schedules: Sequence[Schedule], boundaries: Sequence[int]) -> None:
        for name, value in (("schedules", schedules), ("boundaries", boundaries)):
            if not isinstance(value, (list, tuple)):
                raise ArgumentError(f"join: {name} must be a list, got {type(value).__name__}")
        schedules = [as_schedule(s, "join") for s in schedules]
        boundaries = [_steps("join", "boundaries[i]", b) for b in boundaries]
        if len(schedules) != len(boundaries) + 1:
            raise ArgumentError(
                f"join: {len(schedules)} schedules need {len(schedules) - 1} boundaries, got {len(boundaries)}"
            )
        if sorted(boundaries) != boundaries or len(set(boundaries)) != len(boundaries):
            raise ArgumentError(f"join: boundaries must increase, got {boundaries}")
        self.schedules, self.boundaries = schedules, boundaries

    def value(self, step: Any, math: Any) -> Any:
        result = self.schedules[-1].value(step - float(self.boundaries[-1]), math)
        for i in range(len(self.boundaries) - 1, -1, -1):
            start = float(self.boundaries[i - 1]) if i > 0 else 0.0
            result = math.where(
                math.less(step, float(self.boundaries[i])), self.schedules[i].value(step - start, math), result
            )
        return result


def constant(lr: float) -> Schedule:
    """The same rate at every step.

    >>> constant(0.1)(1000)
    0.1
    """
    return Constant(lr)


def linear_warmup(peak: float, warmup_steps: int, start: float = 0.0) -> Schedule:
    """``start`` rising linearly to ``peak`` over ``warmup_steps``, then ``peak``.

    >>> linear_warmup(1.0, 4)(1)
    0.25
    """
    return LinearWarmup(peak, warmup_steps, start)


def cosine_decay(peak: float, decay_steps: int, final_fraction: float = 0.0) -> Schedule:
    """``peak`` falling along half a cosine to ``peak * final_fraction`` at ``decay_steps``.

    >>> round(cosine_decay(1.0, 10)(5), 6)
    0.5
    """
    return CosineDecay(peak, decay_steps, final_fraction)


def step_decay(lr: float, step_size: int, gamma: float = 0.1) -> Schedule:
    """``lr`` times ``gamma`` every ``step_size`` steps.

    >>> step_decay(1.0, 10, 0.5)(25)
    0.25
    """
    return StepDecay(lr, step_size, gamma)


def join(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """One schedule after another: ``schedules[i + 1]`` starts (at its own step 0) at ``boundaries[i]``.

    >>> s = join([constant(1.0), constant(0.5)], [3])
    >>> s(2), s(3)
    (1.0, 0.5)
    """
    return Join(schedules, boundaries)


def warmup_cosine(
    peak: float, warmup_steps: int, decay_steps: int, final_fraction: float = 0.0, start: float = 0.0
) -> Schedule:
    """Linear warmup to ``peak`` over ``warmup_steps``, then cosine decay over ``decay_steps`` (the usual
    transformer schedule).

    >>> s = warmup_cosine(1.0, 2, 2)
    >>> tuple(round(s(i), 3) for i in range(5))
    (0.0, 0.5, 1.0, 0.5, 0.0)
    """
    return Join(
        [LinearWarmup(peak, warmup_steps, start), CosineDecay(peak, decay_steps, final_fraction)], [warmup_steps]
    )


def as_schedule(lr: Any, where: str) -> Schedule:
    """A schedule, or a constant one for a number (``lr=3e-4``, NumPy scalars included)."""
    if isinstance(lr, Schedule):
        return lr
    if isinstance(lr, numbers.Real) and not isinstance(lr, bool):
        return Constant(validation.positive_finite(where, "lr", lr))
    raise ArgumentError(f"{where}: lr must be a finite number > 0 or a schedule (mithril.optim.schedules), got {lr!r}")
