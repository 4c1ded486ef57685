"""Per-element losses (no reduction over the batch; that is ``mean``/``sum``). Class axis is 1.

Example:
    >>> import numpy as np
    >>> logits = np.zeros((1, 4))
    >>> round(float(cross_entropy(logits, np.array([2]), input_type="logits", categorical=True, eps=1e-12)[0]), 4)
    1.3863
"""

from __future__ import annotations

import numpy as np
from mithril.errors import ArgumentError

from .reductions import log_softmax

__all__ = ["cross_entropy", "binary_cross_entropy", "squared_error", "absolute_error"]

Array = np.ndarray


def log_probabilities(input: Array, input_type: str, eps: float) -> Array:
    """``log p`` over the class axis 1 for input given as ``logits``, ``probs`` or ``log_probs``."""
    if input_type == "logits":
        return log_softmax(input, axis=1)
    if input_type == "probs":
        return np.log(np.maximum(input, eps))
    if input_type == "log_probs":
        return np.asarray(input)
    raise ArgumentError(f"cross_entropy: input_type must be 'logits', 'probs' or 'log_probs', got {input_type!r}")


def cross_entropy(input: Array, target: Array, *, input_type: str, categorical: bool, eps: float) -> Array:
    """``-sum(target_onehot * log p, axis=1)``: input [N, C, ...]; target class indices [N, ...] when
    ``categorical``, else probabilities shaped like input. Output [N, ...]."""
    log_p = log_probabilities(input, input_type, eps)
    if categorical:
        picked = np.take_along_axis(log_p, np.expand_dims(np.asarray(target, dtype=np.intp), 1), axis=1)
        return -np.squeeze(picked, axis=1)
    return -np.sum(target * log_p, axis=1)


def binary_cross_entropy(input: Array, target: Array, *, input_type: str, eps: float) -> Array:
    """``-(t log p + (1 - t) log(1 - p))``; ``p = sigmoid(input)`` for ``logits`` (computed stably as
    ``max(x, 0) - x t + log1p(exp(-|x|))``) or ``input`` for ``probs`` (clamped to ``[eps, 1 - eps]``)."""
    if input_type == "logits":
        return np.maximum(input, 0) - input * target + np.log1p(np.exp(-np.abs(input)))
    if input_type == "probs":
        return -(target * np.log(np.maximum(input, eps)) + (1 - target) * np.log(np.maximum(1 - input, eps)))
    raise ArgumentError(f"binary_cross_entropy: input_type must be 'logits' or 'probs', got {input_type!r}")


def squared_error(input: Array, target: Array) -> Array:
    """``(input - target) ** 2``"""
    return np.square(np.subtract(input, target))


def absolute_error(input: Array, target: Array) -> Array:
    """``abs(input - target)``"""
    return np.abs(np.subtract(input, target))
