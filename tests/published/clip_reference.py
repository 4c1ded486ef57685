"""OpenAI's CLIP parameter layout filled from ``mithril_models.clip``'s (Hugging Face) parameters: the weights
the Mithril-style CLIP tests and Mithril's published CLIP example are compared with."""

from __future__ import annotations

import numpy as np


def openai_params(ref: dict, sizes: dict) -> dict:
    """OpenAI's parameter names (fused ``in_proj``, ``x @ proj`` projections) filled from the builder's
    Hugging Face names."""
    out = {
        "visual.conv1.weight": ref["vision.vision_model.embeddings.patch_embedding.weight"],
        "visual.class_embedding": ref["vision.vision_model.embeddings.class_embedding"],
        "visual.positional_embedding": ref["vision.vision_model.embeddings.position_embedding.weight"],
        "visual.proj": ref["vision.visual_projection.weight"].T,
        "token_embedding.weight": ref["text.text_model.embeddings.token_embedding.weight"],
        "positional_embedding": ref["text.text_model.embeddings.position_embedding.weight"],
        "text_projection": ref["text.text_projection.weight"].T,
        "logit_scale": ref["logit_scale"],
    }
    norms = {"ln_pre": "vision.vision_model.pre_layrnorm", "ln_post": "vision.vision_model.post_layernorm"}
    for ours, theirs in norms.items():
        for p in ("weight", "bias"):
            out[f"visual.{ours}.{p}"] = ref[f"{theirs}.{p}"]
    for p in ("weight", "bias"):
        out[f"ln_final.{p}"] = ref[f"text.text_model.final_layer_norm.{p}"]
    towers = (
        ("visual.transformer", "vision.vision_model.encoder.layers", sizes["vision_layers"]),
        ("transformer", "text.text_model.encoder.layers", sizes["transformer_layers"]),
    )
    renames = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "attn.out_proj": "self_attn.out_proj",
               "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}
    for ours, theirs, layers in towers:
        for i in range(layers):
            mine, hf = f"{ours}.resblocks.{i}", f"{theirs}.{i}"
            for p in ("weight", "bias"):
                for a, b in renames.items():
                    out[f"{mine}.{a}.{p}"] = ref[f"{hf}.{b}.{p}"]
                out[f"{mine}.attn.in_proj.{p}"] = np.concatenate(
                    [ref[f"{hf}.self_attn.{n}_proj.{p}"] for n in "qkv"], axis=0
                )
    return out
