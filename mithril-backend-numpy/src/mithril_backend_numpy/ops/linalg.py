"""Matrix multiplication and the fused ``linear`` layer.

Example:
    >>> import numpy as np
    >>> linear(np.ones((2, 3)), np.ones((4, 3)), None).shape
    (2, 4)
"""

from __future__ import annotations

import numpy as np

__all__ = ["matmul", "linear"]

Array = np.ndarray


def matmul(left: Array, right: Array) -> Array:
    """``np.matmul(left, right)`` (batched, NumPy 1-D promotion rules)."""
    return np.matmul(left, right)


def linear(input: Array, weight: Array, bias: Array | None) -> Array:
    """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``."""
    out = np.matmul(input, np.swapaxes(weight, -1, -2))
    if bias is None:
        return out
    if isinstance(out, np.ndarray) and out.dtype == np.result_type(out, bias) and out.ndim >= np.ndim(bias):
        out += bias
        return out
    return out + bias
