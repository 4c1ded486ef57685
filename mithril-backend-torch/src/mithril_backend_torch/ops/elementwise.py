"""Elementwise unary and broadcasting binary primitives on torch tensors.

Python scalars (constants in generated code) combine with tensors as weak scalars: a float32 tensor
plus ``2.0`` stays float32, as in NumPy 2.

Example:
    >>> import torch
    >>> relu(torch.tensor([-1.0, 2.0]))
    tensor([0., 2.])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from mithril.extend import uses_backend

Tensor = torch.Tensor


def _as_tensor(value: Any, like: Any = None) -> Tensor:
    """``value`` as a tensor; a Python scalar goes on ``like``'s device (a 0-d tensor, so it promotes
    weakly: ``float32 tensor op 0-d float64`` stays float32)."""
    if isinstance(value, Tensor):
        return value
    device = like.device if isinstance(like, Tensor) else None
    if isinstance(value, float) and isinstance(like, Tensor) and like.is_floating_point():
        return torch.tensor(value, dtype=like.dtype, device=device)
    return torch.as_tensor(value, device=device)


def _pair(left: Any, right: Any) -> tuple[Tensor, Tensor]:
    return _as_tensor(left, right), _as_tensor(right, left)


# -- unary -----------------------------------------------------------------------------------------


def relu(input: Tensor) -> Tensor:
    """``np.maximum(input, 0)``: ``-0.0`` gives ``+0.0`` as in NumPy (``torch.relu`` keeps ``-0.0``), NaN stays NaN.

    >>> relu(torch.tensor([-0.0, float("nan")]))
    tensor([0., nan])
    """
    return F.threshold(input, 0.0, 0.0)


_GELU_IDENTITY_FROM = 10.0
"""Above this ``gelu(x) == x`` in every float dtype (``1 - Phi(10) ~ 7.6e-24``, far below float64's epsilon)."""


def gelu(input: Tensor, *, approximate: bool) -> Tensor:
    """``x * Phi(x)`` with the exact (erf) CDF, or the tanh approximation when ``approximate``.

    torch's vectorised float32 CPU kernel gives NaN for ``+inf`` (``inf * 0`` inside its erf) and overflows to
    ``inf`` for huge finite inputs, while its scalar loop (strided inputs) does not; so ``F.gelu`` only ever sees
    inputs up to 10, where nothing overflows, and larger ones (``+inf`` included) pass through unchanged, with
    gradient 1. ``-inf`` gives NaN (``-inf * 0``), as NumPy's reference does.

    >>> round(float(gelu(torch.tensor(1.0, dtype=torch.float64), approximate=False)), 6)
    0.841345
    >>> gelu(torch.full((64,), float("inf")), approximate=False)[:2]
    tensor([inf, inf])
    """
    mode = "tanh" if approximate else "none"
    if not _may_exceed(input, _GELU_IDENTITY_FROM):
        return F.gelu(input, approximate=mode)
    inner = F.gelu(input.clamp(max=_GELU_IDENTITY_FROM), approximate=mode)
    return torch.where(input > _GELU_IDENTITY_FROM, input, inner)


def _may_exceed(input: Tensor, bound: float) -> bool:
    """Whether ``input`` may hold values above ``bound``. In eager CPU mode one read-only pass decides, so the
    common case skips the guard's extra passes forward and backward (about 6% of a GPT-2 training step). Always
    True under ``torch.compile`` (which fuses the guard, and a data-dependent branch would break the graph) and
    off the CPU (a reduction there would synchronise the device)."""
    if input.numel() == 0:
        return False
    if input.device.type != "cpu" or torch.compiler.is_compiling():
        return True
    return not bool(input.detach().amax() <= bound)  # a NaN anywhere makes amax NaN: guarded too


def softplus(input: Tensor) -> Tensor:
    """``np.logaddexp(input, 0)`` (no threshold: exact for large inputs too)."""
    return torch.logaddexp(input, torch.zeros((), dtype=input.dtype, device=input.device))


@uses_backend
def cast(backend: Any, input: Tensor, *, dtype: Any) -> Tensor:
    """``input.astype(dtype)``; a kind (``"float"``, ``"int"``, ``"bool"``) maps to the backend's dtype.

    >>> from mithril_backend_torch import TorchBackend
    >>> cast(TorchBackend(), torch.tensor([1, 2]), dtype="float").dtype
    torch.float32
    """
    return _as_tensor(input).to(backend.native_dtype(dtype))


def cast_like(input: Tensor, like: Tensor) -> Tensor:
    """``input.to(like.dtype)``: the dtype of another tensor."""
    return _as_tensor(input).to(like.dtype)


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
    return _as_tensor(left, right).to(dtype) / _as_tensor(right, left).to(dtype)


def power(left: Tensor, right: Tensor) -> Tensor:
    """``left ** right``"""
    return left**right


@uses_backend
def where(backend: Any, condition: Tensor, left: Tensor, right: Tensor) -> Tensor:
    """``np.where(condition, left, right)``; two Python numbers give the backend's dtype of their kind (torch
    alone would give its default float32 for ``where(mask, 1.0, 0.0)`` under a float64 backend).

    >>> from mithril_backend_torch import TorchBackend
    >>> where(TorchBackend(dtype="float64"), torch.tensor([True, False]), 1.0, 0.0).dtype
    torch.float64
    """
    condition = _as_tensor(condition)
    if not isinstance(left, Tensor) and not isinstance(right, Tensor):
        kind = "float" if isinstance(left, float) or isinstance(right, float) else "int"
        dtype = torch.bool if isinstance(left, bool) and isinstance(right, bool) else backend.native_dtype(kind)
        left = torch.tensor(left, dtype=dtype, device=condition.device)
    return torch.where(condition, left, right)


def stop_gradient(input: Tensor) -> Tensor:
    """``input.detach()``: the same values, no gradient flows back through it."""
    return input.detach() if isinstance(input, Tensor) else input


def _paired(name: str, fn: Callable[..., Tensor]) -> Callable[[Any, Any], Tensor]:
    def paired(left: Any, right: Any) -> Tensor:
        return fn(*_pair(left, right))

    paired.__name__ = paired.__qualname__ = name
    paired.__doc__ = f"``{fn.__name__}(left, right)`` with Python scalars as weak 0-d tensors."
    return paired


PAIRED = {
    name: _paired(name, fn)
    for name, fn in {
        "floor_divide": torch.floor_divide, "minimum": torch.minimum, "maximum": torch.maximum,
        "equal": torch.eq, "not_equal": torch.ne, "less": torch.lt, "less_equal": torch.le, "greater": torch.gt,
        "greater_equal": torch.ge, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
        "logical_xor": torch.logical_xor,
    }.items()
}  # fmt: skip
"""Broadcasting binaries whose torch function needs tensors on both sides."""
