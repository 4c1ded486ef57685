"""The gradient-helper primitives that the generic VJP rules emit and NumPy (a manual-gradient backend)
computes by hand. Convolution and pooling gradients are bound straight to :mod:`._conv` and :mod:`._pool`
in the op table; ``sum_to_like``, ``linear_grad_weight`` and the other helpers expressible in the array
API are shared (:mod:`mithril.backends.array_api`).

Example:
    >>> import numpy as np
    >>> index_grad(np.ones(2), np.zeros(4), key=slice(1, 3)).tolist()
    [0.0, 1.0, 1.0, 0.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mithril.errors import ArgumentError

Array = np.ndarray


def embedding_grad(output_grad: Array, input: Array, like: Array) -> Array:
    """Scatter-add of ``output_grad`` rows into zeros shaped like the weight, at the indices ``input``."""
    grad = np.zeros(np.shape(like), dtype=output_grad.dtype)
    np.add.at(grad, np.ravel(input), output_grad.reshape(-1, *grad.shape[1:]))
    return grad


def index_grad(output_grad: Array, like: Array, *, key: Any) -> Array:
    """Zeros like ``like`` with ``output_grad`` placed at ``[key]`` (basic indexing never repeats)."""
    grad = np.zeros(np.shape(like), dtype=np.result_type(output_grad))
    grad[key] = output_grad
    return grad


def gather_grad(output_grad: Array, index: Array, like: Array, *, axis: int) -> Array:
    """Zeros like ``like`` with ``output_grad`` added along ``axis`` at ``index`` (inverse of
    ``take_along_axis``; repeated indices accumulate)."""
    grad = np.zeros(np.shape(like), dtype=output_grad.dtype)
    axis = axis % grad.ndim
    index = np.asarray(index)
    grid = list(np.ogrid[tuple(slice(n) for n in index.shape)])
    grid[axis] = index
    np.add.at(grad, tuple(grid), output_grad)
    return grad


def cross_entropy_grad(
    output_grad: Array, input: Array, target: Array, *, input_type: str, categorical: bool, eps: float
) -> Array:
    """``d cross_entropy / d input`` times ``output_grad`` [N, ...] (broadcast over class axis 1)."""
    input = np.asarray(input)
    if categorical:
        onehot = np.zeros(input.shape, dtype=input.dtype if input.dtype.kind == "f" else np.float64)
        np.put_along_axis(onehot, np.expand_dims(np.asarray(target, dtype=np.intp), 1), 1, axis=1)
        target = onehot
    if input_type == "logits":
        shifted = np.exp(input - np.max(input, axis=1, keepdims=True))
        grad = shifted / np.sum(shifted, axis=1, keepdims=True) * np.sum(target, axis=1, keepdims=True) - target
    elif input_type == "probs":
        grad = np.where(input >= eps, -target / np.maximum(input, eps), 0)
    elif input_type == "log_probs":
        grad = -np.asarray(target)
    else:
        raise ArgumentError(f"cross_entropy: input_type must be 'logits', 'probs' or 'log_probs', got {input_type!r}")
    scaled: Array = grad * np.expand_dims(output_grad, 1)
    return scaled
