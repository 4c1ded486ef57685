"""Multi-head attention from Linear projections and the ``scaled_dot_product_attention`` primitive."""

from __future__ import annotations

from ... import validation
from ...errors import ArgumentError
from ...framework.keys import IOKey
from ...framework.model import Model
from ..primitive import Primitive
from ._util import op
from .linear import Linear

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(Model):
    """Attention over ``[batch, seq, dim]`` with ``num_heads`` heads (PyTorch/GPT-2 semantics).

    Keys: ``input`` (queries; also keys/values unless ``cross=True``), ``memory`` (keys/values when
    ``cross=True``), optional ``mask`` (bool keep-mask or additive float mask, broadcast to
    ``[batch, heads, q, k]``), ``output``. Projections are children ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj`` (each a :class:`Linear`).

    >>> MultiHeadAttention(dim=16, num_heads=4, causal=True).input_keys[0]
    'input'
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        use_bias: bool = True,
        causal: bool = False,
        cross: bool = False,
        use_mask: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        dim = validation.positive_int("MultiHeadAttention", "dim", dim)
        num_heads = validation.positive_int("MultiHeadAttention", "num_heads", num_heads)
        if dim % num_heads:
            raise ArgumentError(f"MultiHeadAttention: dim={dim} must be divisible by num_heads={num_heads}")
        head_dim = dim // num_heads
        source = "memory" if cross else "input"
        heads = {}
        for proj, key in (("q_proj", "input"), ("k_proj", source), ("v_proj", source)):
            linear = Linear(dim, use_bias=use_bias, name=proj)
            self |= linear(input=IOKey(key, shape=[None, None, dim]))
            split = op(self, "reshape", linear.output, shape=(None, None, num_heads, head_dim))  # [B, T, H, D]
            heads[proj] = op(self, "transpose", split, axes=(0, 2, 1, 3))  # [B, H, T, D]
        sdpa = Primitive("scaled_dot_product_attention", causal=causal)
        self |= sdpa(
            query=heads["q_proj"], key=heads["k_proj"], value=heads["v_proj"], mask=IOKey("mask") if use_mask else None
        )
        merged = op(self, "transpose", sdpa.output, axes=(0, 2, 1, 3))  # [B, T, H, D]
        merged = op(self, "reshape", merged, shape=(None, None, dim))  # [B, T, dim]
        out_proj = Linear(dim, use_bias=use_bias, name="out_proj")
        self |= out_proj(input=merged, output=IOKey("output"))
        self._cin = self._keys["input"]
