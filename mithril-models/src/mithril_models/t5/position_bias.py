"""T5's relative position bias: a learned scalar per head for each bucket of ``key_pos - query_pos``.

The bucket of an offset is computed in float32 with a logarithm and a truncation (Mesh TensorFlow's
scheme, reproduced by ``transformers``), so an offset near a bucket boundary may land on either side
depending on how ``log`` rounds. To give the same buckets on every backend and in every dtype, the
buckets of all offsets in ``[-max_distance, max_distance]`` are computed once, at build time, with NumPy
in float32 exactly as ``transformers`` does; beyond that range every offset falls in the outermost
bucket, so the graph only clips the offset and looks its row up. No logarithm runs at run time.
In the decoder the causal mask is folded into the same table (future offsets get :data:`MASKED`).

Example:
    >>> relative_position_buckets(8, 20, bidirectional=True).tolist()[18:23]
    [2, 1, 0, 5, 6]
"""

from __future__ import annotations

import math

import numpy as np
from mithril.extend import op
from mithril.models import IOKey, Model

__all__ = ["MASKED", "RelativePositionBias", "relative_position_bucket", "relative_position_buckets"]

MASKED = -1e30
"""Added to the scores of keys a causal query must not see: ``exp`` of it is exactly 0 in every float dtype."""


def relative_position_bucket(
    relative_position: np.ndarray, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> np.ndarray:
    """The bucket (int64) of each offset ``key_position - query_position``, as ``transformers`` computes it.

    Bidirectional (encoder): half of the buckets for keys after the query. Unidirectional (decoder):
    keys after the query all share bucket 0. Half of each half holds exact small offsets, the other
    half logarithmically wider bins up to ``max_distance``; larger offsets share the last bucket.

    >>> offsets = np.array([-3, 0, 2, -50])
    >>> relative_position_bucket(offsets, bidirectional=False, num_buckets=8, max_distance=20).tolist()
    [3, 0, 0, 7]
    """
    relative_position = np.asarray(relative_position, dtype=np.int64)
    buckets = np.zeros(relative_position.shape, dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).astype(np.int64) * num_buckets
        distance = np.abs(relative_position)
    else:
        distance = -np.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    if max_exact < 1 or max_distance <= max_exact:
        raise ValueError(
            f"T5 relative attention needs relative_attention_num_buckets >= {4 if bidirectional else 2} and "
            f"relative_attention_max_distance > {max_exact} for {'bidirectional' if bidirectional else 'causal'} "
            f"attention; got num_buckets={num_buckets * (2 if bidirectional else 1)}, max_distance={max_distance}"
        )
    is_small = distance < max_exact
    # float32 throughout, in the order transformers uses: log(d / max_exact) / log(max_distance / max_exact) * n
    safe = np.maximum(distance, max_exact).astype(np.float32)  # the large branch is only used where d >= max_exact
    scaled = np.log(safe / np.float32(max_exact)) / np.float32(math.log(max_distance / max_exact))
    scaled = scaled * np.float32(num_buckets - max_exact)
    if_large = np.minimum(max_exact + scaled.astype(np.int64), num_buckets - 1)
    bucket: np.ndarray = buckets + np.where(is_small, distance, if_large)
    return bucket


def relative_position_buckets(num_buckets: int, max_distance: int, *, bidirectional: bool) -> np.ndarray:
    """Bucket of every offset ``-max_distance .. max_distance`` (index ``offset + max_distance``).

    >>> relative_position_buckets(8, 20, bidirectional=False).shape
    (41,)
    """
    offsets = np.arange(-max_distance, max_distance + 1)
    return relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )


class RelativePositionBias(Model):
    """The additive attention scores ``[1, num_heads, T, T]`` for self-attention over ``input`` ``[B, T, d]``.

    Keys: ``input`` (only its length is used), ``weight`` ``[num_buckets, num_heads]`` (Hugging Face's
    ``relative_attention_bias.weight``) and ``output``. ``T`` may be known only at run time. With
    ``causal`` (the decoder) the buckets are unidirectional and keys after the query also get
    :data:`MASKED` added, so the output is the bias and the causal mask in one tensor. With
    ``cache_len`` (a decode step) the queries sit in slots ``start .. start + T - 1`` (input ``start``
    ``[1]``) and the keys are the ``cache_len`` slots of the cache: the output is ``[1, num_heads, T,
    cache_len]``, and slots not written yet are in the future, so masked.

    >>> bias = RelativePositionBias(num_buckets=8, max_distance=20, num_heads=4, causal=False)
    >>> sorted(bias.input_keys)
    ['input', 'weight']
    """

    def __init__(
        self,
        num_buckets: int,
        max_distance: int,
        num_heads: int,
        *,
        causal: bool,
        init: str = "normal",
        cache_len: int | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        buckets = relative_position_buckets(num_buckets, max_distance, bidirectional=not causal)
        one_hot = np.eye(num_buckets, dtype=np.float32)[buckets]  # [2 * max_distance + 1, num_buckets]
        weight = IOKey("weight", shape=[num_buckets, num_heads], type="float", differentiable=True, init=init)
        # one row of per-head scores for each clipped offset: [2 * max_distance + 1, num_heads]
        table = op(self, "matmul", IOKey(value=one_hot), weight)
        if causal:
            future = np.where(np.arange(-max_distance, max_distance + 1) > 0, MASKED, 0.0).astype(np.float32)
            table = table + future[:, None]
        queries = keys = op(self, "positions", IOKey("input", shape=[None, None, None]), axis=1)  # [T]
        if cache_len is not None:  # a decode step: queries in slots start .. start + T - 1, keys every slot
            queries = op(self, "add", queries, IOKey("start", shape=[1], type="int"))
            keys = op(self, "arange", stop=cache_len)  # [L]
        offsets = op(self, "unsqueeze", keys, axis=0) - op(self, "unsqueeze", queries, axis=1)  # key - query
        clipped = op(self, "minimum", op(self, "maximum", offsets, -max_distance), max_distance) + max_distance
        bias = op(self, "embedding", clipped, table)  # [T, T or L, num_heads]
        bias = op(self, "unsqueeze", op(self, "transpose", bias, axes=(2, 0, 1)), axis=0)  # [1, num_heads, T, T or L]
        self.expose(bias)
