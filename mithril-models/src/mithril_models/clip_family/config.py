"""CLIP configurations: the text tower, the image tower (ViT or ModifiedResNet) and the whole model.

The fields follow OpenAI's ``CLIP(embed_dim, image_resolution, vision_layers, ...)`` signature, plus what
Hugging Face configurations may vary (head counts, MLP widths, LayerNorm eps, activation, EOS pooling).
Every config validates itself on construction, so a bad value fails with a message naming the field.

Example:
    >>> text = TextConfig(embed_dim=16, context_length=8, vocab_size=100, width=32, heads=4, layers=2)
    >>> text.intermediate_size
    128
    >>> VisionConfig(embed_dim=16, image_resolution=64, layers=(1, 1, 1, 1), width=16).kind
    'resnet'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ACTIVATIONS", "CLIPConfig", "TextConfig", "VisionConfig", "resnet_feature_size"]

ACTIVATIONS: tuple[str, ...] = ("quick_gelu", "gelu")
"""Transformer MLP activations: ``quick_gelu`` (``x * sigmoid(1.702 x)``, OpenAI) and exact (erf) ``gelu``."""


def _positive_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return value


def _check_common(owner: str, cfg: Any, width_name: str, heads_name: str) -> None:
    """Checks shared by the transformer towers; ``width_name``/``heads_name`` are the builder's argument names."""
    for field_name, shown in (("embed_dim", "embed_dim"), ("width", width_name), ("heads", heads_name)):
        _positive_int(owner, shown, getattr(cfg, field_name))
    _positive_int(owner, "intermediate_size", cfg.intermediate_size)
    if cfg.width % cfg.heads:
        raise ValueError(
            f"{owner}: {width_name}={cfg.width} is not divisible by {heads_name}={cfg.heads} attention heads "
            "(each head takes width / heads features)"
        )
    if cfg.activation not in ACTIVATIONS:
        raise ValueError(f"{owner}: activation must be one of {ACTIVATIONS}, got {cfg.activation!r}")
    if not (isinstance(cfg.layer_norm_eps, (int, float)) and cfg.layer_norm_eps > 0):
        raise ValueError(f"{owner}: layer_norm_eps must be a positive number, got {cfg.layer_norm_eps!r}")


@dataclass(frozen=True)
class TextConfig:
    """The text transformer (causal attention; the feature is taken at the end-of-text token).

    Attributes:
        embed_dim: output features (the joint embedding size).
        context_length: maximum number of tokens (rows of the position embedding).
        vocab_size: rows of the token embedding.
        width, heads, layers: transformer width, attention heads and blocks.
        intermediate_size: MLP hidden width (``0`` means OpenAI's ``4 * width``).
        layer_norm_eps: LayerNorm epsilon.
        activation: ``"quick_gelu"`` (OpenAI) or ``"gelu"``.
        eos_token_id: ``None`` takes the feature at ``argmax(text, -1)`` (the end-of-text token is the highest
            id in each row, OpenAI's rule); an id takes it at the first occurrence of that id (``transformers``'
            rule when its config's ``eos_token_id`` is not the legacy ``2``).

    >>> TextConfig(16, 8, 100, 32, 4, 2, activation="gelu").activation
    'gelu'
    """

    embed_dim: int
    context_length: int
    vocab_size: int
    width: int
    heads: int
    layers: int
    intermediate_size: int = 0
    layer_norm_eps: float = 1e-5
    activation: str = "quick_gelu"
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.intermediate_size == 0 and isinstance(self.width, int):
            object.__setattr__(self, "intermediate_size", 4 * self.width)
        for name, shown in (
            ("context_length", "context_length"),
            ("vocab_size", "vocab_size"),
            ("layers", "transformer_layers"),
        ):
            _positive_int("clip text tower", shown, getattr(self, name))
        _check_common("clip text tower", self, "transformer_width", "transformer_heads")
        if self.eos_token_id is not None and (
            isinstance(self.eos_token_id, bool) or not isinstance(self.eos_token_id, int)
        ):
            raise ValueError(f"clip text tower: eos_token_id must be an int or None, got {self.eos_token_id!r}")


def resnet_feature_size(image_resolution: int) -> int:
    """Side of the ModifiedResNet's last feature map for a square image (stem: /2 conv, /2 pool; then /8).

    >>> resnet_feature_size(224), resnet_feature_size(64)
    (7, 2)
    """
    size = (image_resolution - 1) // 2 + 1  # 3x3 convolution, stride 2, padding 1
    size //= 2  # the stem's 2x2 average pool
    for _ in range(3):  # the stride-2 average pools of layer2..layer4
        size //= 2
    return size


@dataclass(frozen=True)
class VisionConfig:
    """The image tower: a ViT (``layers`` an int) or OpenAI's ModifiedResNet (``layers`` 4 ints).

    Attributes:
        embed_dim: output features (the joint embedding size).
        image_resolution: side of the square input image.
        layers: ViT blocks (int) or bottleneck blocks per ResNet stage (4 ints).
        width: ViT width, or the ResNet's base width (its stem outputs ``width`` channels, its last stage
            ``32 * width``).
        patch_size: ViT patch side (ignored by the ResNet; OpenAI passes ``None`` there).
        heads: attention heads (``0``: OpenAI's rule, ``width // 64`` for a ViT, ``32 * width // 64`` for the
            ResNet's attention pooling).
        intermediate_size: ViT MLP hidden width (``0``: ``4 * width``).
        layer_norm_eps, activation: as in :class:`TextConfig` (ViT only).
        num_channels: image channels.

    >>> vit = VisionConfig(embed_dim=16, image_resolution=32, layers=2, width=64, patch_size=8)
    >>> vit.kind, vit.heads, vit.grid
    ('vit', 1, 4)
    """

    embed_dim: int
    image_resolution: int
    layers: int | tuple[int, int, int, int]
    width: int
    patch_size: int | None = None
    heads: int = 0
    intermediate_size: int = 0
    layer_norm_eps: float = 1e-5
    activation: str = "quick_gelu"
    num_channels: int = 3
    kind: str = field(init=False, default="vit")

    def __post_init__(self) -> None:
        owner = "clip image tower"
        layers = self.layers
        if isinstance(layers, (tuple, list)):
            if len(layers) != 4 or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in layers):
                raise ValueError(f"{owner}: ModifiedResNet vision_layers must be 4 positive integers, got {layers!r}")
            object.__setattr__(self, "layers", tuple(layers))
            object.__setattr__(self, "kind", "resnet")
        elif isinstance(layers, bool) or not isinstance(layers, int):
            raise TypeError(
                f"{owner}: vision_layers must be an int (ViT blocks) or a tuple of 4 ints (ModifiedResNet blocks per "
                f"stage), got {type(layers).__name__} {layers!r}"
            )
        else:
            _positive_int(owner, "vision_layers", layers)
        for name, shown in (
            ("image_resolution", "image_resolution"),
            ("width", "vision_width"),
            ("num_channels", "num_channels"),
        ):
            _positive_int(owner, shown, getattr(self, name))
        if self.intermediate_size == 0:
            object.__setattr__(self, "intermediate_size", 4 * self.width)
        if self.kind == "vit":
            self._check_vit(owner)
            _check_common(owner, self, "vision_width", "vision heads")
        else:
            self._check_resnet(owner)

    def _check_vit(self, owner: str) -> None:
        patch = _positive_int(owner, "vision_patch_size", self.patch_size)
        if patch > self.image_resolution:
            raise ValueError(
                f"{owner}: vision_patch_size={patch} is larger than image_resolution={self.image_resolution}"
            )
        if self.heads == 0:
            if self.width < 64:
                raise ValueError(
                    f"{owner}: a ViT of vision_width={self.width} has vision_width // 64 = 0 attention heads "
                    "(OpenAI's rule: one head per 64 features); use a vision_width of at least 64"
                )
            object.__setattr__(self, "heads", self.width // 64)

    def _check_resnet(self, owner: str) -> None:
        _positive_int(owner, "embed_dim", self.embed_dim)
        if self.heads == 0:
            object.__setattr__(self, "heads", self.width * 32 // 64)
        _positive_int(owner, "heads", self.heads)
        if self.feature_width % self.heads:
            raise ValueError(
                f"{owner}: the ModifiedResNet's attention pooling works on 32 * vision_width = {self.feature_width} "
                f"features, which {self.heads} heads (32 * vision_width // 64) cannot divide; use an even vision_width"
            )
        side = resnet_feature_size(self.image_resolution)
        if side < 1 or side != self.image_resolution // 32:
            raise ValueError(
                f"{owner}: image_resolution={self.image_resolution} gives a {side}x{side} ModifiedResNet feature map, "
                f"but its attention pooling has positions for {self.image_resolution // 32}x"
                f"{self.image_resolution // 32}; use a multiple of 32"
            )

    @property
    def vit_layers(self) -> int:
        """A ViT's ``layers``: its number of blocks."""
        if not isinstance(self.layers, int):
            raise TypeError(f"clip image tower: a ModifiedResNet ({self.layers!r} blocks per stage) is not a ViT")
        return self.layers

    @property
    def resnet_layers(self) -> tuple[int, int, int, int]:
        """A ModifiedResNet's ``layers``: its bottleneck blocks per stage."""
        if isinstance(self.layers, int):
            raise TypeError(f"clip image tower: a ViT ({self.layers} blocks) is not a ModifiedResNet")
        return self.layers

    @property
    def feature_width(self) -> int:
        """Features entering the projection: the ViT width, or ``32 * width`` for the ResNet."""
        return self.width * 32 if self.kind == "resnet" else self.width

    @property
    def grid(self) -> int:
        """ViT patches per side, or the side of the ResNet's last feature map."""
        if self.kind == "resnet":
            return self.image_resolution // 32
        return self.image_resolution // int(self.patch_size or 1)


@dataclass(frozen=True)
class CLIPConfig:
    """Both towers and the initial ``logit_scale`` (``log(1 / 0.07)`` in OpenAI's and HF's initialisation).

    >>> CLIPConfig(TextConfig(16, 8, 100, 32, 4, 1), VisionConfig(16, 32, 1, 64, 8)).logit_scale_init
    2.6592
    """

    text: TextConfig
    vision: VisionConfig
    logit_scale_init: float = 2.6592

    def __post_init__(self) -> None:
        if self.text.embed_dim != self.vision.embed_dim:
            raise ValueError(
                f"clip: the text tower projects to {self.text.embed_dim} features but the image tower to "
                f"{self.vision.embed_dim}; both must equal embed_dim"
            )


def vision_from_openai(
    embed_dim: int,
    image_resolution: int,
    vision_layers: int | Sequence[int],
    vision_width: int,
    vision_patch_size: int | None,
) -> VisionConfig:
    """The image tower of OpenAI's ``CLIP(...)`` arguments.

    >>> vision_from_openai(16, 64, [1, 1, 1, 1], 16, None).layers
    (1, 1, 1, 1)
    """
    layers: Any = tuple(vision_layers) if isinstance(vision_layers, (tuple, list)) else vision_layers
    return VisionConfig(embed_dim, image_resolution, layers, vision_width, vision_patch_size)
