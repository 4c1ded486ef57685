"""Matrix multiplication and the fused ``linear`` layer.

Example:
    >>> import mlx.core as mx
    >>> linear(mx.ones((2, 3)), mx.ones((4, 3)), None).shape
    (2, 4)
"""

from __future__ import annotations

import mlx.core as mx

__all__ = ["matmul", "linear"]

Array = mx.array


def matmul(left: Array, right: Array) -> Array:
    """``mx.matmul(left, right)`` (batched, NumPy 1-D promotion rules)."""
    return mx.matmul(left, right)


def linear(input: Array, weight: Array, bias: Array | None) -> Array:
    """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``.

    With a bias this is one ``mx.addmm`` for 2-d inputs."""
    if bias is not None and input.ndim == 2:
        return mx.addmm(bias, input, weight.T)
    out = mx.matmul(input, mx.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias
