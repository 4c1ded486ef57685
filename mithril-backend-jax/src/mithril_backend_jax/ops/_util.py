"""Small helpers shared by the op modules."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

__all__ = ["is_float", "as_float"]


def is_float(value: Any) -> bool:
    """Whether ``value`` is an array (or NumPy scalar) with a floating dtype; Python scalars are not."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jnp.floating)


def as_float(backend: Any, value: Any) -> Any:
    """``value`` as an array; ints and bools are cast to the backend float dtype, floats kept."""
    array = jnp.asarray(value)
    return array if jnp.issubdtype(array.dtype, jnp.floating) else array.astype(backend.native_dtype("float"))
