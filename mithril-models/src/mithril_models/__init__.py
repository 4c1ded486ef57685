"""mithril-models: ResNet, GPT-2, Llama/Mistral, CLIP and T5 for Mithril, with checkpoint loading,
tokenizers and text generation.

Every builder returns a logical model you compile for any backend; :func:`load_hf` fills it from a
Hugging Face (or torchvision/timm, or OpenAI CLIP) checkpoint; :func:`generate` continues prompts with a
GPT-2, a Llama/Mistral or a T5 (greedy, sampling, beam search; the options of :class:`GenerationConfig`);
:func:`from_pretrained` opens a Hugging Face checkpoint folder (weights, configuration, tokenizer) compiled
for a backend in one call; :func:`load_tokenizer` reads a ``tokenizer.json``.
The builders are also reachable as ``from mithril.models import resnet18`` through the plugin registry.

Example:
    >>> import mithril as ml
    >>> from mithril_models import resnet18
    >>> model = resnet18(num_classes=10)
    >>> pm = ml.compile(model, ml.NumpyBackend(), shapes={"input": [1, 3, 64, 64]})  # doctest: +SKIP
    >>> logits = pm.evaluate(pm.randomize_params(), {"input": image})["output"]    # doctest: +SKIP

Names are resolved on first use, so ``import mithril_models`` imports no model family.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checkpoints import CheckpointError, LoadReport, load_hf, save_safetensors
    from .clip_family import clip, encode_image, encode_text
    from .export import export_program
    from .family import FamilyModel
    from .generation import GenerationConfig, clear_decode_cache, generate
    from .gpt import create_gpt
    from .hf import from_hf_config
    from .llama import create_llama
    from .pretrained import Pretrained, from_pretrained
    from .resnet import resnet18, resnet34, resnet50, resnet101, resnet152
    from .t5 import t5_decode, t5_encode
    from .tokenizer import Tokenizer, load_tokenizer

_EXPORTS: dict[str, str] = {
    **{f"resnet{depth}": "resnet" for depth in (18, 34, 50, 101, 152)},
    "create_gpt": "gpt",
    "clip": "clip_family",
    "encode_image": "clip_family",
    "encode_text": "clip_family",
    "t5_encode": "t5",
    "t5_decode": "t5",
    "from_hf_config": "hf",
    "load_hf": "checkpoints",
    "save_safetensors": "checkpoints",
    "CheckpointError": "checkpoints",
    "LoadReport": "checkpoints",
    "generate": "generation",
    "GenerationConfig": "generation",
    "clear_decode_cache": "generation",
    "FamilyModel": "family",
    "export_program": "export",
    "create_llama": "llama",
    "from_pretrained": "pretrained",
    "Pretrained": "pretrained",
    "load_tokenizer": "tokenizer",
    "Tokenizer": "tokenizer",
}

__all__ = [
    "CheckpointError", "FamilyModel", "GenerationConfig", "LoadReport", "Pretrained", "Tokenizer",
    "clear_decode_cache", "clip", "create_gpt", "create_llama", "encode_image", "encode_text", "export_program",
    "from_hf_config", "from_pretrained", "generate", "load_hf", "load_tokenizer", "resnet18", "resnet34", "resnet50",
    "resnet101", "resnet152", "save_safetensors", "t5_decode", "t5_encode",
]  # fmt: skip
assert sorted(__all__) == sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mithril_models' has no attribute {name!r}; available: {', '.join(__all__)}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
