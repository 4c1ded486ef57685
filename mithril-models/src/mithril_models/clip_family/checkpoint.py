"""Checkpoint layouts of CLIP: Hugging Face ``CLIPModel`` names and OpenAI's original ``clip`` names.

Model paths follow Hugging Face inside the text tower and the ViT (``text_model.encoder.layers.0.self_attn.
q_proj.weight``) and OpenAI inside the ModifiedResNet (``visual.layer1.0.downsample.0.weight``). OpenAI's
checkpoints pack q/k/v into ``attn.in_proj_weight``/``in_proj_bias`` (split with :func:`take`) and store the
projections as ``[width, embed_dim]`` matrices used as ``x @ proj`` (transposed into ``Linear`` weights).

A tower loaded on its own (:func:`encode_text`/:func:`encode_image`) ignores the other tower's tensors and
``logit_scale``, so a full CLIP checkpoint loads into it with ``strict=True``; the whole model ignores only
buffers that carry no weights (``position_ids``, ``num_batches_tracked``, OpenAI's size scalars).

Example:
    >>> from mithril_models.clip_family.config import TextConfig
    >>> hf, openai = text_layouts(TextConfig(16, 8, 100, 32, 4, 1), alone=True)
    >>> [t.path for t in openai.entries["transformer.resblocks.0.attn.in_proj_weight"]][0]
    'text_model.encoder.layers.0.self_attn.q_proj.weight'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ..checkpoints.layout import Layout, Target, take, transpose
from .config import CLIPConfig, TextConfig, VisionConfig

__all__ = ["clip_layouts", "text_layouts", "vision_layouts"]

Entries = dict[str, list[Target]]

HF = "Hugging Face transformers (CLIPModel)"
OPENAI = "OpenAI CLIP"

_OPENAI_TEXT_PREFIXES = ("token_embedding.", "transformer.", "ln_final.")
_OPENAI_TEXT_KEYS = ("positional_embedding", "text_projection")
_OPENAI_METADATA = ("input_resolution", "context_length", "vocab_size")  # scalars in OpenAI's JIT archives


def _same(names: Iterable[str]) -> Entries:
    return {name: [Target(name)] for name in names}


def _weight_bias(ckpt: str, path: str) -> Entries:
    return {f"{ckpt}.{p}": [Target(f"{path}.{p}")] for p in ("weight", "bias")}


def _hf_encoder(prefix: str, layers: int) -> Entries:
    """``<prefix>.encoder.layers.<i>.*``: names and paths agree."""
    names = []
    for i in range(layers):
        layer = f"{prefix}.encoder.layers.{i}"
        for module in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.out_proj",
            "layer_norm1",
            "mlp.fc1",
            "mlp.fc2",
            "layer_norm2",
        ):
            names += [f"{layer}.{module}.weight", f"{layer}.{module}.bias"]
    return _same(names)


def _openai_resblocks(ckpt_prefix: str, path_prefix: str, layers: int) -> Entries:
    """OpenAI's ``<ckpt_prefix>.resblocks.<i>`` -> ``<path_prefix>.encoder.layers.<i>``."""
    entries: Entries = {}
    for i in range(layers):
        ckpt, path = f"{ckpt_prefix}.resblocks.{i}", f"{path_prefix}.encoder.layers.{i}"
        for kind in ("weight", "bias"):
            entries[f"{ckpt}.attn.in_proj_{kind}"] = [
                Target(f"{path}.self_attn.{proj}.{kind}", take(j, 3))
                for j, proj in enumerate(("q_proj", "k_proj", "v_proj"))
            ]
        for ckpt_module, module in (
            ("attn.out_proj", "self_attn.out_proj"),
            ("ln_1", "layer_norm1"),
            ("mlp.c_fc", "mlp.fc1"),
            ("mlp.c_proj", "mlp.fc2"),
            ("ln_2", "layer_norm2"),
        ):
            entries.update(_weight_bias(f"{ckpt}.{ckpt_module}", f"{path}.{module}"))
    return entries


def _text_hf(config: TextConfig) -> Entries:
    return {
        **_same(["text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight"]),
        **_hf_encoder("text_model", config.layers),
        **_same(["text_model.final_layer_norm.weight", "text_model.final_layer_norm.bias", "text_projection.weight"]),
    }


def _text_openai(config: TextConfig) -> Entries:
    return {
        "token_embedding.weight": [Target("text_model.embeddings.token_embedding.weight")],
        "positional_embedding": [Target("text_model.embeddings.position_embedding.weight")],
        **_openai_resblocks("transformer", "text_model", config.layers),
        **_weight_bias("ln_final", "text_model.final_layer_norm"),
        "text_projection": [Target("text_projection.weight", transpose)],
    }


def _vit_hf(config: VisionConfig) -> Entries:
    embeddings = "vision_model.embeddings"
    return {
        **_same(
            [
                f"{embeddings}.patch_embedding.weight",
                f"{embeddings}.class_embedding",
                f"{embeddings}.position_embedding.weight",
            ]
        ),
        **_same(["vision_model.pre_layrnorm.weight", "vision_model.pre_layrnorm.bias"]),
        **_hf_encoder("vision_model", config.vit_layers),
        **_same(["vision_model.post_layernorm.weight", "vision_model.post_layernorm.bias", "visual_projection.weight"]),
    }


def _vit_openai(config: VisionConfig) -> Entries:
    embeddings = "vision_model.embeddings"
    return {
        "visual.conv1.weight": [Target(f"{embeddings}.patch_embedding.weight")],
        "visual.class_embedding": [Target(f"{embeddings}.class_embedding")],
        "visual.positional_embedding": [Target(f"{embeddings}.position_embedding.weight")],
        **_weight_bias("visual.ln_pre", "vision_model.pre_layrnorm"),
        **_openai_resblocks("visual.transformer", "vision_model", config.vit_layers),
        **_weight_bias("visual.ln_post", "vision_model.post_layernorm"),
        "visual.proj": [Target("visual_projection.weight", transpose)],
    }


def _batch_norm(prefix: str) -> list[str]:
    return [f"{prefix}.{p}" for p in ("weight", "bias", "running_mean", "running_var")]


def _resnet_openai(config: VisionConfig) -> Entries:
    """Every ModifiedResNet tensor; names and paths agree (``visual.layer1.0.conv1.weight``)."""
    names = []
    for i in (1, 2, 3):
        names += [f"visual.conv{i}.weight", *_batch_norm(f"visual.bn{i}")]
    inplanes = config.width
    for stage, blocks in enumerate(config.resnet_layers, start=1):
        planes = config.width * 2 ** (stage - 1)
        for index in range(blocks):
            block = f"visual.layer{stage}.{index}"
            for i in (1, 2, 3):
                names += [f"{block}.conv{i}.weight", *_batch_norm(f"{block}.bn{i}")]
            if index == 0 and (stage > 1 or inplanes != planes * 4):
                names += [f"{block}.downsample.0.weight", *_batch_norm(f"{block}.downsample.1")]
            inplanes = planes * 4
    names.append("visual.attnpool.positional_embedding")
    for proj in ("q_proj", "k_proj", "v_proj", "c_proj"):
        names += [f"visual.attnpool.{proj}.weight", f"visual.attnpool.{proj}.bias"]
    return _same(names)


def _no_weights(key: str) -> bool:
    """Buffers without weights: HF's ``position_ids``, BatchNorm's ``num_batches_tracked``, OpenAI's sizes."""
    return key.endswith(("embeddings.position_ids", ".num_batches_tracked")) or key in _OPENAI_METADATA


def _other_tower(fmt: str, tower: str) -> Callable[[str], bool]:
    """Keys of the other tower (and ``logit_scale``) in a full checkpoint of format ``fmt``."""
    if fmt == HF:
        prefixes = ("vision_model.", "visual_projection.") if tower == "text" else ("text_model.", "text_projection.")
        return lambda key: _no_weights(key) or key == "logit_scale" or key.startswith(prefixes)
    if tower == "text":
        return lambda key: _no_weights(key) or key == "logit_scale" or key.startswith("visual.")
    return lambda key: (
        _no_weights(key) or key in ("logit_scale", *_OPENAI_TEXT_KEYS) or key.startswith(_OPENAI_TEXT_PREFIXES)
    )


def _prefixed(entries: Mapping[str, Sequence[Target]], prefix: str) -> Entries:
    return {key: [Target(prefix + t.path, t.transform) for t in targets] for key, targets in entries.items()}


def text_layouts(config: TextConfig, *, alone: bool) -> list[Layout]:
    """The text tower's layouts (paths relative to the tower); ``alone``: the image tower's keys are ignorable.

    >>> hf, _ = text_layouts(TextConfig(16, 8, 100, 32, 4, 1), alone=True)
    >>> hf.ignorable("vision_model.post_layernorm.weight"), hf.ignorable("text_model.encoder.layers.1.mlp.fc1.weight")
    (True, False)
    """
    return [
        Layout(HF, _text_hf(config), _other_tower(HF, "text") if alone else _no_weights),
        Layout(OPENAI, _text_openai(config), _other_tower(OPENAI, "text") if alone else _no_weights),
    ]


def vision_layouts(config: VisionConfig, *, alone: bool) -> list[Layout]:
    """The image tower's layouts: HF and OpenAI for a ViT, OpenAI only for the ModifiedResNet.

    >>> [layout.name for layout in vision_layouts(VisionConfig(16, 64, (1, 1, 1, 1), 16), alone=False)]
    ['OpenAI CLIP']
    """
    if config.kind == "resnet":
        return [Layout(OPENAI, _resnet_openai(config), _other_tower(OPENAI, "vision") if alone else _no_weights)]
    return [
        Layout(HF, _vit_hf(config), _other_tower(HF, "vision") if alone else _no_weights),
        Layout(OPENAI, _vit_openai(config), _other_tower(OPENAI, "vision") if alone else _no_weights),
    ]


def clip_layouts(config: CLIPConfig) -> list[Layout]:
    """The whole model's layouts: towers under ``text.``/``vision.``, plus ``logit_scale``.

    >>> config = CLIPConfig(TextConfig(16, 8, 100, 32, 4, 1), VisionConfig(16, 32, 1, 64, 8))
    >>> hf, openai = clip_layouts(config)
    >>> openai.entries["visual.proj"][0].path, hf.ignorable("text_model.embeddings.position_ids")
    ('vision.visual_projection.weight', True)
    """
    text = {layout.name: layout for layout in text_layouts(config.text, alone=False)}
    vision = {layout.name: layout for layout in vision_layouts(config.vision, alone=False)}
    layouts = []
    for fmt in (HF, OPENAI):
        if fmt in vision:
            entries = {
                **_prefixed(text[fmt].entries, "text."),
                **_prefixed(vision[fmt].entries, "vision."),
                "logit_scale": [Target("logit_scale")],
            }
            layouts.append(Layout(fmt, entries, _no_weights))
    return layouts
