"""Per-element losses (no reduction over the batch; that is ``mean``/``sum``). Class axis is 1.

Example:
    >>> import jax.numpy as jnp
    >>> logits = jnp.zeros((1, 4))
    >>> round(float(cross_entropy(logits, jnp.array([2]), input_type="logits", categorical=True, eps=1e-12)[0]), 4)
    1.3863
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from mithril.errors import ArgumentError

__all__ = ["cross_entropy", "binary_cross_entropy", "squared_error", "absolute_error"]

Array = jax.Array


def log_probabilities(input: Array, input_type: str, eps: float) -> Array:
    """``log p`` over the class axis 1 for input given as ``logits``, ``probs`` or ``log_probs``."""
    if input_type == "logits":
        return jax.nn.log_softmax(input, axis=1)
    if input_type == "probs":
        return jnp.log(jnp.maximum(input, eps))
    if input_type == "log_probs":
        return jnp.asarray(input)
    raise ArgumentError(f"cross_entropy: input_type must be 'logits', 'probs' or 'log_probs', got {input_type!r}")


def cross_entropy(input: Array, target: Array, *, input_type: str, categorical: bool, eps: float) -> Array:
    """``-sum(target_onehot * log p, axis=1)``: input [N, C, ...]; target class indices [N, ...] when
    ``categorical``, else probabilities shaped like input. Output [N, ...]."""
    log_p = log_probabilities(input, input_type, eps)
    if categorical:
        index = jnp.expand_dims(jnp.asarray(target).astype(jnp.int32), 1)
        return -jnp.squeeze(jnp.take_along_axis(log_p, index, axis=1), axis=1)
    return -jnp.sum(target * log_p, axis=1)


def binary_cross_entropy(input: Array, target: Array, *, input_type: str, eps: float) -> Array:
    """``-(t log p + (1 - t) log(1 - p))``; ``p = sigmoid(input)`` for ``logits`` (computed stably as
    ``max(x, 0) - x t + log1p(exp(-|x|))``) or ``input`` for ``probs`` (clamped to ``[eps, 1 - eps]``)."""
    if input_type == "logits":
        return jnp.maximum(input, 0) - input * target + jnp.log1p(jnp.exp(-jnp.abs(input)))
    if input_type == "probs":
        return -(target * jnp.log(jnp.maximum(input, eps)) + (1 - target) * jnp.log(jnp.maximum(1 - input, eps)))
    raise ArgumentError(f"binary_cross_entropy: input_type must be 'logits' or 'probs', got {input_type!r}")


def squared_error(input: Array, target: Array) -> Array:
    """``(input - target) ** 2``"""
    return jnp.square(jnp.subtract(input, target))


def absolute_error(input: Array, target: Array) -> Array:
    """``abs(input - target)``"""
    return jnp.abs(jnp.subtract(input, target))
