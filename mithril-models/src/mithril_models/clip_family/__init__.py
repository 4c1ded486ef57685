"""CLIP for Mithril: ViT and ModifiedResNet image towers, the causal text tower, the contrastive head.

Builders take OpenAI's ``CLIP(...)`` arguments; :func:`from_hf_config` reads a ``transformers.CLIPConfig``.
``load_hf`` fills them from Hugging Face ``CLIPModel`` or OpenAI checkpoints (state dicts or safetensors);
each tower alone loads from a full CLIP checkpoint.

Example:
    >>> import mithril as ml
    >>> model = clip(16, 32, 2, 64, 8, 8, 100, 32, 4, 2)
    >>> pm = ml.compile(model, ml.NumpyBackend(), data_keys={"image", "text"})        # doctest: +SKIP
    >>> out = pm.evaluate(params, {"image": images, "text": token_ids})              # doctest: +SKIP
    >>> out["logits_per_image"].shape                                                # doctest: +SKIP
    (2, 3)
"""

from .config import CLIPConfig, TextConfig, VisionConfig
from .hf import from_hf_config
from .model import CLIP, clip, encode_image, encode_text
from .text import EncodeText
from .vision import EncodeImage

__all__ = [
    "CLIP",
    "CLIPConfig",
    "EncodeImage",
    "EncodeText",
    "TextConfig",
    "VisionConfig",
    "clip",
    "encode_image",
    "encode_text",
    "from_hf_config",
]
