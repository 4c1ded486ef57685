"""Where JAX differs from the shared implementations (:mod:`mithril.backends.array_api`): transcendental
functions of int/bool inputs return the backend float dtype; ``jax.nn``/``jax.lax`` kernels (``relu``
whose gradient at 0 is 0, ``gelu``, ``softmax``, ``erf``, ``rsqrt``); ``linear`` as one ``dot_general``;
convolutions and pooling through ``lax`` (:mod:`._windows`); random ops drawing with ``backend.next_key()``
(inside a jitted forward a split of the traced key passed in on every call).

Example:
    >>> import jax.numpy as jnp
    >>> from mithril_backend_jax import JaxBackend
    >>> TABLE["exp"](JaxBackend(), jnp.array([0, 1])).dtype
    dtype('float32')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from mithril.extend import array_api, uses_backend

from . import _windows

__all__ = ["TABLE", "as_float", "is_float"]

Array = jax.Array


def is_float(value: Any) -> bool:
    """Whether ``value`` is an array (or NumPy scalar) with a floating dtype; Python scalars are not."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jnp.floating)


def as_float(backend: Any, value: Any) -> Any:
    """``value`` as an array; ints and bools are cast to the backend float dtype, floats kept."""
    array = jnp.asarray(value)
    return array if jnp.issubdtype(array.dtype, jnp.floating) else array.astype(backend.native_dtype("float"))


def _axis(axis: Any) -> Any:
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def _floating(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` applied to its input cast to the backend float dtype when it is an int/bool array."""

    @uses_backend
    def floating(backend: Any, input: Any, **attrs: Any) -> Any:
        return fn(as_float(backend, input), **attrs)

    floating.__name__ = floating.__qualname__ = name
    floating.__doc__ = f"``{name}`` of ``input`` (ints and bools as the backend float dtype)."
    floating.without_backend = fn  # type: ignore[attr-defined]  # for shared code, whose inputs are floats
    return floating


_FLOATING: dict[str, Callable[..., Any]] = {
    "exp": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt, "rsqrt": jax.lax.rsqrt, "sin": jnp.sin, "cos": jnp.cos,
    "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "erf": jax.lax.erf,
    "mean": lambda x, *, axis, keepdim: jnp.mean(x, axis=_axis(axis), keepdims=keepdim),
    "var": lambda x, *, axis, keepdim, correction: jnp.var(x, axis=_axis(axis), keepdims=keepdim, ddof=correction),
    "softplus": lambda x: jnp.logaddexp(x, 0),
    "gelu": lambda x, *, approximate: jax.nn.gelu(x, approximate=bool(approximate)),
}  # fmt: skip


def relu(input: Array) -> Array:
    """``max(input, 0)``; the gradient at 0 is 0."""
    return jax.nn.relu(input) if is_float(input) else jnp.maximum(input, 0)


def linear(input: Array, weight: Array, bias: Array | None) -> Array:
    """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``.

    Written as one ``dot_general`` contracting the feature axes, so XLA never materialises the transposed
    weight (with a single input row it otherwise copies the whole weight on every call)."""
    if jnp.ndim(weight) == 2 and jnp.ndim(input) >= 1:
        out = jax.lax.dot_general(input, weight, (((jnp.ndim(input) - 1,), (1,)), ((), ())))
    else:
        out = jnp.matmul(input, jnp.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias


@uses_backend
def divide(backend: Any, left: Array, right: Array) -> Array:
    """``left / right`` (true division); ints divide into the backend's float dtype."""
    if is_float(left) or is_float(right):
        return jnp.true_divide(left, right)
    return jnp.true_divide(as_float(backend, left), as_float(backend, right))


def index(input: Array, *, key: Any) -> Array:
    """``input[key]`` with a static basic-indexing key (ints, slices, ``None``, ``...``)."""
    return jnp.asarray(input)[key]


def dynamic_update_slice(input: Array, update: Array, start: Array, *, axis: int) -> Array:
    """``jax.lax.dynamic_update_slice_in_dim`` (XLA updates in place where the input's buffer allows)."""
    return jax.lax.dynamic_update_slice_in_dim(input, update.astype(input.dtype), jnp.reshape(start, ()), axis)


@uses_backend
def avg_pool2d(
    backend: Any, input: Array, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any, count_include_pad: bool
) -> Array:
    """torch ``avg_pool2d`` over the last two axes; padding counts as zeros when ``count_include_pad``."""
    return _windows.avg_pool(
        input, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
        count_include_pad=count_include_pad, float_dtype=backend.native_dtype("float"),
    )  # fmt: skip


@uses_backend
def randn(backend: Any, *, shape: Any) -> Array:
    """Standard normal samples of ``shape`` in the backend float dtype."""
    return jax.random.normal(backend.next_key(), tuple(shape), dtype=backend.native_dtype("float"))


@uses_backend
def randint(backend: Any, *, low: int, high: int, shape: Any) -> Array:
    """Integers uniform in ``[low, high)`` of ``shape`` (the backend's int dtype)."""
    return jax.random.randint(backend.next_key(), tuple(shape), low, high, dtype=backend.native_dtype("int"))


TABLE: dict[str, Callable[..., Any]] = {
    **{name: _floating(name, fn) for name, fn in _FLOATING.items()},
    "relu": relu, "linear": linear, "divide": divide, "index": index, "avg_pool2d": avg_pool2d,
    "dynamic_update_slice": dynamic_update_slice,
    "conv1d": _windows.conv_forward, "conv2d": _windows.conv_forward, "max_pool2d": _windows.max_pool,
    "softmax": jax.nn.softmax, "log_softmax": jax.nn.log_softmax,
    "dropout_mask": array_api.nn.dropout_mask_drawing(
        jnp, lambda b, shape: jax.random.uniform(b.next_key(), shape, jnp.float32)
    ),
    "randn": randn, "randint": randint, "stop_gradient": jax.lax.stop_gradient,
    **{
        name: array_api.conversions.eager_only(name, fn, "JaxBackend", (jax.errors.ConcretizationTypeError,))
        for name, fn in (("unique", jnp.unique), ("item", array_api.conversions.item))
    },
}  # fmt: skip
"""JAX's overrides of the shared op table."""
