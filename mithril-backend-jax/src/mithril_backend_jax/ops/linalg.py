"""Matrix multiplication and the fused ``linear`` layer.

Example:
    >>> import jax.numpy as jnp
    >>> linear(jnp.ones((2, 3)), jnp.ones((4, 3)), None).shape
    (2, 4)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["matmul", "linear"]

Array = jax.Array


def matmul(left: Array, right: Array) -> Array:
    """``jnp.matmul(left, right)`` (batched, NumPy 1-D promotion rules)."""
    return jnp.matmul(left, right)


def linear(input: Array, weight: Array, bias: Array | None) -> Array:
    """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``."""
    out = jnp.matmul(input, jnp.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias
