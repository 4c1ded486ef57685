"""Mithril's per-dtype numeric constants: the thresholds of the robust functions, in one table.

Mithril's robust functions (``Log(robust=True)``, ``Sqrt(robust=True)``, ``Power(robust=True)``,
``StableReciprocal``, ``KLDivergence``, ``CrossEntropy``/``BinaryCrossEntropy(robust=True)``) switch to a
finite form below a threshold that depends on the dtype the model computes in: float64's smallest normal
number is about 2.2e-308 (so ``Log(robust=True)`` of 0 is about -709.4), float32's about 1.2e-38 (-88.3).
Models read these values through the ``dtype_constant`` primitive (``dtype_constant(input, constant=...)``,
a 0-d tensor of ``input``'s float dtype), which every backend computes from :func:`dtype_constant` below, so
NumPy, JAX, PyTorch, MLX, C and GGML use the same numbers.

The constants (Mithril's ``Constant`` names, lower case):

- ``min_positive_normal``: the smallest positive normal number (``np.finfo(dtype).tiny``).
- ``stable_reciprocal_threshold``: where ``StableReciprocal`` switches to its tangent line: ``sqrt(tiny)``,
  except float64's, which is Mithril's ``1.4916681462400413e-153`` (ten times ``sqrt(tiny)``).

Example:
    >>> dtype_constant("min_positive_normal", "float64")
    2.2250738585072014e-308
    >>> dtype_constant("stable_reciprocal_threshold", "float32")
    1.0842021724855044e-19
"""

from __future__ import annotations

from typing import Any

from .errors import ArgumentError
from .types import Dtype

__all__ = ["DTYPE_CONSTANTS", "dtype_constant"]

_TINY = {
    Dtype.float16: 2.0**-14,  # 6.103515625e-05
    Dtype.bfloat16: 2.0**-126,  # float32's exponent range
    Dtype.float32: 2.0**-126,  # 1.1754943508222875e-38
    Dtype.float64: 2.0**-1022,  # 2.2250738585072014e-308
}

_TABLE: dict[str, dict[Dtype, float]] = {
    "min_positive_normal": dict(_TINY),
    "stable_reciprocal_threshold": {
        Dtype.float16: 2.0**-7,  # sqrt(tiny)
        Dtype.bfloat16: 2.0**-63,
        Dtype.float32: 2.0**-63,  # 1.0842021724855044e-19
        Dtype.float64: 1.4916681462400413e-153,  # Mithril's value (10 * sqrt(tiny))
    },
}

DTYPE_CONSTANTS: tuple[str, ...] = tuple(_TABLE)
"""The names :func:`dtype_constant` (and the ``dtype_constant`` primitive's ``constant`` attribute) accepts."""


def dtype_constant(constant: str, dtype: Any) -> float:
    """The value of Mithril's constant ``constant`` in the float dtype ``dtype`` (an ``ml.Dtype``, its name, or a
    framework dtype such as ``np.float32`` or ``torch.float64``), exactly representable in that dtype.

    >>> dtype_constant("min_positive_normal", "float32")
    1.1754943508222875e-38
    """
    values = _TABLE.get(constant)
    if values is None:
        raise ArgumentError(f"dtype_constant: constant must be one of {list(DTYPE_CONSTANTS)}, got {constant!r}")
    parsed = Dtype.parse(dtype)
    value = values.get(parsed)
    if value is None:
        raise ArgumentError(
            f"dtype_constant: {constant} is defined for float dtypes (float16, bfloat16, float32, float64), got "
            f"{parsed.value}"
        )
    return value
