"""Elementwise unary and broadcasting binary primitives on torch tensors.

Python scalars (constants in generated code) combine with tensors as weak scalars: a float32 tensor
plus ``2.0`` stays float32, as in NumPy 2.

Example:
    >>> import torch
    >>> relu(torch.tensor([-1.0, 2.0]))
    tensor([0., 2.])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from mithril.primitives import uses_backend

__all__ = [
    "neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "square", "sin", "cos", "tanh", "sigmoid",
    "relu", "leaky_relu", "gelu", "softplus", "erf", "floor", "isnan", "nan_to_num", "logical_not", "cast",
    "add", "subtract", "multiply", "divide", "floor_divide", "power", "minimum", "maximum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "where",
]  # fmt: skip

Tensor = torch.Tensor


def as_tensor(value: Any, like: Any = None) -> Tensor:
    """``value`` as a tensor; a Python scalar goes on ``like``'s device (a 0-d tensor, so it promotes
    weakly: ``float32 tensor op 0-d float64`` stays float32)."""
    if isinstance(value, Tensor):
        return value
    device = like.device if isinstance(like, Tensor) else None
    if isinstance(value, float) and isinstance(like, Tensor) and like.is_floating_point():
        return torch.tensor(value, dtype=like.dtype, device=device)
    return torch.as_tensor(value, device=device)


def _pair(left: Any, right: Any) -> tuple[Tensor, Tensor]:
    return as_tensor(left, right), as_tensor(right, left)


# -- unary -----------------------------------------------------------------------------------------
def neg(input: Tensor) -> Tensor:
    """``-input``"""
    return torch.neg(input)


def abs(input: Tensor) -> Tensor:
    """``np.abs(input)``"""
    return torch.abs(input)


def sign(input: Tensor) -> Tensor:
    """``np.sign(input)``: NaN stays NaN (``torch.sign`` gives 0 for NaN).

    >>> sign(torch.tensor([float("nan"), -2.0, 0.0]))
    tensor([nan, -1.,  0.])
    """
    if not input.is_floating_point():
        return torch.sign(input)
    return torch.where(torch.isnan(input), input, torch.sign(input))


def exp(input: Tensor) -> Tensor:
    """``np.exp(input)``"""
    return torch.exp(input)


def log(input: Tensor) -> Tensor:
    """``np.log(input)``"""
    return torch.log(input)


def sqrt(input: Tensor) -> Tensor:
    """``np.sqrt(input)``"""
    return torch.sqrt(input)


def rsqrt(input: Tensor) -> Tensor:
    """``1 / np.sqrt(input)``"""
    return torch.rsqrt(input)


def square(input: Tensor) -> Tensor:
    """``input * input``"""
    return torch.square(input)


def sin(input: Tensor) -> Tensor:
    """``np.sin(input)``"""
    return torch.sin(input)


def cos(input: Tensor) -> Tensor:
    """``np.cos(input)``"""
    return torch.cos(input)


def tanh(input: Tensor) -> Tensor:
    """``np.tanh(input)``"""
    return torch.tanh(input)


def sigmoid(input: Tensor) -> Tensor:
    """``1 / (1 + exp(-input))`` (torch's kernel is stable for large ``|input|``)."""
    return torch.sigmoid(input)


def relu(input: Tensor) -> Tensor:
    """``np.maximum(input, 0)``"""
    return torch.relu(input)


def leaky_relu(input: Tensor, *, slope: float) -> Tensor:
    """``np.where(input > 0, input, slope * input)``"""
    return torch.where(input > 0, input, input * slope)


def gelu(input: Tensor, *, approximate: bool) -> Tensor:
    """``x * Phi(x)`` with the exact (erf) CDF, or the tanh approximation when ``approximate``.

    >>> round(float(gelu(torch.tensor(1.0, dtype=torch.float64), approximate=False)), 6)
    0.841345
    """
    return F.gelu(input, approximate="tanh" if approximate else "none")


def softplus(input: Tensor) -> Tensor:
    """``np.logaddexp(input, 0)`` (no threshold: exact for large inputs too)."""
    return torch.logaddexp(input, torch.zeros((), dtype=input.dtype, device=input.device))


def erf(input: Tensor) -> Tensor:
    """The error function."""
    return torch.erf(input)


def floor(input: Tensor) -> Tensor:
    """``np.floor(input)``"""
    return torch.floor(input)


def isnan(input: Tensor) -> Tensor:
    """``np.isnan(input)``"""
    return torch.isnan(input)


def nan_to_num(input: Tensor, *, nan: float, posinf: float | None, neginf: float | None) -> Tensor:
    """``np.nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)``"""
    return torch.nan_to_num(input, nan=nan, posinf=posinf, neginf=neginf)


def logical_not(input: Tensor) -> Tensor:
    """``np.logical_not(input)``"""
    return torch.logical_not(input)


@uses_backend
def cast(backend: Any, input: Tensor, *, dtype: Any) -> Tensor:
    """``input.astype(dtype)``; a kind (``"float"``, ``"int"``, ``"bool"``) maps to the backend's dtype.

    >>> from mithril_backend_torch import TorchBackend
    >>> cast(TorchBackend(), torch.tensor([1, 2]), dtype="float").dtype
    torch.float32
    """
    return as_tensor(input).to(backend.native_dtype(dtype))


# -- binary (NumPy broadcasting) -------------------------------------------------------------------
def add(left: Tensor, right: Tensor) -> Tensor:
    """``left + right``"""
    return left + right


def subtract(left: Tensor, right: Tensor) -> Tensor:
    """``left - right``"""
    return left - right


def multiply(left: Tensor, right: Tensor) -> Tensor:
    """``left * right``"""
    return left * right


def _is_float(value: Any) -> bool:
    return isinstance(value, float) or (isinstance(value, Tensor) and value.is_floating_point())


@uses_backend
def divide(backend: Any, left: Tensor, right: Tensor) -> Tensor:
    """``left / right`` (true division); ints divide into the backend's float dtype.

    >>> from mithril_backend_torch import TorchBackend
    >>> divide(TorchBackend(dtype="float64"), torch.tensor([1, 2]), torch.tensor([2, 4])).dtype
    torch.float64
    """
    if _is_float(left) or _is_float(right):
        return left / right
    dtype = backend.native_dtype("float")
    return as_tensor(left, right).to(dtype) / as_tensor(right, left).to(dtype)


def floor_divide(left: Tensor, right: Tensor) -> Tensor:
    """``left // right`` (rounds towards minus infinity, like NumPy)."""
    return torch.floor_divide(*_pair(left, right))


def power(left: Tensor, right: Tensor) -> Tensor:
    """``left ** right``"""
    return left**right


def minimum(left: Tensor, right: Tensor) -> Tensor:
    """``np.minimum(left, right)``"""
    return torch.minimum(*_pair(left, right))


def maximum(left: Tensor, right: Tensor) -> Tensor:
    """``np.maximum(left, right)``"""
    return torch.maximum(*_pair(left, right))


def equal(left: Tensor, right: Tensor) -> Tensor:
    """``left == right``"""
    return torch.eq(*_pair(left, right))


def not_equal(left: Tensor, right: Tensor) -> Tensor:
    """``left != right``"""
    return torch.ne(*_pair(left, right))


def less(left: Tensor, right: Tensor) -> Tensor:
    """``left < right``"""
    return torch.lt(*_pair(left, right))


def less_equal(left: Tensor, right: Tensor) -> Tensor:
    """``left <= right``"""
    return torch.le(*_pair(left, right))


def greater(left: Tensor, right: Tensor) -> Tensor:
    """``left > right``"""
    return torch.gt(*_pair(left, right))


def greater_equal(left: Tensor, right: Tensor) -> Tensor:
    """``left >= right``"""
    return torch.ge(*_pair(left, right))


def logical_and(left: Tensor, right: Tensor) -> Tensor:
    """``np.logical_and(left, right)``"""
    return torch.logical_and(*_pair(left, right))


def logical_or(left: Tensor, right: Tensor) -> Tensor:
    """``np.logical_or(left, right)``"""
    return torch.logical_or(*_pair(left, right))


def logical_xor(left: Tensor, right: Tensor) -> Tensor:
    """``np.logical_xor(left, right)``"""
    return torch.logical_xor(*_pair(left, right))


def where(condition: Tensor, left: Tensor, right: Tensor) -> Tensor:
    """``np.where(condition, left, right)``"""
    return torch.where(as_tensor(condition), left, right)
