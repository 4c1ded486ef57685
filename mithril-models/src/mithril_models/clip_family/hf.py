"""``from_hf_config``: a CLIP with ViT towers from a ``transformers.CLIPConfig`` (any sizes).

Reads ``text_config`` / ``vision_config`` (hidden sizes, heads, layers, MLP widths, LayerNorm eps,
``hidden_act``, vocabulary, positions, image and patch size, channels), ``projection_dim`` and
``logit_scale_init_value``. The text feature is pooled as ``transformers`` pools it: at ``argmax(ids)`` when
``eos_token_id`` is the legacy ``2`` (or unset), else at the first ``eos_token_id``; for real CLIP vocabularies
both are the end-of-text token, the highest id.

Example:
    >>> from transformers import CLIPConfig                                          # doctest: +SKIP
    >>> model = from_hf_config(CLIPConfig(text_config={...}, vision_config={...}))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from .._config import config_fields, config_value
from .config import ACTIVATIONS, CLIPConfig, TextConfig, VisionConfig
from .model import CLIP

__all__ = ["from_hf_config"]

_LEGACY_EOS = 2  # transformers pools at argmax(input_ids) for configs saved before its PR #24773


def _activation(sub: Any, which: str) -> str:
    act: str = config_value(sub, "hidden_act", "quick_gelu")
    if act not in ACTIVATIONS:
        raise ValueError(
            f"clip.from_hf_config: {which}.hidden_act={act!r} is not supported; "
            f"expected one of {', '.join(ACTIVATIONS)}"
        )
    return act


_TOWER: dict[str, str | tuple[str, Any]] = {
    "width": "hidden_size",
    "heads": "num_attention_heads",
    "layers": "num_hidden_layers",
    "intermediate_size": "intermediate_size",
    "layer_norm_eps": ("layer_norm_eps", 1e-5),
}
"""The fields both towers read from their config: ours -> the ``transformers`` name (or the name and a default)."""


def _text(sub: Any, projection_dim: int) -> TextConfig:
    eos = config_value(sub, "eos_token_id", None)
    return TextConfig(
        embed_dim=projection_dim,
        **config_fields(sub, {"context_length": "max_position_embeddings", "vocab_size": "vocab_size", **_TOWER}),
        activation=_activation(sub, "text_config"),
        eos_token_id=None if eos in (None, _LEGACY_EOS) else eos,
    )


def _vision(sub: Any, projection_dim: int) -> VisionConfig:
    return VisionConfig(
        embed_dim=projection_dim,
        **config_fields(sub, {"image_resolution": "image_size", "patch_size": "patch_size", **_TOWER}),
        activation=_activation(sub, "vision_config"),
        num_channels=config_value(sub, "num_channels", 3),
    )


def from_hf_config(config: Any, *, name: str | None = None) -> CLIP:
    """A :class:`CLIP` with ViT towers matching a ``transformers.CLIPConfig`` (or an equivalent dict).

    >>> from transformers import CLIPConfig                      # doctest: +SKIP
    >>> model = from_hf_config(CLIPConfig())                     # doctest: +SKIP
    >>> model.config.vision.width, model.config.text.layers      # doctest: +SKIP
    (768, 12)
    """
    model_type = config_value(config, "model_type", "clip")
    if model_type != "clip":
        raise ValueError(
            f"clip.from_hf_config needs a CLIPConfig (model_type 'clip'), got model_type {model_type!r} "
            f"({type(config).__name__}); a tower's own config lacks the projection size"
        )
    projection_dim = config_value(config, "projection_dim", 512)
    text = _text(config_value(config, "text_config"), projection_dim)
    vision = _vision(config_value(config, "vision_config"), projection_dim)
    scale = float(config_value(config, "logit_scale_init_value", 2.6592))
    return CLIP(CLIPConfig(text, vision, scale), name=name)
