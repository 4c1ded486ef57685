"""Parameter initialisers: the hint a block declares on each parameter (``Linear(weight_init=...)``) and how
``PhysicalModel.randomize_params`` draws it. One place for both the names and the sampling.

Specs:
    ``"fan_in"``: PyTorch's ``Linear``/``Conv`` default, uniform in ``+-1/sqrt(fan_in)`` (a bias uses the
    fan-in of the weight it is added to); ``"ones"``, ``"zeros"``; ``"normal"``: normal(0, 0.02);
    ``"normal(<std>)"``; ``"kaiming_normal(fan_out)"`` / ``"kaiming_normal(fan_in)"``: normal with std
    ``sqrt(2 / fan)`` (``torch.nn.init.kaiming_normal_`` for ReLU, torchvision's ResNet convolutions);
    ``"constant(<value>)"`` (CLIP's ``logit_scale``).

Example:
    >>> import numpy as np
    >>> check("init", "normal(0.01)")
    'normal(0.01)'
    >>> round(float(sample(np.random.default_rng(0), (400, 400), "normal(0.01)").std()), 3)
    0.01
    >>> normal(0.5)
    'normal(0.5)'
"""

from __future__ import annotations

import math
import re

from .errors import ArgumentError
from .lazy_numpy import np

__all__ = ["SPECS", "check", "fan_in_of", "normal", "sample"]

SPECS = (
    "fan_in",
    "ones",
    "zeros",
    "normal",
    "normal(<std>)",
    "kaiming_normal(fan_out)",
    "kaiming_normal(fan_in)",
    "constant(<value>)",
)
_NORMAL = re.compile(r"^normal\((?P<std>[0-9.eE+-]+)\)$")
_CONSTANT = re.compile(r"^constant\((?P<value>[0-9.eE+-]+)\)$")
_KAIMING = re.compile(r"^kaiming_normal\((?P<mode>fan_in|fan_out)\)$")


def normal(std: float) -> str:
    """The spec of a normal(0, ``std``) initialiser.

    >>> normal(0.02)
    'normal(0.02)'
    """
    spec = f"normal({float(std)!r})"
    check("normal", spec)  # a std that is not a finite number is refused
    return spec


def _argument(pattern: re.Pattern[str], spec: str) -> float | None:
    """The finite number inside ``normal(...)`` / ``constant(...)``, or ``None`` when ``spec`` is not one."""
    match = pattern.match(spec)
    if match is None:
        return None
    try:
        value = float(match.group(1))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _constant(spec: str) -> float | None:
    return _argument(_CONSTANT, spec)


def _std(spec: str) -> float | None:
    value = _argument(_NORMAL, spec)
    return value if value is not None and value >= 0 else None


def check(where: str, spec: str | None) -> str | None:
    """``spec`` if it names an initialiser (``None`` passes: the default), else :class:`ArgumentError`."""
    if spec is None:
        return None
    if isinstance(spec, str) and (
        spec in ("fan_in", "ones", "zeros", "normal")
        or _KAIMING.match(spec)
        or _std(spec) is not None
        or _constant(spec) is not None
    ):
        return spec
    raise ArgumentError(f"{where} must be an initialiser ({', '.join(SPECS)}), got {spec!r}")


def fan_in_of(shape: tuple[int, ...]) -> int:
    """Inputs feeding each output unit of a weight ``[out, in, *kernel]`` (PyTorch's fan-in)."""
    return math.prod(shape[1:])


def sample(rng: np.random.Generator, shape: tuple[int, ...], spec: str | None, fan_in: int | None = None) -> np.ndarray:
    """Draw a parameter of ``shape`` for ``spec`` (``fan_in``: the fan-in a bias follows)."""
    check("randomize_params", spec)
    if spec == "ones":
        return np.ones(shape)
    if spec == "zeros":
        return np.zeros(shape)
    if spec == "normal":
        return rng.normal(0.0, 0.02, shape)
    if spec is not None and (value := _constant(spec)) is not None:
        return np.full(shape, value)
    if spec is not None and (std := _std(spec)) is not None:
        return rng.normal(0.0, std, shape)
    if spec is not None and (match := _KAIMING.match(spec)):
        fan = (
            fan_in_of(shape)
            if match.group("mode") == "fan_in"
            else (shape[0] * math.prod(shape[2:]) if len(shape) >= 2 else shape[0])
        )
        return rng.normal(0.0, math.sqrt(2.0 / max(fan, 1)), shape)
    if fan_in is None:
        fan_in = fan_in_of(shape) if len(shape) >= 2 else max(shape[0] if shape else 1, 1)
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    return rng.uniform(-bound, bound, shape)
