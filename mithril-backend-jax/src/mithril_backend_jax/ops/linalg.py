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
    """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``.

    Written as one ``dot_general`` contracting the feature axes, so XLA never materialises the transposed
    weight (with a single input row it otherwise copies the whole weight on every call)."""
    if jnp.ndim(weight) == 2 and jnp.ndim(input) >= 1:
        out = jax.lax.dot_general(input, weight, (((jnp.ndim(input) - 1,), (1,)), ((), ())))
    else:
        out = jnp.matmul(input, jnp.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias
