"""T5 (encoder, and decoder with cross-attention and LM head) written the way Mithril's published examples
write models (issue 12): ``|=``/``+=`` composition, ``IOKey``s, positional ``.connect``, ``IOKey.shape`` for
the head reshapes, RMSNorm written out from connection expressions, the relative position buckets computed
in the graph (``Size``/``Arange``, connection arithmetic, ``Log(robust=True)``, ``Cast``, ``Minimum``,
``Where``) and added as ``ScaledDotProduct``'s ``attn_mask`` (``scale=1.0``; causal in the decoder).

Compiled once without shapes, encoder and decoder run at several batch sizes and source/target lengths
on NumPy, JAX and PyTorch and equal ``mithril_models.t5_encode``/``t5_decode`` given the same weights,
for a T5 v1.1 configuration (gated-GELU, own ``lm_head``) and an original one (ReLU, tied embeddings)."""

from __future__ import annotations

import math

import mithril as ml
import numpy as np
import pytest
from mithril.models import (
    Arange,
    Buffer,
    Cast,
    Embedding,
    Gelu,
    IOKey,
    Linear,
    Log,
    Minimum,
    Model,
    Relu,
    ScaledDotProduct,
    Size,
    Where,
)

mithril_models = pytest.importorskip("mithril_models")

CONFIGS = {
    "v1_1": {"vocab_size": 40, "d_model": 16, "d_kv": 4, "d_ff": 24, "num_layers": 2, "num_heads": 3,
             "relative_attention_num_buckets": 8, "relative_attention_max_distance": 20,
             "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
    "original": {"vocab_size": 40, "d_model": 16, "d_kv": 4, "d_ff": 24, "num_layers": 2, "num_heads": 3,
                 "num_decoder_layers": 1, "relative_attention_num_buckets": 8,
                 "relative_attention_max_distance": 20, "feed_forward_proj": "relu"},
}


def rms_norm(dim, eps=1e-6, name=None):
    block = Model(name=name)
    input = IOKey("input")
    weight = IOKey("weight", shape=[dim], differentiable=True)
    variance = (input**2).mean(axis=-1, keepdim=True)
    block |= Buffer().connect(input / (variance + eps).sqrt() * weight, output=IOKey("output"))
    block.set_cin("input")
    return block


def relative_position_bias(num_buckets, max_distance, n_heads, bidirectional, name="relative_attention_bias"):
    """``[1, heads, Lq, Lk]`` learned scores for the bucket of each offset ``key_pos - query_pos``."""
    block = Model(name=name)
    block |= Size(dim=1).connect("query", output="query_length")
    block |= Size(dim=1).connect("key", output="key_length")
    block |= Arange().connect(stop=block.query_length, output="context_position")
    block |= Arange().connect(stop=block.key_length, output="memory_position")
    relative = block.memory_position[None, :] - block.context_position[:, None]  # [Lq, Lk]
    if bidirectional:
        num_buckets //= 2
        buckets = (relative > 0).cast("int") * num_buckets
        distance = relative.abs()
    else:
        block |= Minimum().connect(relative, 0, output="non_positive")
        buckets, distance = 0, -block.non_positive
    max_exact = num_buckets // 2
    block |= Log(robust=True).connect(distance.cast("float") / max_exact, output="log_ratio")
    scaled = block.log_ratio / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    block |= Cast(dtype="int").connect(scaled, output="log_bucket")
    block |= Minimum().connect(max_exact + block.log_bucket, num_buckets - 1, output="large_bucket")
    block |= Where().connect(distance < max_exact, distance, block.large_bucket, output="bucket")
    block |= Embedding(2 * num_buckets if bidirectional else num_buckets, n_heads).connect(
        buckets + block.bucket, weight="weight", output="values"
    )
    block |= Buffer().connect(block.values.transpose((2, 0, 1))[None], output=IOKey("output"))
    return block


def attention(d_model, n_heads, d_kv, *, is_causal, cross, name):
    """T5 attention: no bias, no ``1/sqrt(d)``; self-attention adds ``position_bias`` as the mask."""
    block = Model(name=name)
    queries = IOKey("input")
    memory = IOKey("memory") if cross else queries
    q_shp, kv_shp = queries.shape, memory.shape
    block |= Linear(n_heads * d_kv, use_bias=False, name="q").connect(queries, output="q_out")
    block |= Linear(n_heads * d_kv, use_bias=False, name="k").connect(memory, output="k_out")
    block |= Linear(n_heads * d_kv, use_bias=False, name="v").connect(memory, output="v_out")
    q = block.q_out.reshape((q_shp[0], q_shp[1], n_heads, d_kv)).transpose((0, 2, 1, 3))
    k = block.k_out.reshape((kv_shp[0], kv_shp[1], n_heads, d_kv)).transpose((0, 2, 1, 3))
    v = block.v_out.reshape((kv_shp[0], kv_shp[1], n_heads, d_kv)).transpose((0, 2, 1, 3))
    if cross:
        block |= ScaledDotProduct(is_causal=False, scale=1.0).connect(q, k, v, output="attention")
    else:
        sdp = ScaledDotProduct(is_causal=is_causal, scale=1.0, use_attn_mask=True)
        block |= sdp.connect(q, k, v, attn_mask="position_bias", output="attention")
    merged = block.attention.transpose((0, 2, 1, 3)).reshape((q_shp[0], q_shp[1], n_heads * d_kv))
    block |= Linear(d_model, use_bias=False, name="o").connect(merged, output=IOKey("output"))
    return block


def dense_act_dense(d_model, d_ff, activation, gated):
    block = Model(name="DenseReluDense")
    act = Gelu(approximate=True) if activation == "gelu_new" else Relu()
    if gated:
        block |= Linear(d_ff, use_bias=False, name="wi_0").connect("input", output="gate")
        block |= act.connect("gate", output="gate_act")
        block |= Linear(d_ff, use_bias=False, name="wi_1").connect("input", output="linear")
        hidden = block.gate_act * block.linear
    else:
        block |= Linear(d_ff, use_bias=False, name="wi").connect("input", output="wi_out")
        block |= act.connect("wi_out", output="gate_act")
        hidden = block.gate_act
    block |= Linear(d_model, use_bias=False, name="wo").connect(hidden, output=IOKey("output"))
    return block


def t5_block(cfg, *, decoder, name):
    """Pre-norm residual sub-layers: self-attention, (cross-attention), feed-forward."""
    d_model, eps = cfg["d_model"], 1e-6
    block = Model(name=name)
    sublayers = [("SelfAttention", False)] + ([("EncDecAttention", True)] if decoder else [])
    hidden = "input"
    for index, (kind, cross) in enumerate(sublayers):
        layer = Model(name=f"layer.{index}")
        layer |= rms_norm(d_model, eps, name="layer_norm").connect("input", output="normed")
        extra = {"memory": "memory"} if cross else {"position_bias": "position_bias"}
        attn = attention(d_model, cfg["num_heads"], cfg["d_kv"], is_causal=decoder, cross=cross, name=kind)
        layer |= attn.connect("normed", output="attn_out", **extra)
        layer |= Buffer().connect(layer.input + layer.attn_out, output=IOKey("output"))
        block |= layer.connect(hidden, output=f"hidden_{index}", **extra)
        hidden = f"hidden_{index}"
    proj = cfg.get("feed_forward_proj", "relu")  # "gated-gelu" is the tanh GELU, as in transformers
    activation, gated = ("gelu_new" if "gelu" in proj else "relu"), proj.startswith("gated-")
    ff = Model(name=f"layer.{len(sublayers)}")
    ff |= rms_norm(d_model, eps, name="layer_norm").connect("input", output="normed")
    ff |= dense_act_dense(d_model, cfg["d_ff"], activation, gated).connect("normed", output="ff_out")
    ff |= Buffer().connect(ff.input + ff.ff_out, output=IOKey("output"))
    block |= ff.connect(hidden, output=IOKey("output"))
    return block


def t5_stack(cfg, *, decoder):
    model = Model()
    shared = Embedding(cfg["vocab_size"], cfg["d_model"], name="shared")
    model |= shared.connect(
        IOKey("input", type=int, shape=[None, None]),
        weight=IOKey("shared_weight", differentiable=True),
        output="embeds",
    )
    bias = relative_position_bias(
        cfg["relative_attention_num_buckets"], cfg["relative_attention_max_distance"], cfg["num_heads"],
        bidirectional=not decoder,
    )
    model |= bias.connect(query="embeds", key="embeds", output="position_bias")
    layers = cfg.get("num_decoder_layers", cfg["num_layers"]) if decoder else cfg["num_layers"]
    hidden = "embeds"
    for i in range(layers):
        extra = {"memory": "memory"} if decoder else {}
        model |= t5_block(cfg, decoder=decoder, name=f"block.{i}").connect(
            hidden, position_bias="position_bias", output=f"block_{i}_out", **extra
        )
        hidden = f"block_{i}_out"
    model |= rms_norm(cfg["d_model"], name="final_layer_norm").connect(hidden, output="final_out")
    return model


def t5_encoder(cfg):
    model = t5_stack(cfg, decoder=False)
    model |= Buffer().connect(model.final_out, output=IOKey("output"))
    model.expose_keys("output")
    return model


def t5_decoder(cfg):
    model = t5_stack(cfg, decoder=True)
    if cfg.get("tie_word_embeddings", True):  # the shared embedding, scaled by d_model ** -0.5
        shared = model.final_out * cfg["d_model"] ** -0.5
        model |= Buffer().connect(shared @ model.shared_weight.transpose((1, 0)), output=IOKey("output"))
    else:
        model |= Linear(cfg["vocab_size"], use_bias=False, name="lm_head").connect("final_out", output=IOKey("output"))
    model.expose_keys("output")
    return model


def reference_names(names):
    """Our parameter names -> the builder's (its first block computes the shared relative bias)."""
    renamed = {}
    for name in names:
        if name.startswith("relative_attention_bias."):
            renamed[name] = "block.0.layer.0.SelfAttention." + name
        else:
            renamed[name] = "shared.weight" if name == "shared_weight" else name
    return renamed


def _to_numpy(backend, outputs):
    return {k: np.asarray(backend.to_numpy(v)) for k, v in outputs.items()}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_mithril_style_t5_runs_at_any_length_and_matches_the_builders(python_backend, config):
    backend = python_backend
    cfg = CONFIGS[config]
    compile_options = {"use_short_namings": False}
    encoder = ml.compile(t5_encoder(cfg), backend, **compile_options)
    decoder = ml.compile(t5_decoder(cfg), backend, data_keys={"memory"}, **compile_options)
    ref_encoder = ml.compile(mithril_models.t5_encode(cfg), backend, **compile_options)
    ref_decoder = ml.compile(mithril_models.t5_decode(cfg), backend, data_keys={"memory"}, **compile_options)
    assert encoder.output_keys == ["output"] and decoder.output_keys == ["output"]
    ref_enc_params = ref_encoder.randomize_params(seed=0)
    ref_dec_params = ref_decoder.randomize_params(seed=1)
    enc_names, dec_names = reference_names(encoder.param_keys), reference_names(decoder.param_keys)
    assert sorted(enc_names.values()) == sorted(ref_enc_params) and sorted(dec_names.values()) == sorted(ref_dec_params)
    enc_params = {ours: ref_enc_params[theirs] for ours, theirs in enc_names.items()}
    dec_params = {ours: ref_dec_params[theirs] for ours, theirs in dec_names.items()}
    rtol, atol = (1e-9, 1e-12) if backend.dtype == ml.float64 else (1e-4, 1e-5)
    rng = np.random.default_rng(0)
    for batch, source, target in ((1, 5, 3), (2, 12, 9)):  # offsets below 20 (max_distance): no bucket ties
        ids = backend.array(rng.integers(0, cfg["vocab_size"], size=(batch, source)))
        states = _to_numpy(backend, encoder.evaluate(enc_params, {"input": ids}))["output"]
        want_states = _to_numpy(backend, ref_encoder.evaluate(ref_enc_params, {"input": ids}))["output"]
        assert states.shape == (batch, source, cfg["d_model"])
        np.testing.assert_allclose(states, want_states, rtol=rtol, atol=atol)
        data = {"input": backend.array(rng.integers(0, cfg["vocab_size"], size=(batch, target))),
                "memory": backend.array(want_states)}
        logits = _to_numpy(backend, decoder.evaluate(dec_params, data))["output"]
        want_logits = _to_numpy(backend, ref_decoder.evaluate(ref_dec_params, data))["output"]
        assert logits.shape == (batch, target, cfg["vocab_size"])
        np.testing.assert_allclose(logits, want_logits, rtol=rtol, atol=atol)
