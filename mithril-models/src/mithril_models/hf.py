"""``from_hf_config``: the matching Mithril model for a ``transformers`` configuration object.

Dispatches on ``config.model_type`` to the family's own ``from_hf_config``: ``gpt2`` -> a GPT-2
(:func:`mithril_models.gpt.from_hf_config`), ``clip`` -> a CLIP model with ViT towers, ``t5`` -> the
pair ``(encoder, decoder)`` (:func:`t5_encode`, :func:`t5_decode`), ``resnet`` -> a ResNet, ``llama`` and
``mistral`` -> a Llama-style decoder (:func:`mithril_models.llama.from_hf_config`). Sizes need not match a
named preset.

Example:
    >>> from transformers import GPT2Config                                    # doctest: +SKIP
    >>> gpt = from_hf_config(GPT2Config(n_layer=2, n_embd=64, n_head=4))        # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

from ._config import config_value

__all__ = ["FAMILIES", "from_hf_config"]

FAMILIES: dict[str, str] = {
    "gpt2": "gpt", "clip": "clip_family", "t5": "t5", "resnet": "resnet", "llama": "llama", "mistral": "llama",
}  # fmt: skip
"""``config.model_type`` -> the mithril_models family module that builds it."""


def from_hf_config(config: Any) -> Any:
    """A Mithril model (for T5 an ``(encoder, decoder)`` pair) built from a ``transformers`` config."""
    model_type = config_value(config, "model_type", None)
    module = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if module is None:
        raise ValueError(
            f"from_hf_config: no Mithril family for model_type {model_type!r} ({type(config).__name__}); "
            f"supported: {', '.join(sorted(FAMILIES))}"
        )
    return importlib.import_module(f".{module}", __package__).from_hf_config(config)
