"""Where MLX differs from the shared implementations (:mod:`mithril.backends.array_api`): ``sign`` and
``floor_divide`` keep NumPy's answers for NaN and infinities, int/bool sums and arg-reductions come back
as int64, softmax accumulates half inputs in float32, ``arange`` counts halves in float32, ``linear`` is
one ``addmm``, convolutions and pooling have their own kernels (:mod:`._conv`, :mod:`._pool`), random
ops draw with ``backend.next_key()``, ``unique`` goes through NumPy (``mx.unique`` needs a static
size; ``unique`` and ``item`` are refused inside ``mx.compile``), and ``cholesky``/``eigvalsh`` run on
the CPU stream (MLX has no GPU kernels for them) with their VJPs from the shared gradient helpers (MLX
implements none).

Example:
    >>> import mlx.core as mx
    >>> TABLE["sum"](mx.array([True, True]), axis=None, keepdim=False).dtype
    mlx.core.int64
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import mlx.core as mx
import numpy as np
from mithril.extend import Binding, array_api, rules, uses_backend

from . import _conv, _pool

__all__ = ["FLOATS", "TABLE"]

Array = mx.array
FLOATS = (mx.float16, mx.bfloat16, mx.float32, mx.float64)


def _axis(axis: Any) -> Any:
    return list(axis) if isinstance(axis, (list, tuple)) else axis


def floor_divide(left: Array, right: Array) -> Array:
    """``left // right`` (rounds toward -inf, for ints and floats), with NumPy's (and Python's) answers
    for infinities: ``inf // 2`` is NaN and ``-2 // inf`` is ``-1`` (``mx.floor_divide`` gives ``inf``, ``-0``).

    >>> floor_divide(mx.array([float("inf"), -2.0, 7.0]), mx.array([2.0, float("inf"), 2.0])).tolist()
    [nan, -1.0, 3.0]
    """
    result = mx.floor_divide(left, right)
    if result.dtype not in FLOATS:
        return result
    left, right = (v if isinstance(v, mx.array) else mx.array(v, dtype=result.dtype) for v in (left, right))
    result = mx.where(mx.isinf(left) & (right != 0), mx.array(float("nan"), dtype=result.dtype), result)
    opposite = mx.isinf(right) & mx.isfinite(left) & (left != 0) & ((left < 0) != (right < 0))
    return mx.where(opposite, mx.array(-1.0, dtype=result.dtype), result)


def _int64(result: Array) -> Array:
    return result if result.dtype in FLOATS or result.dtype == mx.int64 else result.astype(mx.int64)


def sum(input: Array, *, axis: Any, keepdim: bool) -> Array:
    """``mx.sum(input, axis, keepdims=keepdim)``; int and bool inputs sum to int64."""
    return _int64(mx.sum(input, axis=_axis(axis), keepdims=keepdim))


def prod(input: Array, *, axis: Any, keepdim: bool) -> Array:
    """``mx.prod(input, axis, keepdims=keepdim)``; int and bool inputs multiply to int64."""
    return _int64(mx.prod(input, axis=_axis(axis), keepdims=keepdim))


def _arg(fn: Callable[..., Array], input: Array, axis: int | None, keepdim: bool) -> Array:
    if axis is None:  # over the flattened input; keepdim keeps every axis as size 1 (NumPy)
        result = fn(mx.reshape(input, (-1,)), axis=0)
        return mx.reshape(result, (1,) * input.ndim).astype(mx.int64) if keepdim else result.astype(mx.int64)
    return fn(input, axis=axis, keepdims=keepdim).astype(mx.int64)


def argmax(input: Array, *, axis: int | None, keepdim: bool) -> Array:
    """``argmax`` as int64 (first of ties); ``axis=None`` is over the flattened input."""
    return _arg(mx.argmax, input, axis, keepdim)


def argmin(input: Array, *, axis: int | None, keepdim: bool) -> Array:
    """``argmin`` as int64 (first of ties); ``axis=None`` is over the flattened input."""
    return _arg(mx.argmin, input, axis, keepdim)


def softmax(input: Array, *, axis: int) -> Array:
    """``exp(x - logsumexp(x, axis))`` (``mx.softmax``, accumulated in float32 for half inputs)."""
    return mx.softmax(input, axis=axis, precise=True)


def log_softmax(input: Array, *, axis: int) -> Array:
    """``x - logsumexp(x, axis)``, computed stably: the max is subtracted first, so ``logsumexp`` of a row of
    large values (``[1e10, 1e10, 1e10]``) is not lost to rounding when ``x`` is subtracted from it.

    >>> log_softmax(mx.array([1e10, 1e10, 1e10]), axis=0).tolist()
    [-1.0986123085021973, -1.0986123085021973, -1.0986123085021973]
    """
    shifted = input - mx.max(input, axis=axis, keepdims=True)
    return shifted - mx.logsumexp(shifted, axis=axis, keepdims=True)


@uses_backend
def arange(backend: Any, *, start: float, stop: float | None, step: float) -> Array:
    """``arange(start, stop, step)``: backend float dtype if any bound is a float, else int64."""
    dtype = backend.native_dtype(rules.creation_kind(None, start, stop, step, counting=True))
    work = mx.float32 if dtype in (mx.float16, mx.bfloat16) else dtype  # count in float32, then round
    values = mx.arange(start, stop, step, dtype=work) if stop is not None else mx.arange(start, dtype=work)
    return values.astype(dtype)


def linear(input: Array, weight: Array, bias: Array | None) -> Array:
    """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``.

    With a bias this is one ``mx.addmm`` for 2-d inputs."""
    if bias is not None and input.ndim == 2:
        return mx.addmm(bias, input, weight.T)
    out = mx.matmul(input, mx.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias


@uses_backend
def dropout_mask(backend: Any, input: Array, *, p: float, training: bool) -> Array:
    """Keep-mask scaled by ``1/(1-p)`` (zeros where dropped) shaped like ``input``; ones when not training."""
    dtype = backend.native_dtype("float")
    shape = tuple(input.shape)
    if not training or p == 0:
        return mx.ones(shape, dtype=dtype)
    if p >= 1:
        return mx.zeros(shape, dtype=dtype)
    keep = mx.random.uniform(shape=shape, key=backend.next_key()) >= p
    return keep.astype(dtype) * (1.0 / (1.0 - p))


@uses_backend
def randn(backend: Any, *, shape: Any) -> Array:
    """Standard normal samples of ``shape`` in the backend float dtype (drawn in float32)."""
    return mx.random.normal(tuple(shape), key=backend.next_key()).astype(backend.native_dtype("float"))


@uses_backend
def randint(backend: Any, *, low: int, high: int, shape: Any) -> Array:
    """Integers uniform in ``[low, high)`` of ``shape`` (int64)."""
    return mx.random.randint(low, high, tuple(shape), dtype=mx.int64, key=backend.next_key())


def _on_cpu_with_vjp(forward: Callable[..., Array], grad: Callable[..., Array]) -> Callable[..., Array]:
    """``forward`` on the CPU stream as an ``mx.custom_function`` whose VJP is ``grad(cotangent, input)``;
    half-precision inputs are computed in float32 (MLX's factorisations take float32/float64 only)."""

    def run(fn: Callable[..., Array], *args: Array) -> Array:
        dtype = args[-1].dtype
        wide = dtype in (mx.float16, mx.bfloat16)
        with mx.stream(mx.cpu):
            result = fn(*(a.astype(mx.float32) for a in args)) if wide else fn(*args)
        return result.astype(dtype) if wide else result

    @mx.custom_function
    def primitive(input: Array) -> Array:
        return run(forward, input)

    @primitive.vjp
    def primitive_vjp(primals: Any, cotangent: Array, output: Array) -> Array:
        return run(grad, cotangent, primals[0] if isinstance(primals, (list, tuple)) else primals)

    return cast("Callable[..., Array]", primitive)  # MLX's stub types custom_function's result as object


def unique(input: Array) -> Array:
    """``np.unique`` of the values (``mx.unique`` needs a static size): outside ``mx.compile`` only."""
    values = input.astype(mx.float32) if input.dtype == mx.bfloat16 else input  # NumPy has no bfloat16
    return mx.array(np.unique(np.array(values))).astype(input.dtype)


_SHARED_LINALG = array_api.linalg.build(Binding(mx, {}, sequence=list, floats=FLOATS))
_LINALG: dict[str, Callable[..., Array]] = {
    name: _on_cpu_with_vjp(_SHARED_LINALG[name], _SHARED_LINALG[f"{name}_grad"])
    for name in ("cholesky", "eigvalsh")
    if name in _SHARED_LINALG and f"{name}_grad" in _SHARED_LINALG
}

TABLE: dict[str, Callable[..., Any]] = {
    "sign": array_api.elementwise.sign_keeping_nan(Binding(mx, {}, floats=FLOATS)), "floor_divide": floor_divide,
    "sum": sum, "prod": prod, "argmax": argmax, "argmin": argmin, "softmax": softmax, "log_softmax": log_softmax,
    "arange": arange, "linear": linear, "conv1d": _conv.conv_forward, "conv2d": _conv.conv_forward,
    "max_pool2d": _pool.max_pool, "avg_pool2d": _pool.avg_pool,
    "dropout_mask": dropout_mask, "randn": randn, "randint": randint, **_LINALG,
    **{
        name: array_api.conversions.eager_only(name, fn, "MlxBackend", (ValueError,), "[eval]")
        for name, fn in (("unique", unique), ("item", array_api.conversions.item))
    },
}  # fmt: skip
"""MLX's overrides of the shared op table."""
