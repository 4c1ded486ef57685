"""The CLIP model (both towers and the contrastive head) and the public builders.

``clip(...)`` takes OpenAI's ``CLIP(...)`` arguments: a ViT image tower when ``vision_layers`` is an int,
a ModifiedResNet when it is 4 ints. Keys ``image`` (NCHW float) and ``text`` (int token ids; the
end-of-text token is the highest id of each row) -> ``logits_per_image`` ``[images, texts]``,
``logits_per_text`` (its transpose), ``image_embeds`` and ``text_embeds`` (L2-normalised), with
``logits = exp(logit_scale) * image_embeds @ text_embeds.T``.

Example:
    >>> model = clip(16, 32, 2, 64, 8, context_length=8, vocab_size=100, transformer_width=32,
    ...              transformer_heads=4, transformer_layers=2)
    >>> sorted(model.output_keys)
    ['image_embeds', 'logits_per_image', 'logits_per_text', 'text_embeds']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mithril.extend import op, param
from mithril.models import Connection, IOKey

from ..checkpoints.layout import Layout
from ..family import FamilyModel
from .config import CLIPConfig, TextConfig, vision_from_openai
from .text import EncodeText
from .vision import EncodeImage

__all__ = ["CLIP", "clip", "encode_image", "encode_text"]


def _l2_normalise(model: FamilyModel[Any], x: Connection) -> Connection:
    """``x / ||x||`` over the last axis (no epsilon, as OpenAI and ``transformers`` do)."""
    norm = op(model, "sqrt", (x * x).sum(axis=-1, keepdim=True))
    normalised: Connection = x / norm
    return normalised


class CLIP(FamilyModel[CLIPConfig]):
    """CLIP: an :class:`EncodeImage` child ``vision`` and an :class:`EncodeText` child ``text``, the scalar
    parameter ``logit_scale`` and the similarity head. Build it with :func:`clip` or ``from_hf_config``.

    >>> model = clip(16, 32, 1, 64, 8, 8, 100, 32, 4, 1)
    >>> isinstance(model, CLIP), [name for name, _ in model._children][:2]
    (True, ['vision', 'text'])
    """

    family = "clip"

    def __init__(self, config: CLIPConfig, *, name: str | None = None) -> None:
        super().__init__(config, name=name)
        vision = EncodeImage(config.vision, name="vision")
        self |= vision(image=IOKey("image"))
        text = EncodeText(config.text, name="text")
        self |= text(text=IOKey("text"))
        image_embeds = _l2_normalise(self, vision.output)
        text_embeds = _l2_normalise(self, text.output)
        # HF CLIPConfig's logit_scale_init_value (about log(1 / 0.07), as OpenAI's)
        scale = op(self, "exp", param("logit_scale", init="constant(2.6592)", shape=[]))
        logits_per_image = (image_embeds @ text_embeds.T) * scale  # [images, texts]
        self.expose(logits_per_image, "logits_per_image")
        self.expose(logits_per_image.T, "logits_per_text", canonical=False)
        self.expose(image_embeds, "image_embeds", canonical=False)
        self.expose(text_embeds, "text_embeds", canonical=False)

    def checkpoint_layouts(self) -> list[Layout]:
        """OpenAI's names, and Hugging Face ``CLIPModel``'s for ViT image towers."""
        from .checkpoint import clip_layouts

        return clip_layouts(self.config)


def encode_text(
    embed_dim: int,
    context_length: int,
    vocab_size: int,
    transformer_width: int,
    transformer_heads: int,
    transformer_layers: int,
    *,
    name: str | None = None,
) -> EncodeText:
    """CLIP's text tower alone: ``text`` (int ids ``[B, T]``, ``T <= context_length``) -> ``output`` ``[B, embed_dim]``.

    The projected, un-normalised end-of-text feature (OpenAI's ``encode_text``). ``load_hf`` fills it from a
    full CLIP checkpoint (the image tower's tensors are skipped).

    >>> tower = encode_text(16, 8, 100, 32, 4, 2)
    >>> tower.input_keys[0], tower.output_keys
    ('text', ['output'])
    """
    config = TextConfig(embed_dim, context_length, vocab_size, transformer_width, transformer_heads, transformer_layers)
    return EncodeText(config, name=name)


def encode_image(
    embed_dim: int,
    image_resolution: int,
    vision_layers: int | Sequence[int],
    vision_width: int,
    vision_patch_size: int | None,
    *,
    name: str | None = None,
) -> EncodeImage:
    """CLIP's image tower alone: ``image`` ``[B, 3, R, R]`` -> ``output`` ``[B, embed_dim]`` (not normalised).

    A ViT (``vision_layers`` blocks, ``vision_width // 64`` heads) when ``vision_layers`` is an int, OpenAI's
    ModifiedResNet when it is 4 ints (OpenAI's ``encode_image``).

    >>> encode_image(16, 64, (1, 1, 1, 1), 16, None).output_keys
    ['output']
    """
    return EncodeImage(
        vision_from_openai(embed_dim, image_resolution, vision_layers, vision_width, vision_patch_size), name=name
    )


def clip(
    embed_dim: int,
    image_resolution: int,
    vision_layers: int | Sequence[int],
    vision_width: int,
    vision_patch_size: int | None,
    context_length: int,
    vocab_size: int,
    transformer_width: int,
    transformer_heads: int,
    transformer_layers: int,
    *,
    name: str | None = None,
) -> CLIP:
    """CLIP with OpenAI's ``CLIP(...)`` signature (see the module docstring for keys and outputs).

    >>> model = clip(16, 64, (1, 1, 1, 1), 16, None, 8, 100, 32, 4, 2)
    >>> model.family, type(model.config.vision).__name__
    ('clip', 'VisionConfig')
    """
    text = TextConfig(embed_dim, context_length, vocab_size, transformer_width, transformer_heads, transformer_layers)
    vision = vision_from_openai(embed_dim, image_resolution, vision_layers, vision_width, vision_patch_size)
    return CLIP(CLIPConfig(text, vision), name=name)
