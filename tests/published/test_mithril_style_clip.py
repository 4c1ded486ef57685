"""CLIP (a ViT image tower and the causal text tower) written the way Mithril's published examples write
models (issue 12): blocks composed with ``|=``/``+=``, ``IOKey``s, positional ``.connect``, IOKey
expressions (``1.702 * input``), ``IOKey.shape`` for the head reshapes, ``Split`` with a list-valued
output for the fused ``in_proj``, ``ScaledDotProduct`` (causal in the text tower, ``is_causal=False`` in
the image tower), ``Concat`` with a list input for the class token, ``Size``/``Arange`` and indexing with
connections for the positions and the end-of-text feature. Parameters have OpenAI's CLIP names.

Compiled once (symbolic number of images, of texts and text length), it runs at several sizes on NumPy,
JAX and PyTorch and equals ``mithril_models.clip`` (ViT configuration) given the same weights."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.models import (
    Arange,
    ArgMax,
    Buffer,
    Concat,
    Conv2d,
    Embedding,
    IOKey,
    LayerNorm,
    Linear,
    Model,
    ScaledDotProduct,
    Sigmoid,
    Size,
    Split,
    ZerosLike,
)

from .clip_reference import openai_params

mithril_models = pytest.importorskip("mithril_models")

SIZES = {
    "embed_dim": 16,
    "image_resolution": 16,
    "vision_layers": 2,
    "vision_width": 64,
    "vision_patch_size": 8,
    "context_length": 10,
    "vocab_size": 50,
    "transformer_width": 32,
    "transformer_heads": 4,
    "transformer_layers": 2,
}


def quick_gelu(name=None):
    block = Model(name=name)
    input = IOKey("input")
    block |= Sigmoid().connect(1.702 * input, output="sigmoid")
    block |= Buffer().connect(input * block.sigmoid, output=IOKey("output"))
    block.set_cin("input")
    return block


def multi_head_attention(d_model, n_head, is_causal, name=None):
    block = Model(name=name)
    queries = IOKey("input")
    shp = queries.shape
    block |= Linear(3 * d_model, name="in_proj").connect(queries, output="in_proj_out")
    block |= Split(3, axis=-1).connect(block.in_proj_out, output="split_out")
    heads = (shp[0], shp[1], n_head, -1)
    q = block.split_out[0].reshape(heads).transpose((0, 2, 1, 3))
    k = block.split_out[1].reshape(heads).transpose((0, 2, 1, 3))
    v = block.split_out[2].reshape(heads).transpose((0, 2, 1, 3))
    block |= ScaledDotProduct(is_causal=is_causal).connect(q, k, v, output="attention")
    merged = block.attention.transpose((0, 2, 1, 3)).reshape((shp[0], shp[1], d_model))
    block |= Linear(d_model, name="out_proj").connect(merged, output=IOKey("output"))
    return block


def residual_attention_block(d_model, n_head, is_causal, name=None):
    block = Model(name=name)
    block |= LayerNorm(name="ln_1").connect("input", output="ln_1_out")
    block |= multi_head_attention(d_model, n_head, is_causal, name="attn").connect("ln_1_out", output="attn_out")
    block |= Buffer().connect(block.input + block.attn_out, output="residual")
    block |= LayerNorm(name="ln_2").connect("residual", output="ln_2_out")
    mlp = Model(name="mlp")
    mlp |= Linear(4 * d_model, name="c_fc").connect("input", output="c_fc_out")
    mlp += quick_gelu(name="gelu")
    mlp += Linear(d_model, name="c_proj").connect(output=IOKey("output"))
    block |= mlp.connect("ln_2_out", output="mlp_out")
    block |= Buffer().connect(block.residual + block.mlp_out, output=IOKey("output"))
    return block


def transformer(width, layers, heads, is_causal, name="transformer"):
    model = Model(name=name)
    resblocks = Model(name="resblocks")
    for idx in range(layers):
        block = residual_attention_block(width, heads, is_causal, name=f"{idx}")
        if idx == 0:
            resblocks |= block.connect(input="input")
        else:
            resblocks += block
    resblocks.expose_keys(output=resblocks.cout)
    model |= resblocks.connect("input", output=IOKey("output"))
    return model


def vision_transformer(input_resolution, patch_size, width, layers, heads, output_dim):
    grid = input_resolution // patch_size
    visual = Model(name="visual")
    image = IOKey("image", shape=[None, 3, input_resolution, input_resolution])
    visual |= Conv2d(
        kernel_size=patch_size, out_channels=width, stride=patch_size, use_bias=False, name="conv1"
    ).connect(image, output="patches")
    shp = visual.patches.shape
    tokens = visual.patches.reshape((shp[0], width, -1)).transpose((0, 2, 1))  # [B, grid**2, width]
    visual |= ZerosLike().connect(tokens[:, :1, :], output="zeros")
    class_token = visual.zeros + IOKey("class_embedding", shape=[width], differentiable=True)
    visual |= Concat(axis=1).connect(input=[class_token, tokens], output="sequence")
    positional = IOKey("positional_embedding", shape=[grid * grid + 1, width], differentiable=True)
    visual |= LayerNorm(name="ln_pre").connect(visual.sequence + positional, output="ln_pre_out")
    visual |= transformer(width, layers, heads, is_causal=False).connect("ln_pre_out", output="transformer_out")
    visual |= LayerNorm(name="ln_post").connect(visual.transformer_out[:, 0, :], output="ln_post_out")
    proj = IOKey("proj", shape=[width, output_dim], differentiable=True)
    visual |= Buffer().connect(visual.ln_post_out @ proj, output=IOKey("output"))
    return visual


def l2_normalise(x):
    return x / (x * x).sum(axis=-1, keepdim=True).sqrt()


def create_clip(embed_dim, image_resolution, vision_layers, vision_width, vision_patch_size, context_length,
                vocab_size, transformer_width, transformer_heads, transformer_layers):
    model = Model()
    visual = vision_transformer(
        image_resolution, vision_patch_size, vision_width, vision_layers, vision_width // 64, embed_dim
    )
    model |= visual.connect(image="image", output="image_features")
    # the text tower: token + position embeddings, causal transformer, the end-of-text feature, projection
    text = IOKey("text", type=int, shape=[None, None])
    model |= Embedding(vocab_size, transformer_width, name="token_embedding").connect(text, output="tokens")
    model |= Size(dim=1).connect(text, output="length")
    model |= Arange().connect(stop=model.length, output="positions")
    positional_embedding = IOKey("positional_embedding", shape=[context_length, transformer_width], differentiable=True)
    x = model.tokens + positional_embedding[model.positions]
    model |= transformer(transformer_width, transformer_layers, transformer_heads, is_causal=True).connect(
        x, output="text_transformer_out"
    )
    model |= LayerNorm(name="ln_final").connect("text_transformer_out", output="ln_final_out")
    model |= ArgMax(axis=-1).connect(text, output="eot")
    model |= Size(dim=0).connect(text, output="num_texts")
    model |= Arange().connect(stop=model.num_texts, output="rows")
    text_projection = IOKey("text_projection", shape=[transformer_width, embed_dim], differentiable=True)
    model |= Buffer().connect(model.ln_final_out[model.rows, model.eot] @ text_projection, output="text_features")

    image_embeds = l2_normalise(model.image_features)
    text_embeds = l2_normalise(model.text_features)
    logit_scale = IOKey("logit_scale", shape=[], differentiable=True)
    model |= Buffer().connect(logit_scale.exp() * (image_embeds @ text_embeds.T), output=IOKey("logits_per_image"))
    model |= Buffer().connect(model.logits_per_image.T, output=IOKey("logits_per_text"))
    model |= Buffer().connect(image_embeds, output=IOKey("image_embeds"))
    model |= Buffer().connect(text_embeds, output=IOKey("text_embeds"))
    model.expose_keys("logits_per_image", "logits_per_text", "image_embeds", "text_embeds")
    return model


def _texts(rng, count, length):
    """Token ids below the end-of-text id (the vocabulary's last), which ends each row at a random place."""
    text = rng.integers(1, SIZES["vocab_size"] - 1, size=(count, length))
    text[np.arange(count), rng.integers(1, length, size=count)] = SIZES["vocab_size"] - 1
    return text


def test_mithril_style_clip_runs_at_any_batch_and_length_and_matches_the_builder(python_backend):
    backend = python_backend
    ours = ml.compile(create_clip(**SIZES), backend, use_short_namings=False)
    reference = ml.compile(mithril_models.clip(**SIZES), backend, use_short_namings=False)
    assert sorted(ours.output_keys) == ["image_embeds", "logits_per_image", "logits_per_text", "text_embeds"]
    ref_params = reference.randomize_params(seed=0)
    numpy_ref = {k: np.asarray(backend.to_numpy(v)) for k, v in ref_params.items()}
    params = {k: backend.array(v) for k, v in openai_params(numpy_ref, SIZES).items()}
    assert sorted(params) == sorted(ours.param_keys)
    # a random logit scale (the builder initialises it to 1) and class token, so every parameter matters
    params["logit_scale"] = ref_params["logit_scale"] = backend.array(np.float64(0.7))
    float64 = backend.dtype == ml.float64
    rtol, atol = (1e-9, 1e-12) if float64 else (1e-4, 1e-5)
    rng = np.random.default_rng(0)
    res = SIZES["image_resolution"]
    for images, texts, length in ((2, 3, 5), (1, 4, 10)):
        data = {
            "image": backend.array(rng.normal(size=(images, 3, res, res))),
            "text": backend.array(_texts(rng, texts, length)),
        }
        got = {k: np.asarray(backend.to_numpy(v)) for k, v in ours.evaluate(params, data).items()}
        want = {k: np.asarray(backend.to_numpy(v)) for k, v in reference.evaluate(ref_params, data).items()}
        assert got["logits_per_image"].shape == (images, texts)
        assert got["text_embeds"].shape == (texts, SIZES["embed_dim"])
        for key in ("logits_per_image", "logits_per_text", "image_embeds", "text_embeds"):
            np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=atol, err_msg=key)
        np.testing.assert_allclose(got["logits_per_text"], got["logits_per_image"].T, rtol=1e-12)
