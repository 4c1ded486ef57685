"""The graph of GPT-2, shared by the model (:class:`~mithril_models.gpt.GPT`) and its decode steps.

:func:`build_gpt` adds ``transformer`` (``wte``, ``wpe``, ``h.<i>`` with ``ln_1``, ``attn.c_attn``,
``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, ``mlp.c_proj``; ``ln_f``) and, unless the embeddings are tied,
``lm_head``: the module names of ``transformers.GPT2LMHeadModel``, so every variant has the parameter
paths of a Hugging Face checkpoint. With a :class:`StepShape` it builds a KV-cache decode step instead:

- ``prompt=True``: the first ``T`` tokens (positions ``0 .. T-1``); causal attention among them, and the
  caches ``present_key_<i>``/``present_value_<i>`` ``[batch, H, cache_len, D]`` hold their keys and
  values in slots ``0 .. T-1`` (``write @ new`` with ``write`` the one-hot ``[cache_len, T]`` slot matrix).
- ``prompt=False``: one token at ``positions [1]``; the caches ``past_*_<i>`` come in, the token's key and
  value replace one slot (``where(slot == position, new, past)``) and the query attends the slots
  ``<= position`` (an additive mask).

Both return the logits of the last position only (``[batch, vocab]``).

Example:
    >>> from mithril.models import Model
    >>> from mithril_models.gpt.config import GPTConfig
    >>> root = Model()
    >>> build_gpt(root, GPTConfig(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32))
    >>> root.input_keys, root.output_keys
    (['input'], ['output'])
"""

from __future__ import annotations

import math

from mithril.extend import initializers, op
from mithril.models import Connection, Embedding, IOKey, LayerNorm, Linear, Model, Primitive

from ..kv_cache import (
    MASKED,
    StepShape,
    cache_names,
    cached_attention,
    expose_output,
    layer_cache_keys,
    lm_head,
    root_cache_keys,
    slot_tensors,
    step_keys,
    step_positions,
)
from .config import GPTConfig

__all__ = ["MASKED", "StepShape", "build_gpt", "build_gpt_head", "cache_names"]


def _dense(model: Model, x: Connection | IOKey, dims: int, config: GPTConfig, name: str) -> Connection:
    """A linear layer ``name`` of ``dims`` outputs on ``x``, initialised as GPT-2 (normal(initializer_range),
    zero bias; a residual projection ``c_proj`` with the std scaled by ``1 / sqrt(2 * num_layers)``)."""
    std = config.initializer_range / (math.sqrt(2 * config.num_layers) if name == "c_proj" else 1.0)
    layer = Linear(dims, use_bias=config.bias, weight_init=initializers.normal(std), bias_init="zeros", name=name)
    model |= layer(input=x)
    return layer.output


def _layer_norm(config: GPTConfig, name: str) -> LayerNorm:
    return LayerNorm(config.dims, eps=config.layer_norm_epsilon, use_bias=config.bias, name=name)


def _mlp(config: GPTConfig) -> Model:
    """``c_proj(gelu(c_fc(x)))``."""
    mlp = Model(name="mlp")
    hidden = _dense(mlp, IOKey("input"), config.hidden_dims, config, "c_fc")
    hidden = op(mlp, "gelu", hidden, approximate=config.approximate_gelu)
    mlp.expose(_dense(mlp, hidden, config.dims, config, "c_proj"), "output")
    return mlp


def _heads(model: Model, x: Connection, config: GPTConfig, step: StepShape | None) -> Connection:
    """``[B, T, dims]`` (rows ``[B * T, dims]`` in a step) -> ``[B, H, T, head_dim]``."""
    lead = (None, None) if step is None else (step.batch, -1)
    split = op(model, "reshape", x, shape=(*lead, config.num_heads, config.head_dim))  # [B, T, H, D]
    return op(model, "transpose", split, axes=(0, 2, 1, 3))  # [B, H, T, D]


def _attention(config: GPTConfig, step: StepShape | None) -> Model:
    """Causal self-attention with a fused ``c_attn`` (q, k, v) projection and ``c_proj``; in a step it
    also writes the KV cache and attends it (:func:`~mithril_models.kv_cache.cached_attention`)."""
    attn = Model(name="attn")
    qkv = _dense(attn, IOKey("input"), 3 * config.dims, config, "c_attn")
    split = Primitive("split", sections=3, axis=-1)
    attn |= split(input=qkv)
    q, k, v = (_heads(attn, getattr(split, f"output_{i}"), config, step) for i in range(3))  # [B, H, T, D] each
    if step is None:
        out = op(attn, "scaled_dot_product_attention", q, k, v, None, causal=True)  # no mask
    else:
        mask = None if step.prompt else "mask"
        out = cached_attention(attn, q, k, v, step, heads=config.num_heads, head_dim=config.head_dim, mask=mask)
    merged = op(attn, "transpose", out, axes=(0, 2, 1, 3))  # [B, T, H, D]
    merged = op(attn, "reshape", merged, shape=(None, None, config.dims) if step is None else (-1, config.dims))
    attn.expose(_dense(attn, merged, config.dims, config, "c_proj"), "output")
    return attn


def _block(config: GPTConfig, index: int, step: StepShape | None) -> Model:
    """Pre-norm block ``h.<index>``: ``x + attn(ln_1(x))``, then ``+ mlp(ln_2(.))``."""
    block = Model(name=f"h.{index}")
    ln_1 = _layer_norm(config, "ln_1")
    block |= ln_1(input=IOKey("input"))
    attn = _attention(config, step)
    block |= attn(input=ln_1.output, **{key: key for key in step_keys(step, mask=False)})
    residual = block.input + attn.output
    ln_2 = _layer_norm(config, "ln_2")
    block |= ln_2(input=residual)
    mlp = _mlp(config)
    block |= mlp(input=ln_2.output)
    block.expose(residual + mlp.output, "output")
    return block


def _transformer(config: GPTConfig, step: StepShape | None) -> Model:
    """``transformer``: embeddings, blocks, ``ln_f``; with tied embeddings also the logits (key ``logits``),
    computed here so that the head's weight keeps the path ``transformer.wte.weight``."""
    model = Model(name="transformer")
    wte = Embedding(config.vocab_size, config.dims, init=initializers.normal(config.initializer_range), name="wte")
    model |= wte(input=IOKey("input", shape=[None, None], type="int"))
    wpe = Embedding(config.block_size, config.dims, init=initializers.normal(config.initializer_range), name="wpe")
    positions: Connection | IOKey
    if step is None:
        positions = op(model, "positions", model.input, axis=-1)  # [T]: 0 .. T-1, T known at run time
    else:  # the positions of the step's tokens: [T], [1] or [B, T]
        positions = step_positions(model, model.input, step)
    model |= wpe(input=positions)
    masks = {} if step is None else slot_tensors(model, model.input, step)  # shared by every block
    x = wte.output + wpe.output  # [B, T, dims]
    if step is not None:
        x = op(model, "reshape", x, shape=(-1, config.dims))  # rows [B * T, dims]
    for i in range(config.num_layers):
        block = _block(config, i, step)
        model |= block(input=x, **masks, **layer_cache_keys(step, i, mask=False))
        x = block.output
    if step is not None:  # only the last position's logits are needed
        x = op(model, "index", op(model, "reshape", x, shape=(step.batch, -1, config.dims)), key=(slice(None), -1))
    ln_f = _layer_norm(config, "ln_f")
    model |= ln_f(input=x)
    model.expose(ln_f.output, "output")
    if config.tie_word_embeddings and (step is None or step.head):
        logits = op(model, "linear", ln_f.output, wte.weight, None)  # the tied head: x @ wte^T, no bias
        model.expose(logits, "logits", canonical=False)
    return model


def build_gpt(root: Model, config: GPTConfig, step: StepShape | None = None) -> None:
    """Add GPT-2 to ``root`` (an empty model): ``transformer`` and, unless tied, ``lm_head``.

    Without ``step``: ``input [B, T]`` -> ``output [B, T, vocab]``. With ``step`` see the module docstring;
    the keys are ``input``, ``positions`` (one-token step), ``past_*_<i>`` (one-token step), ``output``
    (``[batch, vocab]``) and ``present_*_<i>``.
    """
    transformer = _transformer(config, step)
    root |= transformer(**root_cache_keys(step, config.num_layers))
    expose_output(root, transformer, step, config.vocab_size, config.tie_word_embeddings, config.initializer_range)


def build_gpt_head(config: GPTConfig) -> Model:
    """GPT-2's LM head alone (:func:`~mithril_models.kv_cache.lm_head`) for the hidden states of steps built
    with ``head=False``: tied to ``transformer.wte`` (the names :func:`build_gpt` gives), or ``lm_head``."""
    return lm_head(config.vocab_size, config.dims, ("transformer", "wte") if config.tie_word_embeddings else None)
