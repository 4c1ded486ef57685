"""Helpers for testing model families: every installed backend, the error measure of the model tests,
``transformers``' generation of prompts of different lengths (the reference of ``generate``) and a PyTorch
ResNet with torchvision's module names (the reference of ``mithril_models.resnet``).

Tests compare a family against an implementation nobody here wrote (``transformers``, hand-written
PyTorch, OpenAI's CLIP) built with random weights from a config object; nothing is fetched from a hub.

Example:
    >>> max_relative_error([1.0, 2.0], [1.0, 2.5])
    0.2
"""

from __future__ import annotations

__all__ = [
    "FLOAT32_TOLERANCE",
    "FLOAT64_TOLERANCE",
    "assert_matches",
    "backend_names",
    "backend_params",
    "make_backend",
    "max_relative_error",
    "torch_resnet",
    "transformers_generate",
]

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import mithril as ml
import numpy as np
from mithril.extend import Backend, available_backends, backend_class

FLOAT32_TOLERANCE = 1e-4
"""Max relative error of float32 backends against the float32 reference (``max|got-ref| / max|ref|``)."""
FLOAT64_TOLERANCE = 1e-9
"""Max relative error of NumPy float64 against the reference run in float64."""


def backend_names() -> list[str]:
    """Installed backends, NumPy first (``*`` is the shared Python table, not a backend)."""
    names = sorted(b for b in available_backends() if b != "*")
    return sorted(names, key=lambda n: n != "numpy")


def backend_params(*, dtypes: tuple[Any, ...] = (ml.float32,)) -> Iterator[Any]:
    """``pytest.param(name, dtype)`` for every installed backend that computes in ``dtype``."""
    import pytest

    for name in backend_names():
        backend: type[Backend[Any]] = backend_class(name)
        for dtype in dtypes:
            if dtype in backend.supported_dtypes:
                yield pytest.param(name, dtype, id=f"{name}-{dtype.value}")


def make_backend(name: str, dtype: Any = ml.float32) -> Any:
    return backend_class(name)(dtype=dtype)


def max_relative_error(got: Any, ref: Any) -> float:
    """``max|got - ref| / max|ref|`` (the issue's measure), in float64."""
    got64, ref64 = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert got64.shape == ref64.shape, f"shape {got64.shape} != reference {ref64.shape}"
    scale = float(np.abs(ref64).max()) or 1.0
    return float(np.abs(got64 - ref64).max()) / scale


def assert_matches(got: Any, ref: Any, dtype: Any, what: str = "") -> None:
    """Fail unless ``got`` is within the tolerance for ``dtype`` of ``ref``."""
    tolerance = FLOAT64_TOLERANCE if dtype == ml.float64 else FLOAT32_TOLERANCE
    error = max_relative_error(got, ref)
    assert error <= tolerance, f"{what}: max relative error {error:.3g} > {tolerance:g}"


def transformers_generate(model: Any, rows: Sequence[Sequence[int]], **options: Any) -> np.ndarray:
    """``model.generate`` (a ``transformers`` model, ``do_sample=False``) of prompts of any lengths, padded as
    ``transformers`` expects: on the left for a decoder-only model, on the right for an encoder-decoder (T5),
    with the attention mask and ``pad_token_id=0`` unless ``options`` say otherwise. The new tokens
    ``[batch, new]`` (an encoder-decoder's without its decoder start token)."""
    import torch

    encoder_decoder = bool(model.config.is_encoder_decoder)
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        where = slice(0, len(row)) if encoder_decoder else slice(width - len(row), width)
        ids[i, where], mask[i, where] = row, 1
    with torch.no_grad():
        out = model.generate(
            torch.tensor(ids), attention_mask=torch.tensor(mask), do_sample=False, **{"pad_token_id": 0, **options}
        )
    new: np.ndarray = out[:, 1:].numpy() if encoder_decoder else out[:, width:].numpy()
    return new


def torch_resnet(
    block: str = "basic",
    depths: Sequence[int] = (2, 2, 2, 2),
    widths: Sequence[int] = (64, 128, 256, 512),
    stem_width: int = 64,
    num_classes: int = 1000,
) -> Any:
    """A hand-written PyTorch ResNet (``torch.nn.Module``, PyTorch's default initialisation) with torchvision's
    architecture and module names (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer2.0.downsample.0``, ``fc``):
    ``basic`` or ``bottleneck`` blocks, ``depths[i]`` of them of width ``widths[i]`` in stage ``i``, the first
    block of every stage after the first with stride 2, 1x1 convolution + BatchNorm shortcuts. The defaults are
    ResNet-18. torchvision itself is not a dependency."""
    resnet_class = _torch_resnet_class()
    return resnet_class(block, tuple(depths), tuple(widths), stem_width, num_classes)


@functools.cache
def _torch_resnet_class() -> Any:
    """The classes of :func:`torch_resnet` (defined on first use: PyTorch is imported then)."""
    import torch
    from torch import nn

    def shortcut(inplanes: int, outplanes: int, stride: int) -> nn.Module | None:
        if stride == 1 and inplanes == outplanes:
            return None
        return nn.Sequential(nn.Conv2d(inplanes, outplanes, 1, stride, bias=False), nn.BatchNorm2d(outplanes))

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = shortcut(inplanes, planes, stride)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            summed: torch.Tensor = self.relu(out + (x if self.downsample is None else self.downsample(x)))
            return summed

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = shortcut(inplanes, planes * 4, stride)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            summed: torch.Tensor = self.relu(out + (x if self.downsample is None else self.downsample(x)))
            return summed

    class TorchResNet(nn.Module):
        def __init__(
            self, block: str, depths: tuple[int, ...], widths: tuple[int, ...], stem_width: int, num_classes: int
        ) -> None:
            super().__init__()
            kind = BasicBlock if block == "basic" else Bottleneck
            self.conv1 = nn.Conv2d(3, stem_width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(stem_width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            channels = stem_width
            for stage, (depth, width) in enumerate(zip(depths, widths, strict=True)):
                blocks = []
                for index in range(depth):
                    blocks.append(kind(channels, width, (2 if stage else 1) if index == 0 else 1))
                    channels = width * kind.expansion
                setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
            self.stages = len(depths)
            self.fc = nn.Linear(channels, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            for stage in range(self.stages):
                x = getattr(self, f"layer{stage + 1}")(x)
            out: torch.Tensor = self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
            return out

    return TorchResNet
