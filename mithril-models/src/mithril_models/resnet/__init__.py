"""ResNet (torchvision's architecture) for Mithril, loading torchvision/timm and Hugging Face checkpoints.

``resnet18`` ... ``resnet152`` build the named models, :func:`resnet` any size, :func:`from_hf_config` the
model of a ``transformers.ResNetConfig``. Compile the result for any backend and fill it with
:func:`mithril_models.load_hf`.

Example:
    >>> import mithril as ml
    >>> from mithril_models import load_hf
    >>> model = resnet18(num_classes=10)
    >>> pm = ml.compile(model, ml.NumpyBackend(), shapes={"input": [1, 3, 64, 64]}, data_keys={"input"})
    >>> params = load_hf(pm, torchvision_model.state_dict())  # doctest: +SKIP
    >>> logits = pm.evaluate(params, {"input": images})["output"]  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from .checkpoint import hf_layout, model_paths, torchvision_layout
from .config import ACTIVATIONS, PRESETS, ResNetConfig, config_from_hf
from .model import ResNet, resnet, resnet18, resnet34, resnet50, resnet101, resnet152

__all__ = [
    "ACTIVATIONS", "PRESETS", "ResNet", "ResNetConfig", "config_from_hf", "from_hf_config", "hf_layout", "model_paths",
    "resnet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "torchvision_layout",
]  # fmt: skip


def from_hf_config(config: Any, *, training: bool = False, name: str | None = None) -> ResNet:
    """The ResNet of a ``transformers.ResNetConfig`` (any ``depths``, ``hidden_sizes``, ``embedding_size``,
    ``layer_type``, ``num_labels``, ``num_channels``, ``hidden_act``, ``downsample_in_first_stage``,
    ``downsample_in_bottleneck``), matching ``ResNetForImageClassification``; load its weights with ``load_hf``.

    >>> net = from_hf_config({"model_type": "resnet", "layer_type": "basic", "depths": [1], "hidden_sizes": [8],
    ...                       "embedding_size": 8, "num_labels": 3})
    >>> net.config.num_classes
    3
    """
    return ResNet(config_from_hf(config, training=training), name=name)
