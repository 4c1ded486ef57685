"""GPT-2 as a Mithril model: :class:`GPT`, :func:`create_gpt` and :func:`from_hf_config`.

The child blocks carry the names of ``transformers.GPT2LMHeadModel``'s modules (``transformer.wte``,
``transformer.h.0.attn.c_attn``, ``transformer.ln_f``, ``lm_head``), so a model compiled with
``use_short_namings=False`` has the parameter names of a Hugging Face checkpoint, and :func:`load_hf`
fills it from one. The graph is built by :mod:`mithril_models.gpt.layers`, which also builds the
KV-cache decode steps (same parameter paths).

Example:
    >>> gpt = create_gpt(bias=True, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=50)
    >>> gpt.input_keys[:1], gpt.output_keys
    (['input'], ['output'])
"""

from __future__ import annotations

from typing import Any

from ..family import FamilyModel
from .checkpoint import hf_layout
from .config import GPTConfig, config_from_hf
from .layers import build_gpt

__all__ = ["GPT", "create_gpt", "from_hf_config"]


class GPT(FamilyModel[GPTConfig]):
    """GPT-2 (a :class:`FamilyModel`, ``family = "gpt2"``): ``input`` (int token ids ``[B, T]``, any
    ``T <= block_size``) -> ``output`` (logits ``[B, T, vocab_size]``).

    >>> from mithril_models.gpt.config import GPTConfig
    >>> GPT(GPTConfig(bias=False, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)).family
    'gpt2'
    """

    family = "gpt2"
    config_type = GPTConfig
    made_by = "create_gpt(...) or from_hf_config(...)"
    builder = staticmethod(build_gpt)
    layouts = (hf_layout,)
    """Hugging Face ``GPT2LMHeadModel`` names (also ``GPT2Model`` files without ``transformer.``)."""


def create_gpt(
    bias: bool,
    block_size: int,
    dims: int,
    num_heads: int,
    num_layers: int,
    vocab_size: int,
    *,
    tie_word_embeddings: bool = True,
    layer_norm_epsilon: float = 1e-5,
    name: str | None = None,
) -> GPT:
    """GPT-2 with the given sizes (GELU with the tanh approximation, HF ``"gelu_new"``).

    Args:
        bias: biases in linear layers and layer norms (``False``: none, as nanoGPT's option).
        block_size: the longest sequence (learned positions).
        dims, num_heads, num_layers, vocab_size: the model's sizes.
        tie_word_embeddings: the LM head reuses ``transformer.wte.weight``; ``False`` gives it its own
            ``lm_head.weight`` (no bias).
        layer_norm_epsilon: added to the variance in every layer norm.
        name: the model's name.

    >>> gpt = create_gpt(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)
    >>> gpt.config.head_dim
    8
    """
    config = GPTConfig(
        bias=bool(bias),
        block_size=block_size,
        dims=dims,
        num_heads=num_heads,
        num_layers=num_layers,
        vocab_size=vocab_size,
        tie_word_embeddings=bool(tie_word_embeddings),
        layer_norm_epsilon=layer_norm_epsilon,
    )
    return GPT(config, name=name)


def from_hf_config(config: Any) -> GPT:
    """The GPT-2 of a ``transformers.GPT2Config`` (any sizes; ``activation_function`` ``"gelu_new"``,
    ``"gelu_pytorch_tanh"`` or ``"gelu"``; ``n_inner`` honoured).

    >>> from_hf_config({"n_embd": 16, "n_layer": 1, "n_head": 2, "n_positions": 8, "vocab_size": 32}).config.dims
    16
    """
    return GPT(config_from_hf(config))
