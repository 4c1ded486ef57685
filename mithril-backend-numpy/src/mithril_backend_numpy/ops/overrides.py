"""Where NumPy differs from the shared implementations (:mod:`mithril.backends.array_api`): NumPy has no
``erf``, casts without copying, adds the bias in place, and draws from the backend's ``Generator``.

Example:
    >>> import numpy as np
    >>> round(float(erf(np.array(0.5))), 12)
    0.520499877813
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from mithril.extend import Backend, array_api, uses_backend

Array = np.ndarray


# erf: a Taylor series near 0 (relative accuracy for tiny x) and, for |x| >= 0.5, erfc(z) =
# t * exp(-z^2 + C(2t - 1)) with t = 2 / (2 + z) and C a Chebyshev series (coefficients fitted to
# mpmath, max relative error of erfc ~1e-14; the scheme of Numerical Recipes 3rd ed. section 6.2).
_ERFC_CHEB = np.array([
    -0.6513268598908546, 0.6419697923564902, 0.019476473204186006, -0.009561514786808558,
    -0.0009465953444820756, 0.00036683949785255697, 4.2523324806903297e-05, -2.0278578113038765e-05,
    -1.624290005094429e-06, 1.3036558360146683e-06, 1.5626441015945222e-08, -8.523809615764015e-08,
    6.529054117268745e-09, 5.059343155620523e-09, -9.91364764860282e-10, -2.2736551939802576e-10,
    9.646646271536195e-11, 2.3939806454700454e-12, -6.887022729719846e-12, 8.943883877627868e-13,
    3.123663799590801e-13, -1.1281572376439708e-13, 5.662761075079358e-16,
])  # fmt: skip
_ERF_TAYLOR = [(-1) ** n / (math.factorial(n) * (2 * n + 1)) * 2 / math.sqrt(math.pi) for n in range(14)]


def _chebval(u: Array, coefficients: np.ndarray) -> Array:
    """Clenshaw evaluation of ``sum c_j T_j(u)`` in the dtype of ``u``."""
    b1 = np.zeros_like(u)
    b2 = np.zeros_like(u)
    u2 = 2 * u
    for c in coefficients[:0:-1]:
        b1, b2 = u2 * b1 - b2 + float(c), b1
    total: Array = u * b1 - b2 + float(coefficients[0])
    return total


def erf(input: Array) -> Array:
    """The error function, vectorised (abs. error ~1e-15 in float64; float32 stays float32).

    >>> round(float(erf(np.array(0.5))), 12)
    0.520499877813
    """
    x = np.asarray(input)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    work = x.astype(np.float32) if x.dtype == np.float16 else x
    z = np.abs(work)
    # small |x|: Taylor series in x^2 (Horner)
    x2 = z * z
    series = np.full_like(z, _ERF_TAYLOR[-1])
    for c in _ERF_TAYLOR[-2::-1]:
        series = series * x2 + c
    small = series * z
    # |x| >= 0.5: 1 - erfc(|x|)
    t = 2 / (2 + z)
    with np.errstate(under="ignore", over="ignore"):
        erfc = t * np.exp(-x2 + _chebval(2 * t - 1, _ERFC_CHEB))
    result = np.where(z < 0.5, small, 1 - erfc)
    signed: Array = np.copysign(result, work)
    return signed.astype(x.dtype, copy=False)


@uses_backend
def cast(backend: Any, input: Array, *, dtype: Any) -> Array:
    """``input.astype(dtype)``; a kind (``"float"``, ``"int"``, ``"bool"``) maps to the backend's dtype.

    >>> from mithril_backend_numpy import NumpyBackend
    >>> cast(NumpyBackend(), np.array([1, 2]), dtype="float").dtype
    dtype('float32')
    """
    return np.asarray(input).astype(backend.native_dtype(dtype), copy=False)


def linear(input: Array, weight: Array, bias: Array | None) -> Array:
    """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``."""
    out: Array = np.matmul(input, np.swapaxes(weight, -1, -2))
    if bias is None:
        return out
    if isinstance(out, np.ndarray) and out.dtype == np.result_type(out, bias) and out.ndim >= np.ndim(bias):
        out += bias
        return out
    biased: Array = out + bias
    return biased


@uses_backend
def randn(backend: Backend[Array], *, shape: Any) -> Array:
    """Standard normal samples of ``shape`` in the backend float dtype."""
    dtype = backend.native_dtype("float")
    draw = dtype if dtype in (np.float32, np.float64) else np.float32
    return backend.rng.standard_normal(tuple(shape), dtype=draw).astype(dtype, copy=False)


@uses_backend
def randint(backend: Backend[Array], *, low: int, high: int, shape: Any) -> Array:
    """Integers uniform in ``[low, high)`` of ``shape`` (int64)."""
    return backend.rng.integers(low, high, tuple(shape), dtype=np.int64)


dropout_mask = array_api.nn.dropout_mask_drawing(np, lambda backend, shape: backend.rng.random(shape, dtype=np.float32))
