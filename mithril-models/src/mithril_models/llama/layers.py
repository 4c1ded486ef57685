"""The graph of a Llama-style decoder (:class:`~mithril_models.llama.Llama`) and its KV-cache decode steps.

:func:`build_llama` adds ``model`` (``embed_tokens``, ``layers.<i>`` with ``input_layernorm``,
``self_attn.{q,k,v,o}_proj``, ``post_attention_layernorm``, ``mlp.{gate,up,down}_proj``; ``norm``) and,
unless the embeddings are tied, ``lm_head``: the module names of ``transformers.LlamaForCausalLM``, so
parameter paths are those of a Hugging Face checkpoint.

- RMSNorm before attention and before the MLP, residual connections around both.
- SwiGLU MLP: ``down_proj(silu(gate_proj(x)) * up_proj(x))``.
- Rotary embeddings: ``cos``/``sin`` of ``position * inv_freq`` are computed once in ``model`` from the
  positions and shared by every layer; a head ``x`` becomes ``x * cos + rotate_half(x) * sin`` with
  ``rotate_half([x1, x2]) = [-x2, x1]`` (the halves of the head, as ``transformers``).
- Grouped-query attention: keys and values have ``num_key_value_heads`` heads, each repeated for its
  ``num_key_value_groups`` query heads (concatenated copies; one head is multi-query attention).
- Causal attention, restricted to the last ``sliding_window`` positions when it is set (Mistral).

With a :class:`~mithril_models.gpt.layers.StepShape` it builds a decode step, as GPT-2's (see
:mod:`mithril_models.gpt.layers`): the caches ``present_key_<i>``/``present_value_<i>`` ``[batch,
num_key_value_heads, cache_len, head_dim]`` hold rotated keys and values (not repeated), and the output is
the logits of the last position ``[batch, vocab]``.

Example:
    >>> from mithril.models import Model
    >>> from mithril_models.llama.config import LlamaConfig
    >>> root = Model()
    >>> build_llama(root, LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                               num_attention_heads=2))
    >>> root.input_keys, root.output_keys
    (['input'], ['output'])
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mithril.extend import initializers, op
from mithril.models import Connection, Embedding, IOKey, Linear, Model, Primitive, RMSNorm

from ..kv_cache import (
    StepShape,
    cached_attention,
    expose_output,
    layer_cache_keys,
    lm_head,
    root_cache_keys,
    slot_tensors,
    step_positions,
    window_mask,
)
from ..kv_cache import step_keys as cache_step_keys
from .config import LlamaConfig

__all__ = ["build_llama", "build_llama_head", "step_keys"]


def _dense(model: Model, x: Any, dims: int, bias: bool, config: LlamaConfig, name: str) -> Connection:
    """A linear layer ``name`` of ``dims`` outputs on ``x`` (normal(initializer_range) weights, zero bias)."""
    layer = Linear(
        dims, use_bias=bias, weight_init=initializers.normal(config.initializer_range), bias_init="zeros", name=name
    )
    model |= layer(input=x)
    return layer.output


def _mlp(config: LlamaConfig) -> Model:
    """``down_proj(silu(gate_proj(x)) * up_proj(x))``."""
    mlp = Model(name="mlp")
    x = IOKey("input")
    gate = _dense(mlp, x, config.intermediate_size, config.mlp_bias, config, "gate_proj")
    up = _dense(mlp, mlp.input, config.intermediate_size, config.mlp_bias, config, "up_proj")
    hidden = gate * op(mlp, "sigmoid", gate) * up
    mlp.expose(_dense(mlp, hidden, config.hidden_size, config.mlp_bias, config, "down_proj"), "output")
    return mlp


def _heads(model: Model, x: Connection, heads: int, head_dim: int) -> Connection:
    """``[B, T, heads * head_dim]`` -> ``[B, heads, T, head_dim]``."""
    split = op(model, "reshape", x, shape=(None, None, heads, head_dim))
    return op(model, "transpose", split, axes=(0, 2, 1, 3))


def _rotate(model: Model, x: Connection, cos: Any, sin: Any) -> Connection:
    """``x * cos + rotate_half(x) * sin`` for heads ``x`` ``[B, H, T, D]`` and ``cos``/``sin`` ``[T, D]``."""
    halves = Primitive("split", sections=2, axis=-1)
    model |= halves(input=x)
    rotated = op(model, "concat", op(model, "neg", halves.output_1), halves.output_0, axis=-1, n=2)
    result: Connection = x * cos + rotated * sin
    return result


def _repeat(model: Model, x: Connection, config: LlamaConfig) -> Connection:
    """Key-value heads ``[B, Hkv, T, D]`` -> ``[B, H, T, D]``, each repeated for its query heads (as
    ``transformers``' ``repeat_kv``: query head ``h`` uses key-value head ``h // groups``)."""
    groups = config.num_key_value_groups
    if groups == 1:
        return x
    column = op(model, "unsqueeze", x, axis=2)  # [B, Hkv, 1, T, D]
    copies = op(model, "concat", *([column] * groups), axis=2, n=groups)  # [B, Hkv, groups, T, D]
    return op(model, "reshape", copies, shape=(None, config.num_attention_heads, -1, config.head_dim))


def _attention(config: LlamaConfig, step: StepShape | None) -> Model:
    """``self_attn``: projections, rotary embeddings, (grouped-query) causal attention and ``o_proj``."""
    attn = Model(name="self_attn")
    x = IOKey("input")
    bias = config.attention_bias
    head_dim, heads, kv_heads = config.head_width, config.num_attention_heads, config.kv_heads
    q = _heads(attn, _dense(attn, x, heads * head_dim, bias, config, "q_proj"), heads, head_dim)
    k = _heads(attn, _dense(attn, attn.input, kv_heads * head_dim, bias, config, "k_proj"), kv_heads, head_dim)
    v = _heads(attn, _dense(attn, attn.input, kv_heads * head_dim, bias, config, "v_proj"), kv_heads, head_dim)
    cos, sin = IOKey("cos"), IOKey("sin")
    q, k = _rotate(attn, q, cos, sin), _rotate(attn, k, cos, sin)
    window = config.sliding_window is not None
    if step is None:
        mask = IOKey("mask") if window else None
        out = op(attn, "scaled_dot_product_attention", q, _repeat(attn, k, config), _repeat(attn, v, config), mask,
                 causal=True)  # fmt: skip
    else:  # the caches hold the rotated keys of the key-value heads (not repeated)
        out = cached_attention(
            attn, q, k, v, step, heads=kv_heads, head_dim=head_dim, repeat=lambda x: _repeat(attn, x, config),
            mask="mask" if window or not step.prompt else None,
        )  # fmt: skip
    merged = op(attn, "transpose", out, axes=(0, 2, 1, 3))  # [B, T, H, D]
    merged = op(attn, "reshape", merged, shape=(None, None, heads * head_dim))
    attn.expose(_dense(attn, merged, config.hidden_size, bias, config, "o_proj"), "output")
    return attn


def step_keys(config: LlamaConfig, step: StepShape | None) -> tuple[str, ...]:
    """Keys a layer shares with its parents besides ``input``/``output``: ``cos``, ``sin``, the mask and
    the step's cache keys.

    >>> from mithril_models.llama.config import LlamaConfig
    >>> step_keys(LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
    ...                       num_attention_heads=2), None)
    ('cos', 'sin')
    """
    return ("cos", "sin", *cache_step_keys(step, mask=config.sliding_window is not None))


def _layer(config: LlamaConfig, index: int, step: StepShape | None) -> Model:
    """``layers.<index>``: ``x + self_attn(input_layernorm(x))``, then ``+ mlp(post_attention_layernorm(.))``."""
    layer = Model(name=f"layers.{index}")
    norm_1 = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, name="input_layernorm")
    layer |= norm_1(input=IOKey("input"))
    attn = _attention(config, step)
    layer |= attn(input=norm_1.output, **{key: key for key in step_keys(config, step)})
    residual = layer.input + attn.output
    norm_2 = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, name="post_attention_layernorm")
    layer |= norm_2(input=residual)
    mlp = _mlp(config)
    layer |= mlp(input=norm_2.output)
    layer.expose(residual + mlp.output, "output")
    return layer


def _rotary_tables(
    model: Model, positions: Connection | IOKey, config: LlamaConfig, batched: bool
) -> tuple[Connection, Connection]:
    """``cos``, ``sin`` ``[T, head_dim]`` of ``positions`` ``[T]`` (float32 frequencies, as ``transformers``);
    ``[B, 1, T, head_dim]`` of ``positions`` ``[B, T]`` when ``batched`` (left-padded rows)."""
    inv_freq, scaling = config.rope()
    column = op(model, "unsqueeze", op(model, "cast", positions, dtype="float"), axis=-1)  # [..., T, 1]
    freqs = op(model, "multiply", column, IOKey(value=np.asarray(inv_freq, dtype=np.float64)[None, :]))  # [..., T, D/2]
    angles = op(model, "concat", freqs, freqs, axis=-1, n=2)  # [..., T, D]
    if batched:
        angles = op(model, "unsqueeze", angles, axis=1)  # [B, 1, T, D]: one table per row, shared by the heads
    cos, sin = op(model, "cos", angles), op(model, "sin", angles)
    if scaling != 1.0:
        cos, sin = cos * scaling, sin * scaling
    return cos, sin


def _decoder(config: LlamaConfig, step: StepShape | None) -> Model:
    """``model``: embeddings, layers, ``norm``; with tied embeddings also the logits (key ``logits``),
    computed here so that the head's weight keeps the path ``model.embed_tokens.weight``."""
    model = Model(name="model")
    embed = Embedding(
        config.vocab_size, config.hidden_size, init=initializers.normal(config.initializer_range), name="embed_tokens"
    )
    model |= embed(input=IOKey("input", shape=[None, None], type="int"))
    positions: Connection | IOKey
    if step is None:
        positions = op(model, "positions", model.input, axis=-1)  # [T]: 0 .. T-1
    else:  # the positions of the step's tokens: [T], [1] or [B, T]
        positions = step_positions(model, model.input, step)
    cos, sin = _rotary_tables(model, positions, config, step is not None and step.padded)
    shared: dict[str, Any] = {"cos": cos, "sin": sin}
    if step is not None:  # the slot tensors every layer shares
        shared.update(slot_tensors(model, model.input, step, window=config.sliding_window))
    elif config.sliding_window is not None:
        shared["mask"] = window_mask(model, positions, config.sliding_window)
    x = embed.output  # [B, T, hidden]
    for i in range(config.num_hidden_layers):
        layer = _layer(config, i, step)
        model |= layer(input=x, **shared, **layer_cache_keys(step, i))
        x = layer.output
    if step is not None:  # only the last position's logits are needed
        x = op(model, "index", x, key=(slice(None), -1))  # [B, hidden]
    norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, name="norm")
    model |= norm(input=x)
    model.expose(norm.output, "output")
    if config.tie_word_embeddings and (step is None or step.head):
        model.expose(op(model, "linear", norm.output, embed.weight, None), "logits", canonical=False)
    return model


def build_llama(root: Model, config: LlamaConfig, step: StepShape | None = None) -> None:
    """Add a Llama-style decoder to ``root`` (an empty model): ``model`` and, unless tied, ``lm_head``.

    Without ``step``: ``input [B, T]`` -> ``output [B, T, vocab]``. With ``step``: the keys ``input``,
    ``positions`` (one-token step), ``past_*_<i>`` (one-token step), ``output`` (``[batch, vocab]``) and
    ``present_*_<i>`` (see :mod:`mithril_models.gpt.layers`).
    """
    decoder = _decoder(config, step)
    root |= decoder(**root_cache_keys(step, config.num_hidden_layers))
    expose_output(root, decoder, step, config.vocab_size, config.tie_word_embeddings, config.initializer_range)


def build_llama_head(config: LlamaConfig) -> Model:
    """The LM head alone (:func:`~mithril_models.kv_cache.lm_head`) for the hidden states of steps built with
    ``head=False``: tied to ``model.embed_tokens`` (the names :func:`build_llama` gives), or ``lm_head``."""
    tied = ("model", "embed_tokens") if config.tie_word_embeddings else None
    return lm_head(config.vocab_size, config.hidden_size, tied)
