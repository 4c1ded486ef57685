"""Optimizers whose update is written once in Mithril's primitives, so ``ml.compile(..., optimizer=...)``
compiles forward, backward and update into one training step on every backend (C and GGML included).

Each optimizer names its state slots (``Adam``: ``m`` and ``v``, zeros at the start) and writes
:meth:`Optimizer.update` for one parameter over a ``math`` object (:mod:`mithril.optim._math`). What every
optimizer shares lives in :meth:`Optimizer.apply`: the learning-rate schedule, global-norm gradient
clipping and which parameters take weight decay. The formulas follow PyTorch's ``torch.optim`` (and
``optax.lion`` for Lion), so a Mithril run and a hand-written PyTorch loop give the same numbers.

Example:
    >>> import mithril as ml
    >>> from mithril import optim
    >>> opt = optim.AdamW(lr=optim.schedules.warmup_cosine(3e-4, 100, 900), weight_decay=0.01, clip_norm=1.0)
    >>> opt.slots
    ('m', 'v')
"""

from __future__ import annotations

import math as _math  # the module; "math" parameters below are the optimizers' number systems
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import validation
from ..errors import ArgumentError
from .schedules import Schedule, as_schedule

__all__ = ["SGD", "Adam", "AdamW", "Lion", "Optimizer", "ParamInfo", "RMSprop"]

DecayMask = str | re.Pattern[str] | Callable[[str, str, int | None], bool] | None


@dataclass(frozen=True)
class ParamInfo:
    """What a weight-decay mask sees of a parameter: its compiled name (``weight_3``), its path in the
    model (``linear_1.weight``) and its rank (``None`` if unknown)."""

    name: str
    path: str
    rank: int | None


def _fraction(where: str, name: str, value: Any) -> float:
    return float(validation.number(where, name, value, low=0.0, high=1.0, high_open=True))


def _betas(where: str, betas: Any) -> tuple[float, float]:
    """``(beta1, beta2)``, each a number in ``[0, 1)`` (Adam's and Lion's ``betas``)."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise validation.fail(where, "betas", "a pair (beta1, beta2) of numbers in [0, 1)", betas)
    return _fraction(where, "betas[0]", betas[0]), _fraction(where, "betas[1]", betas[1])


def _nonnegative(where: str, name: str, value: Any) -> float:
    number = float(validation.number(where, name, value, low=0.0))
    if not _math.isfinite(number):
        raise validation.fail(where, name, "a finite number >= 0", value)
    return number


class Optimizer:
    """The shared part of every optimizer.

    Args:
        lr: a number or a schedule (:mod:`mithril.optim.schedules`) of the step count.
        weight_decay: decay coefficient (L2 added to the gradient for SGD/Adam/RMSprop as in PyTorch,
            decoupled for AdamW and Lion).
        clip_norm: clip the gradients' global L2 norm to this (``torch.nn.utils.clip_grad_norm_``'s rule:
            scale by ``min(1, clip_norm / (norm + 1e-6))``); ``None`` does not clip.
        decay_mask: which parameters take weight decay: ``"all"``, ``"matrices"`` (rank >= 2: no decay on
            biases and norm scales), a regex searched in each parameter's name and path, or a function
            ``(name, path, rank) -> bool``. ``None``: this optimizer's default (``"all"``, AdamW and Lion:
            ``"matrices"``).
    """

    slots: tuple[str, ...] = ()
    default_mask = "all"

    def __init__(
        self,
        lr: float | Schedule,
        *,
        weight_decay: float = 0.0,
        clip_norm: float | None = None,
        decay_mask: DecayMask = None,
    ) -> None:
        where = type(self).__name__
        self.lr = as_schedule(lr, where)
        self.weight_decay = _nonnegative(where, "weight_decay", weight_decay)
        self.clip_norm = None if clip_norm is None else validation.positive_finite(where, "clip_norm", clip_norm)
        if not (
            decay_mask is None
            or decay_mask in ("all", "matrices")
            or isinstance(decay_mask, re.Pattern)
            or isinstance(decay_mask, str)
            or callable(decay_mask)
        ):
            raise ArgumentError(
                f"{where}: decay_mask must be 'all', 'matrices', a regex or a function (name, path, rank) -> bool, got "
                f"{decay_mask!r}"
            )
        if isinstance(decay_mask, str) and decay_mask not in ("all", "matrices"):
            try:
                re.compile(decay_mask)
            except re.error as exc:
                raise ArgumentError(f"{where}: decay_mask {decay_mask!r} is not a valid regex ({exc})") from None
        self.decay_mask = decay_mask

    # -- what subclasses write --------------------------------------------------------------------
    def update(
        self, math: Any, param: Any, grad: Any, state: dict[str, Any], lr: Any, t: Any, decay: bool
    ) -> tuple[Any, dict[str, Any]]:
        """One parameter's new value and new state slots. ``t`` is the step number counting from 1 (for
        bias corrections), ``lr`` the rate at this step, ``decay`` whether weight decay applies to it."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------
    def decays(self, info: ParamInfo) -> bool:
        """Whether weight decay applies to this parameter (see ``decay_mask``)."""
        if self.weight_decay == 0.0:
            return False
        mask = self.default_mask if self.decay_mask is None else self.decay_mask
        if mask == "all":
            return True
        if mask == "matrices":
            return info.rank is None or info.rank >= 2
        if isinstance(mask, (str, re.Pattern)):
            pattern = re.compile(mask) if isinstance(mask, str) else mask
            return bool(pattern.search(info.name) or pattern.search(info.path))
        try:
            return bool(mask(info.name, info.path, info.rank))
        except TypeError as exc:
            raise ArgumentError(
                f"{type(self).__name__}(decay_mask=...): the function must take (name, path, rank) and return a bool; "
                f"calling it failed: {exc}"
            ) from None

    def apply(
        self,
        math: Any,
        params: Mapping[str, Any],
        grads: Mapping[str, Any],
        state: Mapping[str, Mapping[str, Any]],
        step: Any,
        infos: Mapping[str, ParamInfo],
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], Any]:
        """Every parameter's update: ``(new params, new state by slot then parameter, new step)``.

        ``step`` counts the updates done so far (0 before the first)."""
        lr = self.lr.value(step, math)
        grads = dict(grads)
        if self.clip_norm is not None and grads:
            total: Any = None
            for grad in grads.values():
                term = math.square_sum(grad)
                total = term if total is None else total + term
            scale = math.minimum(self.clip_norm / (math.sqrt(total) + 1e-6), 1.0)
            grads = {name: grad * scale for name, grad in grads.items()}
        t = step + 1.0
        decays = {name: self.decays(infos[name]) for name in params}
        if self.weight_decay and self.decay_mask not in (None, "all", "matrices") and not any(decays.values()):
            warnings.warn(
                f"{type(self).__name__}(decay_mask={self.decay_mask!r}) matches none of the parameters, so "
                f"weight_decay does nothing; their paths are {sorted(info.path for info in infos.values())[:6]}...",
                stacklevel=4,
            )
        new_params: dict[str, Any] = {}
        new_state: dict[str, dict[str, Any]] = {slot: {} for slot in self.slots}
        for name, param in params.items():
            slots = {slot: state[slot][name] for slot in self.slots}
            new_params[name], updated = self.update(math, param, grads[name], slots, lr, t, decays[name])
            for slot in self.slots:
                new_state[slot][name] = updated[slot]
        return new_params, new_state, t

    def config(self) -> dict[str, Any]:
        """The optimizer's class and arguments (JSON): recorded with a saved training state."""
        values = {k: (v.config() if isinstance(v, Schedule) else v) for k, v in vars(self).items() if k != "slots"}
        mask = self.decay_mask
        if isinstance(mask, re.Pattern):
            values["decay_mask"] = mask.pattern
        elif callable(mask):
            values["decay_mask"] = getattr(mask, "__qualname__", repr(mask))
        return {"optimizer": type(self).__name__, **values}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if v is not None and k != "slots")
        return f"{type(self).__name__}({args})"


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum, as ``torch.optim.SGD`` (no dampening).

    >>> SGD(lr=0.1, momentum=0.9, nesterov=True).slots
    ('momentum',)
    """

    def __init__(
        self,
        lr: float | Schedule = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        *,
        weight_decay: float = 0.0,
        clip_norm: float | None = None,
        decay_mask: DecayMask = None,
    ) -> None:
        super().__init__(lr, weight_decay=weight_decay, clip_norm=clip_norm, decay_mask=decay_mask)
        self.momentum = _fraction("SGD", "momentum", momentum)
        self.nesterov = validation.boolean("SGD", "nesterov", nesterov)
        if self.nesterov and self.momentum == 0.0:
            raise ArgumentError("SGD: nesterov=True needs momentum > 0")
        self.slots = ("momentum",) if self.momentum else ()

    def update(
        self, math: Any, param: Any, grad: Any, state: dict[str, Any], lr: Any, t: Any, decay: bool
    ) -> tuple[Any, dict[str, Any]]:
        if decay:
            grad = grad + self.weight_decay * param
        if not self.momentum:
            return param - lr * grad, {}
        buf = self.momentum * state["momentum"] + grad
        step = grad + self.momentum * buf if self.nesterov else buf
        return param - lr * step, {"momentum": buf}


class Adam(Optimizer):
    """Adam (``torch.optim.Adam``); ``weight_decay`` adds ``weight_decay * param`` to the gradient (L2).
    ``weight_decay=None`` is the class's default (Adam: ``0.0``, AdamW: ``0.01``, as in PyTorch).

    >>> Adam(lr=1e-3).betas
    (0.9, 0.999)
    """

    slots = ("m", "v")
    decoupled = False
    default_weight_decay = 0.0

    def __init__(
        self,
        lr: float | Schedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        *,
        weight_decay: float | None = None,
        clip_norm: float | None = None,
        decay_mask: DecayMask = None,
    ) -> None:
        if weight_decay is None:
            weight_decay = self.default_weight_decay
        super().__init__(lr, weight_decay=weight_decay, clip_norm=clip_norm, decay_mask=decay_mask)
        where = type(self).__name__
        self.betas = _betas(where, betas)
        self.eps = validation.positive_finite(where, "eps", eps)

    def update(
        self, math: Any, param: Any, grad: Any, state: dict[str, Any], lr: Any, t: Any, decay: bool
    ) -> tuple[Any, dict[str, Any]]:
        beta1, beta2 = self.betas
        # the step's scalars: the same values for every parameter, so they are computed once per step
        root_correction = math.sqrt(bias_correction(math, beta2, t))
        step_size = lr * root_correction / bias_correction(math, beta1, t)
        eps_hat = self.eps * root_correction
        shrink = 1.0 - lr * self.weight_decay if decay and self.decoupled else None
        l2 = self.weight_decay if decay and not self.decoupled else 0.0
        new_param, m, v = math.adam_update(
            param, grad, state["m"], state["v"], step_size, eps_hat, shrink, beta1=beta1, beta2=beta2, l2=l2
        )
        return new_param, {"m": m, "v": v}


def bias_correction(math: Any, beta: float, t: Any) -> Any:
    """``1 - beta**t`` (Adam's bias correction after ``t`` steps), accurate to a few ulp in float32.

    The step count is an array of the model's dtype, so ``1 - power(beta, t)`` would be computed in
    float32: ``0.999`` itself rounds there and the subtraction cancels, a relative error near 1e-5 at
    ``t = 1`` where ``torch.optim`` computes the correction in Python floats. This is ``-expm1(t ln
    beta)``, with ``expm1(y) = 2 tanh(y / 2) / (1 - tanh(y / 2))`` (``tanh`` is accurate for small
    arguments on every backend) and ``ln(beta) / 2`` a Python float.

    >>> from mithril.optim._math import FloatMath
    >>> round(bias_correction(FloatMath(), 0.999, 1.0), 12), round(bias_correction(FloatMath(), 0.9, 3.0), 12)
    (0.001, 0.271)
    """
    if beta == 0.0:
        return 1.0
    half = math.tanh(t * (0.5 * _math.log(beta)))
    return -2.0 * half / (1.0 - half)


def adam_step(
    math: Any,
    param: Any,
    grad: Any,
    m: Any,
    v: Any,
    step_size: Any,
    eps_hat: Any,
    shrink: Any = None,
    *,
    beta1: float,
    beta2: float,
    l2: float = 0.0,
) -> tuple[Any, Any, Any]:
    """Adam's step for one parameter, ``(param', m', v')``, over ``math`` (``sqrt``; ``+ - * /`` on its
    values): the one formula of the ``adam_update`` primitive, compiled by every backend without an
    implementation of its own (see :func:`mithril.models.blocks.optimizer_steps.adam_update_decomposition`).

    ``torch.optim.Adam``'s ``m_hat / (sqrt(v_hat) + eps)`` with both bias corrections folded into the step's
    scalars (equal up to rounding): ``step_size = lr sqrt(1 - b2^t) / (1 - b1^t)``, ``eps_hat = eps sqrt(1 -
    b2^t)``; ``shrink`` (AdamW's ``1 - lr wd``, or ``None``) scales the parameter first, ``l2`` (Adam's
    ``weight_decay``) adds ``l2 * param`` to the gradient.

    >>> from mithril.optim._math import FloatMath
    >>> root = (1 - 0.999) ** 0.5  # step 1, lr 0.1, eps 1e-8
    >>> step = adam_step(FloatMath(), 1.0, 0.5, 0.0, 0.0, 0.1 * root / (1 - 0.9), 1e-8 * root, beta1=0.9, beta2=0.999)
    >>> tuple(round(x, 6) for x in step)
    (0.9, 0.05, 0.00025)
    """
    if l2:
        grad = grad + l2 * param
    if shrink is not None:
        param = param * shrink
    m = beta1 * m + (1.0 - beta1) * grad
    v = beta2 * v + (1.0 - beta2) * (grad * grad)
    return param - step_size * m / (math.sqrt(v) + eps_hat), m, v


class AdamW(Adam):
    """Adam with decoupled weight decay (``torch.optim.AdamW``): ``param *= 1 - lr * weight_decay`` before
    the Adam step. Biases and norm scales (rank < 2) take no decay unless ``decay_mask`` says otherwise.

    >>> AdamW(lr=3e-4).weight_decay
    0.01
    """

    decoupled = True
    default_mask = "matrices"
    default_weight_decay = 0.01


class RMSprop(Optimizer):
    """RMSprop (``torch.optim.RMSprop``, not centred): ``sq = alpha sq + (1 - alpha) g**2``, step
    ``g / (sqrt(sq) + eps)``, with optional momentum.

    >>> RMSprop(lr=0.01, momentum=0.9).slots
    ('square_avg', 'momentum')
    """

    def __init__(
        self,
        lr: float | Schedule = 0.01,
        alpha: float = 0.99,
        eps: float = 1e-8,
        momentum: float = 0.0,
        *,
        weight_decay: float = 0.0,
        clip_norm: float | None = None,
        decay_mask: DecayMask = None,
    ) -> None:
        super().__init__(lr, weight_decay=weight_decay, clip_norm=clip_norm, decay_mask=decay_mask)
        self.alpha = _fraction("RMSprop", "alpha", alpha)
        self.eps = validation.positive_finite("RMSprop", "eps", eps)
        self.momentum = _fraction("RMSprop", "momentum", momentum)
        self.slots = ("square_avg", "momentum") if self.momentum else ("square_avg",)

    def update(
        self, math: Any, param: Any, grad: Any, state: dict[str, Any], lr: Any, t: Any, decay: bool
    ) -> tuple[Any, dict[str, Any]]:
        if decay:
            grad = grad + self.weight_decay * param
        square_avg = self.alpha * state["square_avg"] + (1.0 - self.alpha) * (grad * grad)
        step = grad / (math.sqrt(square_avg) + self.eps)
        if not self.momentum:
            return param - lr * step, {"square_avg": square_avg}
        buf = self.momentum * state["momentum"] + step
        return param - lr * buf, {"square_avg": square_avg, "momentum": buf}


class Lion(Optimizer):
    """Lion (Chen et al. 2023; ``optax.lion``): ``param -= lr * (sign(b1 m + (1 - b1) g) + wd param)``,
    then ``m = b2 m + (1 - b2) g``. Decay is decoupled and skips rank < 2 parameters by default.

    >>> Lion(lr=1e-4).betas
    (0.9, 0.99)
    """

    slots = ("m",)
    default_mask = "matrices"

    def __init__(
        self,
        lr: float | Schedule = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        *,
        weight_decay: float = 0.0,
        clip_norm: float | None = None,
        decay_mask: DecayMask = None,
    ) -> None:
        super().__init__(lr, weight_decay=weight_decay, clip_norm=clip_norm, decay_mask=decay_mask)
        self.betas = _betas("Lion", betas)

    def update(
        self, math: Any, param: Any, grad: Any, state: dict[str, Any], lr: Any, t: Any, decay: bool
    ) -> tuple[Any, dict[str, Any]]:
        beta1, beta2 = self.betas
        direction = math.sign(beta1 * state["m"] + (1.0 - beta1) * grad)
        if decay:
            direction = direction + self.weight_decay * param
        return param - lr * direction, {"m": beta2 * state["m"] + (1.0 - beta2) * grad}
