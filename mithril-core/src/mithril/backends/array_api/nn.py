"""Linear algebra, attention, embedding and losses written once against ``xp``. Convolutions, pooling
and random ops stay in the backends (each framework has its own kernels and RNG).

Example:
    >>> import numpy as np
    >>> from mithril.backends.array_api import op_table
    >>> ops = op_table(np)
    >>> ops["linear"](np.ones((2, 3)), np.ones((4, 3)), np.zeros(4)).tolist()[0]
    [3.0, 3.0, 3.0, 3.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ...errors import ArgumentError
from ...primitives import uses_backend
from ._binding import Binding, Impl

__all__ = ["build", "dropout_mask_drawing", "log_probabilities"]


def dropout_mask_drawing(xp: Any, uniform: Callable[[Any, tuple[int, ...]], Any]) -> Impl:
    """The ``dropout_mask`` primitive on namespace ``xp`` for a backend whose float32 uniforms in ``[0, 1)``
    are ``uniform(backend, shape)`` (its own generator or key).

    >>> import numpy as np
    >>> from mithril_backend_numpy import NumpyBackend
    >>> mask = dropout_mask_drawing(np, lambda b, s: b.rng.random(s, dtype=np.float32))
    >>> sorted(set(mask(NumpyBackend(seed=0), np.ones(1000), p=0.5, training=True).tolist()))
    [0.0, 2.0]
    """
    ones, zeros, shape_of = xp.ones, xp.zeros, xp.shape

    @uses_backend
    def dropout_mask(backend: Any, input: Any, *, p: float, training: bool) -> Any:
        """Keep-mask scaled by ``1/(1-p)`` (zeros where dropped) shaped like ``input``; ones when not training."""
        dtype = backend.native_dtype("float")
        shape = shape_of(input)
        if not training or p == 0:
            return ones(shape, dtype=dtype)
        if p >= 1:
            return zeros(shape, dtype=dtype)
        keep = uniform(backend, shape) >= p
        return keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))

    return dropout_mask


def log_probabilities(
    input: Any, input_type: str, log_softmax: Callable[[Any], Any], clamped_log: Callable[[Any], Any]
) -> Any:
    """``log p`` over the class axis 1 for input given as ``logits`` (``log_softmax(input)``, over axis 1),
    ``probs`` (``clamped_log(input)``: the log of the input clamped below at ``eps``) or ``log_probs``
    (``input``); the cross entropy of every Python backend.

    >>> import numpy as np
    >>> log_probabilities(np.array([[0.5, 0.5]]), "probs", None, np.log).round(4).tolist()
    [[-0.6931, -0.6931]]
    """
    if input_type == "logits":
        return log_softmax(input)
    if input_type == "probs":
        return clamped_log(input)
    if input_type == "log_probs":
        return input
    raise ArgumentError(f"cross_entropy: input_type must be 'logits', 'probs' or 'log_probs', got {input_type!r}")


def build(b: Binding) -> dict[str, Impl]:
    """The linear-algebra, attention, embedding and loss implementations bound to ``b.xp``."""
    xp = b.xp
    matmul, swapaxes, where, triu, ones = xp.matmul, xp.swapaxes, xp.where, xp.triu, xp.ones
    take, take_along_axis, expand_dims, squeeze = xp.take, xp.take_along_axis, xp.expand_dims, xp.squeeze
    log, maximum, abs_, sum_, square = xp.log, xp.maximum, xp.abs, xp.sum, xp.square
    bool_ = getattr(xp, "bool_", getattr(xp, "bool", None))
    softmax, log_softmax, softplus = b.pick("softmax", None), b.pick("log_softmax", None), b.pick("softplus", None)

    def linear(input: Any, weight: Any, bias: Any) -> Any:
        """``input @ weight.T + bias`` with PyTorch's ``[out, in]`` weight layout; ``bias`` may be ``None``."""
        out = matmul(input, swapaxes(weight, -1, -2))
        return out if bias is None else out + bias

    def embedding(input: Any, weight: Any) -> Any:
        """``weight[input]``: rows of ``weight`` [num_embeddings, dim] picked by integer indices."""
        return take(weight, input, axis=0)

    def attention_weights(query: Any, key: Any, mask: Any, *, causal: bool, scale: float | None) -> Any:
        """``softmax(q @ k^T * scale + mask)``: a bool mask keeps True, a float mask is added, ``causal``
        masks ``j > i`` (top-left aligned, like torch); ``scale`` defaults to ``1/sqrt(d)``."""
        scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
        scores = matmul(query, swapaxes(key, -1, -2)) * scale
        if mask is not None:
            scores = where(mask, scores, -math.inf) if mask.dtype == bool_ else scores + mask
        if causal:
            lq, lk = scores.shape[-2:]
            scores = where(triu(ones((lq, lk), dtype=bool_), k=1), -math.inf, scores)
        return softmax(scores, axis=-1)

    def scaled_dot_product_attention(
        query: Any, key: Any, value: Any, mask: Any, *, causal: bool, scale: float | None
    ) -> Any:
        """``softmax(q @ k^T * scale + mask) @ v`` with torch's masking rules (see ``attention_weights``)."""
        return matmul(attention_weights(query, key, mask, causal=causal, scale=scale), value)

    def cross_entropy(input: Any, target: Any, *, input_type: str, categorical: bool, eps: float) -> Any:
        """``-sum(target_onehot * log p, axis=1)``: input [N, C, ...]; target class indices [N, ...] when
        ``categorical``, else probabilities shaped like input. Output [N, ...]."""
        log_p = log_probabilities(input, input_type, lambda x: log_softmax(x, axis=1), lambda p: log(maximum(p, eps)))
        if categorical:
            return -squeeze(take_along_axis(log_p, expand_dims(target, 1), axis=1), axis=1)
        return -sum_(target * log_p, axis=1)

    def binary_cross_entropy(input: Any, target: Any, *, input_type: str, eps: float) -> Any:
        """``-(t log p + (1 - t) log(1 - p))``; ``p = sigmoid(input)`` for ``logits`` (computed stably as
        ``softplus(x) - x t``; not ``max(x, 0) - x t + log1p(exp(-|x|))``, whose autodiff gradient at
        ``x = 0`` is wrong: the kinks of ``max`` and ``abs`` do not cancel there) or ``input`` for ``probs``
        (clamped to ``[eps, 1 - eps]``)."""
        if input_type == "logits":
            return softplus(input) - input * target
        if input_type == "probs":
            return -(target * log(maximum(input, eps)) + (1 - target) * log(maximum(1 - input, eps)))
        raise ArgumentError(f"binary_cross_entropy: input_type must be 'logits' or 'probs', got {input_type!r}")

    def squared_error(input: Any, target: Any) -> Any:
        """``(input - target) ** 2``"""
        return square(input - target)

    def absolute_error(input: Any, target: Any) -> Any:
        """``abs(input - target)``"""
        return abs_(input - target)

    functions = (
        linear, embedding, attention_weights, scaled_dot_product_attention, cross_entropy,
        binary_cross_entropy, squared_error, absolute_error,
    )  # fmt: skip
    return {f.__name__: f for f in functions} | {"matmul": matmul}
