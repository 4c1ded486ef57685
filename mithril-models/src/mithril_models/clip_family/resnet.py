"""OpenAI's ModifiedResNet image tower: a 3-convolution stem, anti-aliased bottlenecks, attention pooling.

Differences from torchvision's ResNet: the stem has three 3x3 convolutions (the first with stride 2)
and an average pool instead of a max pool; a strided bottleneck keeps its convolutions at stride 1 and
average-pools after its 3x3 convolution, and its shortcut average-pools before a 1x1 convolution; the
final pooling is one multi-head attention query (the mean of the feature map) over the flattened map.
BatchNorm uses its running statistics (PyTorch's ``eval()``), as CLIP is used frozen.

Children and parameters carry OpenAI's names (``conv1``, ``bn1``, ``layer2.0.downsample.0``,
``attnpool.positional_embedding``, ``attnpool.c_proj``).

Example:
    >>> from mithril_models.clip_family.config import VisionConfig
    >>> net = ModifiedResNet(VisionConfig(embed_dim=16, image_resolution=64, layers=(1, 1, 1, 1), width=16))
    >>> net.output_keys
    ['output']
"""

from __future__ import annotations

from mithril.extend import op, param
from mithril.models import AvgPool2D, BatchNorm2d, Connection, Conv2d, IOKey, Model

from .config import VisionConfig
from .layers import attend

__all__ = ["AttentionPool", "Bottleneck", "ModifiedResNet"]

EXPANSION = 4
"""A bottleneck outputs ``4 * planes`` channels."""


def conv_bn(
    model: Model, x: Connection | IOKey, channels: int, kernel: int, index: str, *, relu: bool = True, stride: int = 1
) -> Connection:
    """``relu(bn<index>(conv<index>(x)))`` with OpenAI's names; bias-free convolution, padding ``kernel // 2``.

    >>> model = Model()
    >>> model.expose(conv_bn(model, IOKey("x", shape=[None, 3, 8, 8]), 4, 3, "1"), "y")
    >>> [name for name, _ in model._children][:2]
    ['conv1', 'bn1']
    """
    conv = Conv2d(channels, kernel, stride=stride, padding=kernel // 2, use_bias=False, name=f"conv{index}")
    model |= conv(input=x)
    norm = BatchNorm2d(channels, use_batch_stats=False, name=f"bn{index}")
    model |= norm(input=conv.output)
    return norm.output.relu() if relu else norm.output


class Bottleneck(Model):
    """1x1 -> 3x3 -> (avgpool ``stride``) -> 1x1 (``4 * planes``), plus the shortcut, then ReLU.

    The shortcut is ``downsample`` (avgpool ``stride``, ``downsample.0`` 1x1 convolution, ``downsample.1``
    BatchNorm) when the block strides or changes the channel count, the identity otherwise.

    >>> Bottleneck(64, 16, stride=2).output_keys
    ['output']
    """

    def __init__(self, inplanes: int, planes: int, stride: int = 1, *, name: str | None = None) -> None:
        super().__init__(name=name)
        x = IOKey("input", shape=[None, inplanes, None, None])
        out = conv_bn(self, x, planes, 1, "1")
        out = conv_bn(self, out, planes, 3, "2")
        if stride > 1:
            pool = AvgPool2D(stride)
            self |= pool(input=out)
            out = pool.output
        out = conv_bn(self, out, planes * EXPANSION, 1, "3", relu=False)
        identity = Connection(self, "input")
        if stride > 1 or inplanes != planes * EXPANSION:
            shortcut = identity
            if stride > 1:
                pool = AvgPool2D(stride)
                self |= pool(input=identity)
                shortcut = pool.output
            conv = Conv2d(planes * EXPANSION, 1, use_bias=False, name="downsample.0")
            self |= conv(input=shortcut)
            norm = BatchNorm2d(planes * EXPANSION, use_batch_stats=False, name="downsample.1")
            self |= norm(input=conv.output)
            identity = norm.output
        self.expose((out + identity).relu())
        self._cin = self._keys["input"]


class AttentionPool(Model):
    """Attention pooling of ``[B, C, H, W]``: the mean token (query) attends over ``[mean, pixels] +
    positional_embedding`` with ``heads`` heads; ``c_proj`` maps to ``output_dim``. ``output`` ``[B, output_dim]``.

    >>> AttentionPool(spatial=2, width=512, heads=8, output_dim=16).output_keys
    ['output']
    """

    def __init__(self, spatial: int, width: int, heads: int, output_dim: int, *, name: str | None = None) -> None:
        super().__init__(name=name)
        pixels = spatial * spatial
        x = op(self, "reshape", IOKey("input", shape=[None, width, spatial, spatial]), shape=(None, width, pixels))
        tokens = x.transpose(0, 2, 1)  # [B, HW, C]
        mean = tokens.mean(axis=1, keepdim=True)  # [B, 1, C]
        sequence = op(self, "concat", mean, tokens, axis=1, n=2)
        sequence = op(self, "add", sequence, param("positional_embedding", init="normal", shape=[pixels + 1, width]))
        # only the first token's result is kept, so only it needs to be a query
        pooled = attend(self, sequence[:, :1, :], sequence, width, heads, out_width=output_dim, out_name="c_proj")
        self.expose(pooled[:, 0, :])
        self._cin = self._keys["input"]


class ModifiedResNet(Model):
    """The whole tower: stem, ``layer1``..``layer4`` (planes ``width * 1, 2, 4, 8``; strides 1, 2, 2, 2),
    ``attnpool``. ``input`` ``[B, C, R, R]`` -> ``output`` ``[B, embed_dim]``.

    >>> ModifiedResNet(VisionConfig(embed_dim=8, image_resolution=32, layers=(1, 1, 1, 1), width=8)).output_keys
    ['output']
    """

    def __init__(self, config: VisionConfig, *, name: str | None = None) -> None:
        super().__init__(name=name)
        width, res = config.width, config.image_resolution
        x = IOKey("input", shape=[None, config.num_channels, res, res])
        out = conv_bn(self, x, width // 2, 3, "1", stride=2)
        out = conv_bn(self, out, width // 2, 3, "2")
        out = conv_bn(self, out, width, 3, "3")
        pool = AvgPool2D(2, name="avgpool")
        self |= pool(input=out)
        out = pool.output
        inplanes = width
        for stage, (blocks, stride) in enumerate(zip(config.resnet_layers, (1, 2, 2, 2), strict=True), start=1):
            planes = width * 2 ** (stage - 1)
            for index in range(blocks):
                block = Bottleneck(inplanes, planes, stride if index == 0 else 1, name=f"layer{stage}.{index}")
                self |= block(input=out)
                out = block.output
                inplanes = planes * EXPANSION
        attnpool = AttentionPool(config.grid, config.feature_width, config.heads, config.embed_dim, name="attnpool")
        self |= attnpool(input=out)
        self.expose(attnpool.output)
        self._cin = self._keys["input"]
