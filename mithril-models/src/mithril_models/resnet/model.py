"""The ResNet model: :class:`ResNet` and the builders ``resnet``, ``resnet18`` ... ``resnet152``.

Children carry torchvision's module names (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer1.0.bn1``,
``layer1.0.downsample.0``, ``layer1.0.downsample.1``, ..., ``fc``), so ``ml.compile(...,
use_short_namings=False)`` names the parameters exactly as a torchvision ``state_dict()`` does. Keys:
``input`` (``[N, C, H, W]`` float images) -> ``output`` (``[N, num_classes]`` logits).

Example:
    >>> import mithril as ml
    >>> model = resnet(block="basic", depths=[1, 1], widths=[8, 16], stem_width=8, num_classes=3)
    >>> pm = ml.compile(model, ml.NumpyBackend(), shapes={"input": [2, 3, 32, 32]}, data_keys={"input"}, inference=True)
    >>> pm.shapes["output"]
    [2, 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mithril.models import (
    Add,
    BatchNorm2d,
    Conv2d,
    Gelu,
    IOKey,
    Linear,
    MaxPool2D,
    Mean,
    Model,
    Multiply,
    Relu,
    Sigmoid,
    Tanh,
)

from ..checkpoints.layout import Layout
from ..family import FamilyModel
from .config import PRESETS, ResNetConfig

KAIMING = "kaiming_normal(fan_out)"
"""torchvision's and transformers' ResNet convolutions: ``kaiming_normal_(mode="fan_out", nonlinearity="relu")``."""

__all__ = ["ResNet", "resnet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]


def _activation(kind: str, name: str) -> Model:
    """The activation ``kind`` (a :data:`~.config.ACTIVATIONS` name) as a model with ``input``/``output``."""
    activation: Model  # Relu, Gelu...: classes built at import time, which mypy sees as Any
    if kind == "relu":
        activation = Relu(name=name)
    elif kind == "gelu":
        activation = Gelu(approximate=False, name=name)
    elif kind in ("gelu_new", "gelu_pytorch_tanh"):
        activation = Gelu(approximate=True, name=name)
    elif kind == "tanh":
        activation = Tanh(name=name)
    elif kind == "sigmoid":
        activation = Sigmoid(name=name)
    elif kind in ("silu", "swish"):
        activation = Model(name=name)
        gate = Sigmoid()
        activation |= gate(input="input")
        activation |= Multiply()(left="input", right=gate.output, output=IOKey("output"))
    else:
        raise ValueError(f"unknown activation {kind!r}")
    return activation


def _batch_norm(config: ResNetConfig, channels: int, name: str) -> BatchNorm2d:
    return BatchNorm2d(channels, eps=config.eps, momentum=config.momentum, use_batch_stats=config.training, name=name)


def _block(config: ResNetConfig, in_channels: int, width: int, stride: int, name: str) -> Model:
    """One residual block (``BasicBlock`` or ``Bottleneck``) named ``layer{s}.{b}``: ``input`` -> ``output``."""
    out_channels = width * config.expansion
    if config.block == "basic":
        convs = [(width, 3, stride), (out_channels, 3, 1)]
    else:
        first, middle = (stride, 1) if config.stride_in_1x1 else (1, stride)
        convs = [(width, 1, first), (width, 3, middle), (out_channels, 1, 1)]
    block = Model(name=name)
    channels = in_channels
    main: Any = "input"
    for i, (out, kernel, conv_stride) in enumerate(convs, start=1):
        conv = Conv2d(
            out,
            kernel,
            stride=conv_stride,
            padding=kernel // 2,
            use_bias=False,
            in_channels=channels,
            weight_init=KAIMING,
            name=f"conv{i}",
        )
        norm = _batch_norm(config, out, f"bn{i}")
        block |= conv(input=main)
        block |= norm(input=conv.output)
        main = norm.output
        if i < len(convs):  # transformers too uses ReLU inside a block whatever its hidden_act
            act = _activation("relu", f"relu{i}")
            block |= act(input=main)
            main = act.output
        channels = out
    skip: Any = "input"
    if stride != 1 or in_channels != out_channels:
        conv = Conv2d(
            out_channels,
            1,
            stride=stride,
            use_bias=False,
            in_channels=in_channels,
            weight_init=KAIMING,
            name="downsample.0",
        )
        norm = _batch_norm(config, out_channels, "downsample.1")
        block |= conv(input="input")
        block |= norm(input=conv.output)
        skip = norm.output
    add = Add(name="add")
    block |= add(left=main, right=skip)
    block |= _activation(config.activation, "relu")(input=add.output, output=IOKey("output"))
    return block


class ResNet(FamilyModel[ResNetConfig]):
    """A ResNet built from a :class:`ResNetConfig`; ``input`` ``[N, C, H, W]`` -> ``output`` logits.

    ``config.training`` picks BatchNorm's mode: ``False`` uses the running statistics (buffers
    ``*.running_mean``/``*.running_var``); ``True`` uses batch statistics and the compiled model also
    returns each buffer's next value (``pm.buffer_updates``, ``pm.update_buffers``).

    Example:
        >>> from mithril_models.resnet import ResNetConfig
        >>> net = ResNet(ResNetConfig(block="bottleneck", depths=(1,), widths=(4,), stem_width=8, num_classes=2))
        >>> net.family, net.config.features
        ('resnet', 16)
    """

    family = "resnet"
    config_type = ResNetConfig
    made_by = "resnet(...), resnet18(...) or from_hf_config(transformers.ResNetConfig(...))"

    def _build(self) -> None:
        config = self.config
        self |= Conv2d(
            config.stem_width,
            7,
            stride=2,
            padding=3,
            use_bias=False,
            in_channels=config.in_channels,
            weight_init=KAIMING,
            name="conv1",
        )(input=IOKey("input", type="float"))
        self += _batch_norm(config, config.stem_width, "bn1")
        self += _activation(config.activation, "relu")
        self += MaxPool2D(kernel_size=3, stride=2, padding=1, name="maxpool")
        channels = config.stem_width
        for stage, (depth, width) in enumerate(zip(config.depths, config.widths, strict=True)):
            for index in range(depth):
                stride = config.stage_stride(stage) if index == 0 else 1
                self += _block(config, channels, width, stride, f"layer{stage + 1}.{index}")
                channels = width * config.expansion
        if config.num_classes:
            self += Mean(axis=(2, 3), name="avgpool")
            self += Linear(config.num_classes, in_features=channels, name="fc")(output=IOKey("output"))
        else:
            self += Mean(axis=(2, 3), name="avgpool")(output=IOKey("output"))

    def checkpoint_layouts(self) -> list[Layout]:
        """torchvision/timm names and Hugging Face ``ResNetForImageClassification`` names.

        >>> [layout.name for layout in resnet18().checkpoint_layouts()]
        ['torchvision/timm', 'Hugging Face transformers']
        """
        from .checkpoint import hf_layout, torchvision_layout

        return [torchvision_layout(self.config), hf_layout(self.config)]


def resnet(
    block: str = "bottleneck",
    depths: Sequence[int] = (3, 4, 6, 3),
    widths: Sequence[int] = (64, 128, 256, 512),
    stem_width: int = 64,
    num_classes: int = 1000,
    *,
    in_channels: int = 3,
    training: bool = False,
    name: str | None = None,
    **options: Any,
) -> ResNet:
    """A ResNet of any size (torchvision's architecture).

    Args:
        block: ``"basic"`` or ``"bottleneck"``.
        depths: blocks per stage.
        widths: 3x3 widths per stage (torchvision's ``planes``; bottleneck stages output 4x as many channels).
        stem_width: output channels of ``conv1``.
        num_classes: outputs of ``fc`` (``0``: no ``fc``; the output is the pooled features).
        in_channels: image channels.
        training: BatchNorm with batch statistics, returning updated running statistics.
        name: the model's name.
        options: other :class:`ResNetConfig` fields (``downsample_in_first_stage``, ``stride_in_1x1``,
            ``activation``, ``eps``, ``momentum``).

    >>> resnet(block="basic", depths=[2, 2], widths=[16, 32], stem_width=16, num_classes=10).config.features
    32
    """
    unknown = set(options) - {"downsample_in_first_stage", "stride_in_1x1", "activation", "eps", "momentum"}
    if unknown:
        raise TypeError(
            f"resnet() got unknown option(s) {sorted(unknown)}; accepted: block, depths, widths, stem_width, "
            "num_classes, in_channels, training, name, downsample_in_first_stage, stride_in_1x1, activation, eps, "
            "momentum"
        )
    config = ResNetConfig(
        block=block,
        depths=tuple(depths),
        widths=tuple(widths),
        stem_width=stem_width,
        num_classes=num_classes,
        in_channels=in_channels,
        training=training,
        **options,
    )
    return ResNet(config, name=name)


def _named(depth: int, num_classes: int, training: bool, name: str | None) -> ResNet:
    preset = PRESETS[depth]
    return resnet(
        preset.block, preset.depths, preset.widths, preset.stem_width, num_classes, training=training, name=name
    )


def resnet18(num_classes: int = 1000, *, training: bool = False, name: str | None = None) -> ResNet:
    """torchvision's ResNet-18 (BasicBlock, depths 2-2-2-2; 11,689,512 parameters for 1000 classes).

    >>> resnet18(num_classes=10).config.depths
    (2, 2, 2, 2)
    """
    return _named(18, num_classes, training, name)


def resnet34(num_classes: int = 1000, *, training: bool = False, name: str | None = None) -> ResNet:
    """torchvision's ResNet-34 (BasicBlock, depths 3-4-6-3; 21,797,672 parameters for 1000 classes).

    >>> resnet34().config.block
    'basic'
    """
    return _named(34, num_classes, training, name)


def resnet50(num_classes: int = 1000, *, training: bool = False, name: str | None = None) -> ResNet:
    """torchvision's ResNet-50 (Bottleneck, depths 3-4-6-3; 25,557,032 parameters for 1000 classes).

    >>> resnet50().config.features
    2048
    """
    return _named(50, num_classes, training, name)


def resnet101(num_classes: int = 1000, *, training: bool = False, name: str | None = None) -> ResNet:
    """torchvision's ResNet-101 (Bottleneck, depths 3-4-23-3; 44,549,160 parameters for 1000 classes).

    >>> resnet101().config.depths
    (3, 4, 23, 3)
    """
    return _named(101, num_classes, training, name)


def resnet152(num_classes: int = 1000, *, training: bool = False, name: str | None = None) -> ResNet:
    """torchvision's ResNet-152 (Bottleneck, depths 3-8-36-3; 60,192,808 parameters for 1000 classes).

    >>> resnet152().config.depths
    (3, 8, 36, 3)
    """
    return _named(152, num_classes, training, name)
