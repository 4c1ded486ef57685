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

from ..gpt.layers import MASKED, StepShape, cache_names
from .config import LlamaConfig

__all__ = ["build_llama", "step_keys"]


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


def _cache(model: Model, kind: str, new: Connection, config: LlamaConfig, step: StepShape) -> Connection:
    """The cache ``present_<kind>`` ``[B, Hkv, L, D]`` after this step's keys or values ``new`` ``[B, Hkv, T, D]``."""
    if step.prompt:  # slots 0 .. T-1 hold the prompt, the rest zeros
        present = op(model, "matmul", IOKey("write"), new)  # [L, T] @ [B, Hkv, T, D]
    else:  # one token: its slot is replaced
        shape = [step.batch, config.num_key_value_heads, step.cache_len, config.head_dim]
        present = op(model, "where", IOKey("hit"), new, IOKey(f"past_{kind}", shape=shape, type="float"))
    model.expose(present, f"present_{kind}", canonical=False)
    return present


def _attention(config: LlamaConfig, step: StepShape | None) -> Model:
    """``self_attn``: projections, rotary embeddings, (grouped-query) causal attention and ``o_proj``."""
    attn = Model(name="self_attn")
    x = IOKey("input")
    bias = config.attention_bias
    head_dim, heads, kv_heads = int(config.head_dim), config.num_attention_heads, int(config.num_key_value_heads)  # type: ignore[arg-type]
    q = _heads(attn, _dense(attn, x, heads * head_dim, bias, config, "q_proj"), heads, head_dim)
    k = _heads(attn, _dense(attn, attn.input, kv_heads * head_dim, bias, config, "k_proj"), kv_heads, head_dim)
    v = _heads(attn, _dense(attn, attn.input, kv_heads * head_dim, bias, config, "v_proj"), kv_heads, head_dim)
    cos, sin = IOKey("cos"), IOKey("sin")
    q, k = _rotate(attn, q, cos, sin), _rotate(attn, k, cos, sin)
    if step is not None:
        keys, values = _cache(attn, "key", k, config, step), _cache(attn, "value", v, config, step)
        if not step.prompt:
            k, v = keys, values  # [B, Hkv, L, D]
    k, v = _repeat(attn, k, config), _repeat(attn, v, config)
    if step is None or step.prompt:
        mask = IOKey("mask") if config.sliding_window is not None else None
        out = op(attn, "scaled_dot_product_attention", q, k, v, mask, causal=True)
    else:
        out = op(attn, "scaled_dot_product_attention", q, k, v, IOKey("mask"), causal=False)
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
    keys: tuple[str, ...] = ("cos", "sin")
    if step is None:
        return keys + (("mask",) if config.sliding_window is not None else ())
    if step.prompt:
        return (
            *keys,
            "write",
            "present_key",
            "present_value",
            *(("mask",) if config.sliding_window is not None else ()),
        )
    return (*keys, "hit", "mask", "past_key", "past_value", "present_key", "present_value")


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


def _rotary_tables(model: Model, positions: Connection, config: LlamaConfig) -> tuple[Connection, Connection]:
    """``cos``, ``sin`` ``[T, head_dim]`` of ``positions`` ``[T]`` (float32 frequencies, as ``transformers``)."""
    inv_freq, scaling = config.rope()
    column = op(model, "reshape", op(model, "cast", positions, dtype="float"), shape=(-1, 1))  # [T, 1]
    freqs = op(model, "multiply", column, IOKey(value=np.asarray(inv_freq, dtype=np.float64)[None, :]))  # [T, D/2]
    angles = op(model, "concat", freqs, freqs, axis=-1, n=2)  # [T, D]
    cos, sin = op(model, "cos", angles), op(model, "sin", angles)
    if scaling != 1.0:
        cos, sin = cos * scaling, sin * scaling
    return cos, sin


def _window_mask(model: Model, queries: Connection, keys: Connection, window: int) -> Connection:
    """Additive ``[Tq, Tk]``: :data:`MASKED` where key position ``<= query position - window``, else 0."""
    q = op(model, "reshape", queries, shape=(-1, 1))
    k = op(model, "reshape", keys, shape=(1, -1))
    far = op(model, "cast", op(model, "less_equal", k, q - window), dtype="float")
    mask: Connection = far * MASKED
    return mask


def _step_masks(model: Model, positions: Connection, config: LlamaConfig, step: StepShape) -> dict[str, Connection]:
    """As GPT-2's slot masks (``write`` for the prompt, ``hit`` and ``mask`` for one token), the one-token
    mask also hiding slots that fell out of the sliding window."""
    slots = op(model, "arange", stop=step.cache_len)  # [L]
    if step.prompt:
        column = op(model, "reshape", slots, shape=(-1, 1))  # [L, 1]
        masks = {"write": op(model, "cast", op(model, "equal", column, positions), dtype="float")}  # [L, T]
        if config.sliding_window is not None:
            masks["mask"] = _window_mask(model, positions, positions, config.sliding_window)
        return masks
    hit = op(model, "reshape", op(model, "equal", slots, positions), shape=(-1, 1))  # [L, 1]
    visible = op(model, "less_equal", slots, positions)  # [L]
    if config.sliding_window is not None:
        visible = op(model, "logical_and", visible, op(model, "greater", slots, positions - config.sliding_window))
    mask = op(model, "reshape", (1.0 - op(model, "cast", visible, dtype="float")) * MASKED, shape=(1, -1))  # [1, L]
    return {"hit": hit, "mask": mask}


def _decoder(config: LlamaConfig, step: StepShape | None) -> Model:
    """``model``: embeddings, layers, ``norm``; with tied embeddings also the logits (key ``logits``),
    computed here so that the head's weight keeps the path ``model.embed_tokens.weight``."""
    model = Model(name="model")
    embed = Embedding(
        config.vocab_size, config.hidden_size, init=initializers.normal(config.initializer_range), name="embed_tokens"
    )
    model |= embed(input=IOKey("input", shape=[None, None], type="int"))
    positions: Any
    if step is None or step.prompt:
        positions = op(model, "positions", model.input, axis=-1)  # [T]: 0 .. T-1
    else:
        positions = IOKey("positions", shape=[1], type="int")  # where the token goes
    cos, sin = _rotary_tables(model, positions, config)
    shared: dict[str, Any] = {"cos": cos, "sin": sin}
    if step is not None:
        shared.update(_step_masks(model, positions if step.prompt else model.positions, config, step))
    elif config.sliding_window is not None:
        shared["mask"] = _window_mask(model, positions, positions, config.sliding_window)
    x = embed.output  # [B, T, hidden]
    for i in range(config.num_hidden_layers):
        layer = _layer(config, i, step)
        cache_keys = {key: f"{key}_{i}" for key in step_keys(config, step) if key.startswith(("past", "present"))}
        model |= layer(input=x, **shared, **cache_keys)
        x = layer.output
    if step is not None:  # only the last position's logits are needed
        x = op(model, "index", x, key=(slice(None), -1))  # [B, hidden]
    norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps, name="norm")
    model |= norm(input=x)
    model.expose(norm.output, "output")
    if config.tie_word_embeddings:
        model.expose(op(model, "linear", norm.output, embed.weight, None), "logits", canonical=False)
    return model


def build_llama(root: Model, config: LlamaConfig, step: StepShape | None = None) -> None:
    """Add a Llama-style decoder to ``root`` (an empty model): ``model`` and, unless tied, ``lm_head``.

    Without ``step``: ``input [B, T]`` -> ``output [B, T, vocab]``. With ``step``: the keys ``input``,
    ``positions`` (one-token step), ``past_*_<i>`` (one-token step), ``output`` (``[batch, vocab]``) and
    ``present_*_<i>`` (see :mod:`mithril_models.gpt.layers`).
    """
    decoder = _decoder(config, step)
    keys: dict[str, Any] = {"input": IOKey("input")}
    if step is not None:
        names = [name for pair in cache_names(config.num_hidden_layers) for name in pair]
        keys.update({name: IOKey(name) for name in names if not step.prompt or name.startswith("present")})
        if not step.prompt:
            keys["positions"] = IOKey("positions")
    root |= decoder(**keys)
    if config.tie_word_embeddings:
        root.expose(decoder.logits, "output")
    else:
        head = Linear(
            config.vocab_size, use_bias=False, weight_init=initializers.normal(config.initializer_range), name="lm_head"
        )
        root |= head(input=decoder.output, output=IOKey("output"))
