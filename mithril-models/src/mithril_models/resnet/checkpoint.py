"""Checkpoint layouts of a ResNet: torchvision/timm names and Hugging Face ``ResNetForImageClassification``.

Both are generated from the :class:`~.config.ResNetConfig`, so a checkpoint of another size shows up as
missing, unexpected or mis-shaped keys. BatchNorm running statistics load into the model's buffers;
``num_batches_tracked`` is ignored (Mithril's BatchNorm uses a fixed momentum).

Example:
    >>> from mithril_models.resnet import ResNetConfig
    >>> config = ResNetConfig(block="basic", depths=(1,), widths=(8,), stem_width=8, num_classes=2)
    >>> hf_layout(config).entries["resnet.encoder.stages.0.layers.0.layer.1.convolution.weight"][0].path
    'layer1.0.conv2.weight'
    >>> "bn1.running_var" in torchvision_layout(config).entries
    True
"""

from __future__ import annotations

from collections.abc import Iterator

from ..checkpoints.layout import Layout, Target
from .config import ResNetConfig

__all__ = ["hf_layout", "model_paths", "torchvision_layout"]

_BN_KEYS = ("weight", "bias", "running_mean", "running_var")


def _ignorable(key: str) -> bool:
    return key.endswith("num_batches_tracked")


def _modules(config: ResNetConfig) -> Iterator[tuple[str, str, str]]:
    """``(kind, our module path, HF module path)`` for every conv, BatchNorm and the classifier."""
    yield "conv", "conv1", "resnet.embedder.embedder.convolution"
    yield "bn", "bn1", "resnet.embedder.embedder.normalization"
    channels = config.stem_width
    convs = 2 if config.block == "basic" else 3
    for stage, (depth, width) in enumerate(zip(config.depths, config.widths, strict=True)):
        out_channels = width * config.expansion
        for index in range(depth):
            ours, theirs = f"layer{stage + 1}.{index}", f"resnet.encoder.stages.{stage}.layers.{index}"
            for j in range(convs):
                yield "conv", f"{ours}.conv{j + 1}", f"{theirs}.layer.{j}.convolution"
                yield "bn", f"{ours}.bn{j + 1}", f"{theirs}.layer.{j}.normalization"
            stride = config.stage_stride(stage) if index == 0 else 1
            if stride != 1 or channels != out_channels:
                yield "conv", f"{ours}.downsample.0", f"{theirs}.shortcut.convolution"
                yield "bn", f"{ours}.downsample.1", f"{theirs}.shortcut.normalization"
            channels = out_channels
    if config.num_classes:
        yield "linear", "fc", "classifier.1"


def _keys(kind: str) -> tuple[str, ...]:
    return {"conv": ("weight",), "bn": _BN_KEYS, "linear": ("weight", "bias")}[kind]


def model_paths(config: ResNetConfig) -> list[str]:
    """Logical paths of every parameter and buffer of the ResNet of ``config`` (torchvision's state-dict keys
    without ``num_batches_tracked``).

    >>> model_paths(ResNetConfig(block="basic", depths=(1,), widths=(8,), stem_width=8, num_classes=0))[:2]
    ['conv1.weight', 'bn1.weight']
    """
    return [f"{ours}.{key}" for kind, ours, _ in _modules(config) for key in _keys(kind)]


def _strip_data_parallel(key: str) -> str:
    """``module.conv1.weight`` (saved from ``nn.DataParallel``/DDP) -> ``conv1.weight``."""
    return key[len("module.") :] if key.startswith("module.") else key


def torchvision_layout(config: ResNetConfig) -> Layout:
    """torchvision's (and timm's) names: ``conv1.weight``, ``layer1.0.downsample.1.running_mean``, ``fc.bias``.

    >>> config = ResNetConfig(block="basic", depths=(1,), widths=(8,), stem_width=8, num_classes=2)
    >>> torchvision_layout(config).canonical("module.fc.bias")
    'fc.bias'
    """
    entries = {path: [Target(path)] for path in model_paths(config)}
    return Layout("torchvision/timm", entries, ignorable=_ignorable, canonical=_strip_data_parallel)


def _add_task_prefix(key: str) -> str:
    """A checkpoint of the base ``ResNetModel`` (or ``ResNetBackbone``) lacks the task model's ``resnet.``."""
    return "resnet." + key if key.startswith(("embedder.", "encoder.")) else key


def hf_layout(config: ResNetConfig) -> Layout:
    """Hugging Face ``ResNetForImageClassification`` names (``resnet.embedder.embedder.convolution.weight``,
    ``resnet.encoder.stages.{s}.layers.{b}.shortcut.normalization.running_var``, ``classifier.1.weight``).

    >>> layout = hf_layout(ResNetConfig(block="basic", depths=(1,), widths=(8,), stem_width=8, num_classes=2))
    >>> layout.entries["classifier.1.weight"][0].path, layout.canonical("embedder.embedder.convolution.weight")
    ('fc.weight', 'resnet.embedder.embedder.convolution.weight')
    """
    entries = {
        f"{theirs}.{key}": [Target(f"{ours}.{key}")] for kind, ours, theirs in _modules(config) for key in _keys(kind)
    }
    return Layout("Hugging Face transformers", entries, ignorable=_ignorable, canonical=_add_task_prefix)
