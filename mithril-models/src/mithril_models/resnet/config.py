"""``ResNetConfig``: the architecture of one ResNet, the named presets and the ``transformers`` mapping.

torchvision's architecture ("v1.5"): a 7x7/2 stem convolution, BatchNorm, activation and a 3x3/2 max
pool; stages of residual blocks (``BasicBlock``: two 3x3 convolutions; ``Bottleneck``: 1x1, 3x3, 1x1 with
4x expansion and the stride on the 3x3); a 1x1 convolution + BatchNorm shortcut where a block changes
the shape; global average pooling and a linear classifier ``fc``.

Example:
    >>> config = ResNetConfig(block="basic", depths=(2, 2), widths=(16, 32), stem_width=16, num_classes=10)
    >>> config.out_channels, config.features
    ((16, 32), 32)
    >>> PRESETS[50].block, PRESETS[50].depths
    ('bottleneck', (3, 4, 6, 3))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._config import config_value

__all__ = ["ACTIVATIONS", "BLOCKS", "PRESETS", "ResNetConfig", "config_from_hf"]

BLOCKS: dict[str, int] = {"basic": 1, "bottleneck": 4}
"""Block type -> expansion (a stage's output channels = its width x expansion)."""

ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "gelu_new", "gelu_pytorch_tanh", "silu", "swish", "tanh", "sigmoid")
"""Activation names accepted by :class:`ResNetConfig` (``transformers``' ``hidden_act`` spellings)."""


def _positive_ints(name: str, values: Any) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"ResNetConfig: {name} must be a sequence of positive integers, got {values!r}")
    items = tuple(values)
    if not items or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in items):
        raise ValueError(f"ResNetConfig: {name} must be a non-empty sequence of positive integers, got {list(items)!r}")
    return items


@dataclass(frozen=True)
class ResNetConfig:
    """The architecture of one ResNet (torchvision's naming and defaults).

    Attributes:
        block: ``"basic"`` (ResNet-18/34) or ``"bottleneck"`` (ResNet-50/101/152).
        depths: residual blocks per stage (``layer1``, ``layer2``, ...).
        widths: torchvision's ``planes`` per stage: the width of the 3x3 convolutions; a stage outputs
            ``width * 4`` channels with bottleneck blocks, ``width`` with basic blocks.
        stem_width: output channels of the stem convolution ``conv1`` (HF's ``embedding_size``).
        num_classes: outputs of ``fc``; ``0`` drops ``fc`` and outputs the pooled features.
        in_channels: image channels (HF's ``num_channels``).
        downsample_in_first_stage: stride 2 in the first block of ``layer1`` too (torchvision: ``False``).
        stride_in_1x1: put a bottleneck's stride on its first 1x1 convolution ("v1", HF's
            ``downsample_in_bottleneck``) instead of the 3x3 ("v1.5", torchvision).
        activation: applied after the stem's BatchNorm and after every residual addition (HF's
            ``hidden_act``); the activations inside a block are always ReLU, as in ``transformers``.
        training: BatchNorm normalises with batch statistics and the compiled model also returns the
            updated running statistics (PyTorch's ``train()``); ``False``: running statistics (``eval()``).
        eps: BatchNorm's epsilon.
        momentum: BatchNorm's running-statistics momentum.

    >>> ResNetConfig(block="bottleneck", depths=(3, 4), widths=(64, 128)).out_channels
    (256, 512)
    >>> ResNetConfig(block="basic", depths=(1,), widths=(8,)).stage_stride(0)
    1
    """

    block: str
    depths: tuple[int, ...]
    widths: tuple[int, ...]
    stem_width: int = 64
    num_classes: int = 1000
    in_channels: int = 3
    downsample_in_first_stage: bool = False
    stride_in_1x1: bool = False
    activation: str = "relu"
    training: bool = False
    eps: float = 1e-5
    momentum: float = 0.1

    def __post_init__(self) -> None:
        if self.block not in BLOCKS:
            raise ValueError(f"ResNetConfig: block must be one of {sorted(BLOCKS)}, got {self.block!r}")
        object.__setattr__(self, "depths", _positive_ints("depths", self.depths))
        object.__setattr__(self, "widths", _positive_ints("widths", self.widths))
        if len(self.depths) != len(self.widths):
            raise ValueError(
                f"ResNetConfig: depths and widths need one entry per stage, got {len(self.depths)} depths "
                f"{list(self.depths)} and {len(self.widths)} widths {list(self.widths)}"
            )
        for name in ("stem_width", "in_channels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ResNetConfig: {name} must be a positive integer, got {value!r}")
        if not isinstance(self.num_classes, int) or isinstance(self.num_classes, bool) or self.num_classes < 0:
            raise ValueError(
                f"ResNetConfig: num_classes must be an integer >= 0 (0: no classifier), got {self.num_classes!r}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"ResNetConfig: activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}"
            )
        if not self.eps > 0 or not 0 <= self.momentum <= 1:
            raise ValueError(
                f"ResNetConfig: need eps > 0 and 0 <= momentum <= 1, got eps={self.eps!r}, momentum={self.momentum!r}"
            )

    @property
    def expansion(self) -> int:
        """Output channels of a block per unit of width (1 basic, 4 bottleneck)."""
        return BLOCKS[self.block]

    @property
    def out_channels(self) -> tuple[int, ...]:
        """Output channels of each stage."""
        return tuple(width * self.expansion for width in self.widths)

    @property
    def features(self) -> int:
        """Channels of the pooled features fed to ``fc``."""
        return self.out_channels[-1]

    def stage_stride(self, stage: int) -> int:
        """Stride of the first block of ``stage`` (0-based)."""
        return 2 if stage > 0 or self.downsample_in_first_stage else 1


def _preset(block: str, depths: tuple[int, ...]) -> ResNetConfig:
    return ResNetConfig(block=block, depths=depths, widths=(64, 128, 256, 512))


PRESETS: dict[int, ResNetConfig] = {
    18: _preset("basic", (2, 2, 2, 2)),
    34: _preset("basic", (3, 4, 6, 3)),
    50: _preset("bottleneck", (3, 4, 6, 3)),
    101: _preset("bottleneck", (3, 4, 23, 3)),
    152: _preset("bottleneck", (3, 8, 36, 3)),
}
"""torchvision's ResNet-18/34/50/101/152 (1000 classes)."""


def config_from_hf(config: Any, *, training: bool = False) -> ResNetConfig:
    """The :class:`ResNetConfig` of a ``transformers.ResNetConfig`` (or a dict with its fields).

    ``hidden_sizes`` are the stages' *output* channels in ``transformers``; a bottleneck stage's width is
    ``hidden_size // 4``, so bottleneck hidden sizes must be multiples of 4.

    >>> config_from_hf({"layer_type": "basic", "depths": [1, 1], "hidden_sizes": [8, 16], "embedding_size": 8}).widths
    (8, 16)
    """
    model_type = config_value(config, "model_type", "resnet")
    if model_type != "resnet":
        raise ValueError(
            f"resnet.from_hf_config: expected a ResNetConfig (model_type 'resnet'), got model_type {model_type!r}"
        )
    layer_type = config_value(config, "layer_type", "bottleneck")
    if layer_type not in BLOCKS:
        raise ValueError(f"resnet.from_hf_config: layer_type must be 'basic' or 'bottleneck', got {layer_type!r}")
    hidden_sizes = _positive_ints("hidden_sizes", config_value(config, "hidden_sizes", (256, 512, 1024, 2048)))
    expansion = BLOCKS[layer_type]
    uneven = [size for size in hidden_sizes if size % expansion]
    if uneven:
        raise ValueError(
            f"resnet.from_hf_config: bottleneck hidden_sizes must be multiples of 4 (a stage's 3x3 width is "
            f"hidden_size // 4), got {list(hidden_sizes)}"
        )
    activation = config_value(config, "hidden_act", "relu")
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"resnet.from_hf_config: hidden_act must be one of {', '.join(ACTIVATIONS)}, got {activation!r}"
        )
    num_labels = config_value(config, "num_labels", None)
    if num_labels is None:
        id2label = config_value(config, "id2label", None)
        num_labels = len(id2label) if id2label else 2
    return ResNetConfig(
        block=layer_type,
        depths=tuple(config_value(config, "depths", (3, 4, 6, 3))),
        widths=tuple(size // expansion for size in hidden_sizes),
        stem_width=config_value(config, "embedding_size", 64),
        num_classes=num_labels,
        in_channels=config_value(config, "num_channels", 3),
        downsample_in_first_stage=bool(config_value(config, "downsample_in_first_stage", False)),
        stride_in_1x1=bool(config_value(config, "downsample_in_bottleneck", False)),
        activation=activation,
        training=training,
    )
