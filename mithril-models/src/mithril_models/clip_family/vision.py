"""CLIP's image tower: a Vision Transformer or OpenAI's ModifiedResNet, then a projection.

Key ``image`` (``[batch, channels, resolution, resolution]`` float, NCHW) -> ``output`` (``[batch, embed_dim]``,
not normalised; OpenAI's ``encode_image``, HF's ``get_image_features``).

The ViT's children follow ``transformers``' ``CLIPVisionModelWithProjection`` (``vision_model.embeddings.*``,
``vision_model.pre_layrnorm`` (sic), ``vision_model.encoder.layers.<i>``, ``vision_model.post_layernorm``,
``visual_projection``); the ModifiedResNet's follow OpenAI (``visual.conv1``, ``visual.layer1.0.downsample.0``,
``visual.attnpool.q_proj``), the only published format for it.

Example:
    >>> from mithril_models.clip_family.config import VisionConfig
    >>> tower = EncodeImage(VisionConfig(embed_dim=16, image_resolution=32, layers=2, width=64, patch_size=8))
    >>> tower.input_keys[0], tower.output_keys
    ('image', ['output'])
"""

from __future__ import annotations

from mithril.errors import ArgumentError
from mithril.extend import initializers, op, param
from mithril.models import Connection, Conv2d, IOKey, LayerNorm, Linear, Model

from ..checkpoints.layout import Layout
from ..family import FamilyModel
from .config import VisionConfig
from .layers import LearnedTable, encoder_layers
from .resnet import ModifiedResNet

__all__ = ["EncodeImage", "VisionEmbeddings"]


class VisionEmbeddings(Model):
    """Patch embedding (a strided convolution), the class token in front, learned position embeddings.

    ``input`` ``[B, C, R, R]`` -> ``output`` ``[B, grid**2 + 1, width]``; parameters ``patch_embedding.weight``,
    ``class_embedding``, ``position_embedding.weight`` (HF names).

    >>> VisionEmbeddings(VisionConfig(embed_dim=16, image_resolution=32, layers=1, width=64, patch_size=8)).output_keys
    ['output']
    """

    def __init__(self, config: VisionConfig, *, name: str | None = None) -> None:
        super().__init__(name=name)
        width, grid, res, patch = config.width, config.grid, config.image_resolution, config.patch_size
        if patch is None:
            raise ArgumentError(f"clip VisionEmbeddings: needs a ViT configuration (a patch_size), got {config}")
        patches = Conv2d(
            width,
            patch,
            stride=patch,
            use_bias=False,
            weight_init=initializers.normal(0.02),
            name="patch_embedding",
        )
        self |= patches(input=IOKey("input", shape=[None, config.num_channels, res, res]))
        tokens = patches.output.reshape(None, width, grid * grid).transpose(0, 2, 1)  # [B, grid**2, width]
        # the class token, repeated over the (possibly symbolic) batch: zeros shaped [B, 1, width] + the vector
        zeros = op(self, "zeros_like", tokens[:, :1, :])
        class_token = op(
            self, "add", zeros, param("class_embedding", init=initializers.normal(width**-0.5), shape=[width])
        )
        sequence = op(self, "concat", class_token, tokens, axis=1, n=2)
        positions = LearnedTable([grid * grid + 1, width], name="position_embedding")
        self |= positions(input=sequence)
        self.expose(positions.output)
        self._cin = self._keys["input"]


def _vit(tower: Model, config: VisionConfig, image: IOKey) -> Connection:
    """The ViT body inside ``tower``: the pooled, post-LayerNormed class token ``[B, width]``."""
    embeddings = VisionEmbeddings(config, name="vision_model.embeddings")
    tower |= embeddings(input=image)
    pre = LayerNorm(config.width, eps=config.layer_norm_eps, name="vision_model.pre_layrnorm")
    tower |= pre(input=embeddings.output)
    hidden = encoder_layers(tower, pre.output, config, config.vit_layers, "vision_model.encoder.layers")
    post = LayerNorm(config.width, eps=config.layer_norm_eps, name="vision_model.post_layernorm")
    tower |= post(input=hidden[:, 0, :])
    return post.output


class EncodeImage(FamilyModel[VisionConfig]):
    """The image tower (see the module docstring); build it with :func:`mithril_models.clip_family.encode_image`.

    >>> EncodeImage(VisionConfig(16, 64, (1, 1, 1, 1), 16)).config.kind
    'resnet'
    """

    family = "clip"

    def __init__(self, config: VisionConfig, *, name: str | None = None) -> None:
        super().__init__(config, name=name)
        res = config.image_resolution
        image = IOKey("image", shape=[None, config.num_channels, res, res], type="float")
        if config.kind == "vit":
            features = _vit(self, config, image)
            projection = Linear(
                config.embed_dim,
                use_bias=False,
                weight_init=initializers.normal(config.width**-0.5),
                name="visual_projection",
            )
            self |= projection(input=features, output=IOKey("output"))
        else:
            resnet = ModifiedResNet(config, name="visual")
            self |= resnet(input=image, output=IOKey("output"))

    def checkpoint_layouts(self) -> list[Layout]:
        """Hugging Face (ViT) and OpenAI names; the text tower's keys and ``logit_scale`` are ignorable."""
        from .checkpoint import vision_layouts

        return vision_layouts(self.config, alone=True)
