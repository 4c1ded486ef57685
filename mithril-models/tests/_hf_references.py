"""The random-weight ``transformers`` references the model tests compare with (nothing is downloaded), and
their greedy tokens checked for near-ties. ``conftest.py`` puts this folder on ``sys.path``.

- ``gpt2_reference``: a ``GPT2LMHeadModel`` of ``GPT2_SIZES`` (2 layers, 32 wide) unless told otherwise;
- ``llama_reference``: a ``LlamaForCausalLM`` (or ``MistralForCausalLM``) of ``LLAMA_SIZES`` (2 layers, 64 wide,
  grouped-query attention with 2 key-value heads); ``LLAMA3_SCALING`` is a ``rope_scaling`` of type llama3;
- ``greedy_tokens``: ``transformers``' greedy tokens, asserting that the top two logits are apart at every step;
- ``compiled_reference``: a reference's Mithril model (``from_hf_config``) compiled on a backend, with its weights;
- ``tiny_clip_config``: a ``CLIPConfig`` of two small ViT-B-shaped towers (32 wide, 32x32 images in 8x8 patches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mithril as ml
import numpy as np
import pytest

from mithril_models import from_hf_config, load_hf
from mithril_models.testing import make_backend

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

GPT2_SIZES = {"n_layer": 2, "n_embd": 32, "n_head": 4, "n_positions": 16, "vocab_size": 50}
LLAMA_SIZES = dict(
    vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, bos_token_id=None, eos_token_id=None,
)  # fmt: skip
LLAMA3_SCALING = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}  # fmt: skip


def _randomize(model: Any, is_norm_scale: Any, std: float) -> Any:
    """Every parameter of ``model`` drawn from normal(0, std), norm scales from normal(1, std); ``model``."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if is_norm_scale(name) else 0.0, std)
    return model


def gpt2_reference(sizes: dict[str, int] = GPT2_SIZES, seed: int = 0, std: float = 0.1, **options: Any) -> Any:
    """A ``GPT2LMHeadModel`` of ``sizes`` (and config ``options``) in eval mode with every parameter random
    (layer-norm scales around 1)."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(**{**sizes, "bos_token_id": None, "eos_token_id": None, **options})
    model = transformers.GPT2LMHeadModel(config).eval()
    return _randomize(model, lambda name: ".ln_" in name and name.endswith("weight"), std)


def llama_reference(sizes: dict[str, Any] = LLAMA_SIZES, seed: int = 0, mistral: bool = False, **options: Any) -> Any:
    """A random-weight ``LlamaForCausalLM`` (``MistralForCausalLM``) of ``sizes`` (and config ``options``) in eval
    mode, norms' scales around 1."""
    torch.manual_seed(seed)
    config = {**sizes, **options}
    if mistral:
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**config))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    return _randomize(model.eval(), lambda name: name.endswith("norm.weight"), 0.1)


def tiny_clip_config(
    *,
    vocab_size: int,
    context: int,
    projection_dim: int,
    text_width: int = 32,
    text_heads: int = 4,
    text_mlp: int = 64,
    text_layers: int = 2,
    vision_width: int = 32,
    vision_heads: int = 4,
    vision_mlp: int = 64,
    act: str = "quick_gelu",
    **token_ids: int,
) -> Any:
    """A ``transformers.CLIPConfig``: a text tower of ``text_layers`` over ``context`` positions and a 2-layer
    vision tower on 32x32 images in 8x8 patches, both with activation ``act``; ``token_ids`` (``eos_token_id``,
    ``bos_token_id``, ``pad_token_id``) go to the text config, which has ``transformers``' defaults otherwise."""
    text = {
        "vocab_size": vocab_size,
        "hidden_size": text_width,
        "intermediate_size": text_mlp,
        "num_attention_heads": text_heads,
        "num_hidden_layers": text_layers,
        "max_position_embeddings": context,
        **token_ids,
        "hidden_act": act,
    }
    vision = {
        "hidden_size": vision_width,
        "intermediate_size": vision_mlp,
        "num_attention_heads": vision_heads,
        "num_hidden_layers": 2,
        "image_size": 32,
        "patch_size": 8,
        "hidden_act": act,
    }
    return transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection_dim)


def greedy_tokens(
    model: Any, prompts: Sequence[Sequence[int]] | np.ndarray, new: int, min_gap: float, varied: bool = False
) -> np.ndarray:
    """``transformers``' ``new`` greedy tokens after each prompt (``[batch, new]``), asserting no near-ties: at
    every step the top two logits are more than ``min_gap`` (relative to the largest logit) apart, so float
    rounding cannot flip a token. ``varied``: also that they are not one token repeated (more than 3 distinct),
    so a test comparing them sees the logits."""
    with torch.no_grad():
        options = {"do_sample": False, "output_scores": True, "return_dict_in_generate": True}
        out = model.generate(torch.tensor(np.asarray(prompts)), max_new_tokens=new, **options)
    scores = torch.stack(out.scores, 1)  # [batch, new, vocab]
    top = scores.topk(2, dim=-1).values
    assert ((top[..., 0] - top[..., 1]) / scores.abs().amax(-1)).min() > min_gap
    tokens = np.asarray(out.sequences[:, len(prompts[0]) :].numpy())
    assert not varied or len(np.unique(tokens)) > 3
    return tokens


def compiled_reference(
    model: Any, backend_name: str, static_shape: Sequence[int], dtype: Any = ml.float32, shape: Any = None,
    **options: Any,
) -> tuple[Any, dict[str, Any]]:
    """``(pm, params)``: ``from_hf_config(model.config)`` compiled on ``backend_name`` in ``dtype`` with ``model``'s
    weights. ``input``'s shape is ``shape`` when given, else ``static_shape`` on the backends that need static
    shapes (C, GGML), else symbolic; ``options`` go to ``ml.compile``."""
    backend = make_backend(backend_name, dtype)
    if shape is None and backend.codegen != "python":
        shape = static_shape
    shapes = {"input": list(shape)} if shape is not None else None
    pm = ml.compile(from_hf_config(model.config), backend, shapes=shapes, data_keys={"input"}, **options)
    return pm, load_hf(pm, model.state_dict())
