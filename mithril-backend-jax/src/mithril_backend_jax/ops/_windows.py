"""Convolution and pooling with ``jax.lax`` (PyTorch semantics: NC..., weight ``[O, C/groups, *k]``;
pooling over the last two axes). The window geometry (and the kernel-offset slices the max-pool gradient
scatters through) is core's :class:`~mithril.primitives.geometry.WindowGeometry`.

Example:
    >>> import jax.numpy as jnp
    >>> x, w = jnp.ones((1, 2, 4, 4)), jnp.ones((3, 2, 3, 3))
    >>> float(conv_forward(x, w, None, stride=1, padding=1, dilation=1, groups=1)[0, 0, 1, 1])
    18.0
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from mithril.extend import WindowGeometry, check_groups

__all__ = [
    "avg_pool",
    "conv_forward",
    "lowest",
    "max_pool",
    "max_pool_route",
    "pool_geometry",
]  # fmt: skip

_SPATIAL = "DHW"


def conv_forward(x: Any, weight: Any, bias: Any, *, stride: Any, padding: Any, dilation: Any, groups: int) -> jax.Array:
    """``torch.nn.functional.conv{n}d(x, weight, bias, stride, padding, dilation, groups)``."""
    dtype = jnp.result_type(x, weight)
    x, weight = jnp.asarray(x, dtype=dtype), jnp.asarray(weight, dtype=dtype)
    n = weight.ndim - 2
    out_channels = weight.shape[0]
    check_groups(x.shape[1], out_channels, groups)
    geometry = WindowGeometry.of(weight.shape[2:], stride=stride, padding=padding, dilation=dilation, size=x.shape[2:])
    letters = _SPATIAL[-n:]
    out = jax.lax.conv_general_dilated(
        x,
        weight,
        window_strides=geometry.stride,
        padding=geometry.pads,
        rhs_dilation=geometry.dilation,
        dimension_numbers=(f"NC{letters}", f"OI{letters}", f"NC{letters}"),
        feature_group_count=groups,
    )
    if bias is not None:
        out = out + jnp.asarray(bias, dtype=dtype).reshape(out_channels, *(1,) * n)
    return out


def pool_geometry(x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> WindowGeometry:
    return WindowGeometry.pool2d(
        jnp.shape(x), kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation
    )


def lowest(dtype: Any) -> Any:
    """The padding value of max pooling: ``-inf`` (floats), the minimum (ints), ``False`` (bools)."""
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf
    if dtype == jnp.bool_:
        return False
    return jnp.iinfo(dtype).min  # type: ignore[no-untyped-call]  # jax's iinfo.__init__ has no annotations


def _window_args(x: Any, geometry: WindowGeometry) -> dict[str, Any]:
    lead = jnp.ndim(x) - 2
    return {
        "window_dimensions": (1,) * lead + geometry.kernel,
        "window_strides": (1,) * lead + geometry.stride,
        "padding": ((0, 0),) * lead + geometry.pads,
        "window_dilation": (1,) * lead + geometry.dilation,
    }


def max_pool(x: Any, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> jax.Array:
    """``torch.nn.functional.max_pool2d`` over the last two axes; padding reads as ``-inf``.

    Differentiable (also with dilation, which ``lax.reduce_window`` cannot differentiate): the gradient
    goes to the first arg-max of each window, like the NumPy backend's ``max_pool2d_grad``.
    """
    x = jnp.asarray(x)
    return _max_pool(x, pool_geometry(x, kernel_size, stride, padding, dilation))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _max_pool(x: jax.Array, geometry: WindowGeometry) -> jax.Array:
    pooled: jax.Array = jax.lax.reduce_window(x, lowest(x.dtype), jax.lax.max, **_window_args(x, geometry))
    return pooled


def _max_pool_fwd(x: jax.Array, geometry: WindowGeometry) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    best = _max_pool(x, geometry)
    return best, (x, best)


def _max_pool_bwd(
    geometry: WindowGeometry, residuals: tuple[jax.Array, jax.Array], grad: jax.Array
) -> tuple[jax.Array]:
    x, best = residuals
    return (max_pool_route(grad, x, best, geometry).astype(x.dtype),)


_max_pool.defvjp(_max_pool_fwd, _max_pool_bwd)


def max_pool_route(grad: jax.Array, x: jax.Array, best: jax.Array, geometry: WindowGeometry) -> jax.Array:
    """Route ``grad`` (shaped like the pooled ``best``) to the first arg-max (row-major) of each window
    of ``x``; the result is shaped like ``x``."""
    pads = ((0, 0),) * (x.ndim - 2) + geometry.pads
    xp = jnp.pad(x, pads, constant_values=lowest(x.dtype)) if geometry.padded else x
    grad = jnp.broadcast_to(grad, best.shape)
    dxp = jnp.zeros(xp.shape, dtype=grad.dtype)
    pending = jnp.ones(best.shape, dtype=bool)  # windows whose arg-max is not found yet
    for _, window in geometry.offset_slices():
        hit = (xp[(..., *window)] == best) & pending
        pending = pending & ~hit
        dxp = dxp.at[(..., *window)].add(jnp.where(hit, grad, 0))
    (top, _), (left, _) = geometry.pads
    height, width = geometry.size
    return dxp[..., top : top + height, left : left + width]


def avg_pool(
    x: Any, *, kernel_size: Any, stride: Any, padding: Any, dilation: Any, count_include_pad: bool, float_dtype: Any
) -> jax.Array:
    """``torch.nn.functional.avg_pool2d`` over the last two axes (padding counts as zeros when
    ``count_include_pad``); int inputs average into ``float_dtype``."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(float_dtype)
    geometry = pool_geometry(x, kernel_size, stride, padding, dilation)
    total: jax.Array = jax.lax.reduce_window(x, x.dtype.type(0), jax.lax.add, **_window_args(x, geometry))
    if count_include_pad or not geometry.padded:
        mean: jax.Array = total / x.dtype.type(math.prod(geometry.kernel))  # ``x`` is typed Any
        return mean
    ones = np.pad(np.ones(geometry.size), geometry.pads)
    count = np.zeros(geometry.out)
    for _, window in geometry.offset_slices():
        count += ones[window]
    return total / jnp.asarray(count, dtype=x.dtype)
