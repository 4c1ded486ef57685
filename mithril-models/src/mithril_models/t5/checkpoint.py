"""Hugging Face checkpoint names of the T5 encoder and decoder.

``T5ForConditionalGeneration`` (and ``T5Model``, ``T5EncoderModel``) name the encoder's tensors
``encoder.<path>`` and the decoder's ``decoder.<path>``, where ``<path>`` is the logical path of the
parameter in :class:`T5Encoder`/:class:`T5Decoder`. The token embedding ``shared.weight`` is repeated as
``encoder.embed_tokens.weight``, ``decoder.embed_tokens.weight`` and, with tied embeddings,
``lm_head.weight``: all fill ``shared.weight`` and must hold the same values. Each half ignores the
other half's tensors, so one full checkpoint loads into either with ``strict=True``.

Example:
    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4)
    >>> layout = encoder_layouts(s)[0]
    >>> layout.entries["encoder.block.0.layer.0.SelfAttention.q.weight"][0].path
    'block.0.layer.0.SelfAttention.q.weight'
    >>> layout.ignorable("decoder.final_layer_norm.weight")
    True
"""

from __future__ import annotations

from ..checkpoints.layout import Layout, Target
from .config import T5Settings

__all__ = ["decoder_layouts", "encoder_layouts", "stack_parameter_paths"]

_UNUSED_CROSS_BIAS = "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"
"""Written by old checkpoints although cross-attention never uses it (``transformers`` ignores it too)."""


def stack_parameter_paths(settings: T5Settings, *, decoder: bool) -> list[str]:
    """Logical paths of the stack's parameters except ``shared.weight`` (and the decoder's ``lm_head``).

    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4)
    >>> len(stack_parameter_paths(s, decoder=False))
    10
    """
    projections = ("wi_0", "wi_1", "wo") if settings.gated else ("wi", "wo")
    paths = []
    for i in range(settings.num_decoder_layers if decoder else settings.num_layers):
        attention = f"block.{i}.layer.0"
        paths += [f"{attention}.SelfAttention.{p}.weight" for p in "qkvo"]
        if i == 0:
            paths.append(f"{attention}.SelfAttention.relative_attention_bias.weight")
        paths.append(f"{attention}.layer_norm.weight")
        if decoder:
            paths += [f"block.{i}.layer.1.EncDecAttention.{p}.weight" for p in "qkvo"]
            paths.append(f"block.{i}.layer.1.layer_norm.weight")
        ff = f"block.{i}.layer.{2 if decoder else 1}"
        paths += [f"{ff}.DenseReluDense.{p}.weight" for p in projections]
        paths.append(f"{ff}.layer_norm.weight")
    paths.append("final_layer_norm.weight")
    return paths


def _stack_entries(settings: T5Settings, prefix: str, *, decoder: bool) -> dict[str, list[Target]]:
    entries = {f"{prefix}.{path}": [Target(path)] for path in stack_parameter_paths(settings, decoder=decoder)}
    entries["shared.weight"] = [Target("shared.weight")]
    entries[f"{prefix}.embed_tokens.weight"] = [Target("shared.weight")]
    return entries


def _encoder_ignorable(key: str) -> bool:
    return key.startswith("decoder.") or key == "lm_head.weight"


def _decoder_ignorable(key: str) -> bool:
    return key.startswith("encoder.") or key == _UNUSED_CROSS_BIAS


def encoder_layouts(settings: T5Settings) -> list[Layout]:
    """Hugging Face layout of :class:`T5Encoder`: ``T5ForConditionalGeneration``, ``T5Model``, ``T5EncoderModel``."""
    return [Layout("Hugging Face T5 (encoder)", _stack_entries(settings, "encoder", decoder=False), _encoder_ignorable)]


def decoder_layouts(settings: T5Settings) -> list[Layout]:
    """The Hugging Face layout of :class:`T5Decoder` (``T5ForConditionalGeneration``; ``T5Model`` lacks ``lm_head``)."""
    entries = _stack_entries(settings, "decoder", decoder=True)
    entries["lm_head.weight"] = [Target("shared.weight" if settings.tied else "lm_head.weight")]
    return [Layout("Hugging Face T5 (decoder)", entries, _decoder_ignorable)]
