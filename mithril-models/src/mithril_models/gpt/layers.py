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
from dataclasses import dataclass
from typing import Any

from mithril.extend import initializers, op
from mithril.models import Connection, Embedding, IOKey, LayerNorm, Linear, Model, Primitive

from .config import GPTConfig

__all__ = ["MASKED", "StepShape", "build_gpt", "cache_names"]

MASKED = -65504.0
"""Added to the attention scores of cache slots a query must not see: softmax gives them weight 0 (the
exponential underflows), and it is finite in every float dtype (the largest float16 magnitude)."""


@dataclass(frozen=True)
class StepShape:
    """A decode step: ``batch`` sequences, caches of ``cache_len`` slots, the prompt step or a one-token step.

    Activations are rows ``[batch * T, dims]``."""

    batch: int
    cache_len: int
    prompt: bool


def cache_names(num_layers: int) -> list[tuple[str, str]]:
    """``(input, output)`` names of the caches, layer by layer: ``("past_key_0", "present_key_0")``, ...

    >>> cache_names(1)
    [('past_key_0', 'present_key_0'), ('past_value_0', 'present_value_0')]
    """
    return [(f"past_{kind}_{i}", f"present_{kind}_{i}") for i in range(num_layers) for kind in ("key", "value")]


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


def _cache(model: Model, kind: str, new: Connection, config: GPTConfig, step: StepShape) -> Connection:
    """The cache ``present_<kind>`` ``[B, H, L, D]`` after this step's keys or values ``new`` ``[B, H, T, D]``."""
    if step.prompt:  # slots 0 .. T-1 hold the prompt, the rest zeros
        present = op(model, "matmul", IOKey("write"), new)  # [L, T] @ [B, H, T, D]
    else:  # one token: its slot is replaced
        past = IOKey(
            f"past_{kind}", shape=[step.batch, config.num_heads, step.cache_len, config.head_dim], type="float"
        )
        present = op(model, "where", IOKey("hit"), new, past)  # [L, 1] picks [B, H, 1, D] over [B, H, L, D]
    model.expose(present, f"present_{kind}", canonical=False)
    return present


def _attention(config: GPTConfig, step: StepShape | None) -> Model:
    """Causal self-attention with a fused ``c_attn`` (q, k, v) projection and ``c_proj``; in a step it
    also writes the KV cache and, for one token, attends the cache (see the module docstring)."""
    attn = Model(name="attn")
    qkv = _dense(attn, IOKey("input"), 3 * config.dims, config, "c_attn")
    split = Primitive("split", sections=3, axis=-1)
    attn |= split(input=qkv)
    q, k, v = (_heads(attn, getattr(split, f"output_{i}"), config, step) for i in range(3))  # [B, H, T, D] each
    if step is not None:
        keys, values = _cache(attn, "key", k, config, step), _cache(attn, "value", v, config, step)
        if not step.prompt:
            k, v = keys, values  # [B, H, L, D]
    if step is None or step.prompt:
        out = op(attn, "scaled_dot_product_attention", q, k, v, None, causal=True)  # no mask
    else:
        out = op(attn, "scaled_dot_product_attention", q, k, v, IOKey("mask"), causal=False)
    merged = op(attn, "transpose", out, axes=(0, 2, 1, 3))  # [B, T, H, D]
    merged = op(attn, "reshape", merged, shape=(None, None, config.dims) if step is None else (-1, config.dims))
    attn.expose(_dense(attn, merged, config.dims, config, "c_proj"), "output")
    return attn


def _step_keys(step: StepShape | None) -> tuple[str, ...]:
    """Keys an attention block of this step shares with its parents (besides ``input``/``output``)."""
    if step is None:
        return ()
    if step.prompt:
        return ("write", "present_key", "present_value")
    return ("hit", "mask", "past_key", "past_value", "present_key", "present_value")


def _block(config: GPTConfig, index: int, step: StepShape | None) -> Model:
    """Pre-norm block ``h.<index>``: ``x + attn(ln_1(x))``, then ``+ mlp(ln_2(.))``."""
    block = Model(name=f"h.{index}")
    ln_1 = _layer_norm(config, "ln_1")
    block |= ln_1(input=IOKey("input"))
    attn = _attention(config, step)
    block |= attn(input=ln_1.output, **{key: key for key in _step_keys(step)})
    residual = block.input + attn.output
    ln_2 = _layer_norm(config, "ln_2")
    block |= ln_2(input=residual)
    mlp = _mlp(config)
    block |= mlp(input=ln_2.output)
    block.expose(residual + mlp.output, "output")
    return block


def _slot_masks(model: Model, positions: Connection, step: StepShape) -> dict[str, Connection]:
    """Built once per step from the positions being processed and ``arange(cache_len)``: for the prompt
    ``write`` (one-hot ``[L, T]``); for one token ``hit`` (``[L, 1]`` bool, its slot) and the additive
    attention ``mask`` (``[1, L]``: 0 for slots ``<= position``, :data:`MASKED` for the rest)."""
    slots = op(model, "arange", stop=step.cache_len)  # [L]
    if step.prompt:
        column = op(model, "reshape", slots, shape=(-1, 1))  # [L, 1]
        return {"write": op(model, "cast", op(model, "equal", column, positions), dtype="float")}  # [L, T]
    hit = op(model, "reshape", op(model, "equal", slots, positions), shape=(-1, 1))  # [L, 1]
    visible = op(model, "cast", op(model, "less_equal", slots, positions), dtype="float")  # [L]
    mask = op(model, "reshape", (1.0 - visible) * MASKED, shape=(1, -1))  # [1, L]: one query
    return {"hit": hit, "mask": mask}


def _transformer(config: GPTConfig, step: StepShape | None) -> Model:
    """``transformer``: embeddings, blocks, ``ln_f``; with tied embeddings also the logits (key ``logits``),
    computed here so that the head's weight keeps the path ``transformer.wte.weight``."""
    model = Model(name="transformer")
    wte = Embedding(config.vocab_size, config.dims, init=initializers.normal(config.initializer_range), name="wte")
    model |= wte(input=IOKey("input", shape=[None, None], type="int"))
    wpe = Embedding(config.block_size, config.dims, init=initializers.normal(config.initializer_range), name="wpe")
    if step is None or step.prompt:
        positions = op(model, "positions", model.input, axis=-1)  # [T]: 0 .. T-1, T known at run time
        model |= wpe(input=positions)
    else:
        model |= wpe(input=IOKey("positions", shape=[1], type="int"))  # where the token goes
        positions = model.positions
    masks = _slot_masks(model, positions, step) if step is not None else {}
    x = wte.output + wpe.output  # [B, T, dims]
    if step is not None:
        x = op(model, "reshape", x, shape=(-1, config.dims))  # rows [B * T, dims]
    for i in range(config.num_layers):
        block = _block(config, i, step)
        layer_keys = {key: f"{key}_{i}" for key in _step_keys(step) if key.startswith(("past", "present"))}
        model |= block(input=x, **masks, **layer_keys)
        x = block.output
    if step is not None:  # only the last position's logits are needed
        x = op(model, "index", op(model, "reshape", x, shape=(step.batch, -1, config.dims)), key=(slice(None), -1))
    ln_f = _layer_norm(config, "ln_f")
    model |= ln_f(input=x)
    model.expose(ln_f.output, "output")
    if config.tie_word_embeddings:
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
    keys: dict[str, Any] = {"input": IOKey("input")}
    if step is not None:
        names = [name for pair in cache_names(config.num_layers) for name in pair]
        keys.update({name: IOKey(name) for name in names if not step.prompt or name.startswith("present")})
        if not step.prompt:
            keys["positions"] = IOKey("positions")
    root |= transformer(**keys)
    if config.tie_word_embeddings:
        root.expose(transformer.logits, "output")
    else:
        root |= Linear(
            config.vocab_size, use_bias=False, weight_init=initializers.normal(config.initializer_range), name="lm_head"
        )(input=transformer.output, output=IOKey("output"))
