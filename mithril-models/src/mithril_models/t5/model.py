"""T5 encoder and decoder (``t5_encode``, ``t5_decode``) as separately compilable models.

The encoder maps token ids ``input`` ``[B, S]`` to hidden states ``output`` ``[B, S, d_model]`` (after
the final layer norm); the decoder maps decoder token ids ``input`` ``[B, T]`` and the encoder's states
``memory`` ``[B, S, d_model]`` to logits ``output`` ``[B, T, vocab_size]``. They may be compiled for
different backends and the encoder's output passed (as NumPy) to the decoder. Sequence lengths may be
left free on the Python backends; C and GGML need ``shapes=``.

Example:
    >>> import mithril as ml
    >>> from transformers import T5Config                                                    # doctest: +SKIP
    >>> config = T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=64)  # doctest: +SKIP
    >>> encoder, decoder = t5_encode(config), t5_decode(config)                               # doctest: +SKIP
    >>> enc = ml.compile(encoder, ml.JaxBackend(), data_keys={"input"})                       # doctest: +SKIP
    >>> dec = ml.compile(decoder, ml.TorchBackend(), data_keys={"input", "memory"})           # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, ClassVar

from mithril.extend import initializers
from mithril.models import Connection, Embedding, IOKey, Linear, RMSNorm

from ..checkpoints.layout import Layout
from ..family import FamilyModel
from .checkpoint import decoder_layouts, encoder_layouts
from .config import T5Settings
from .layers import T5Block

__all__ = ["T5Decoder", "T5Encoder", "from_hf_config", "t5_decode", "t5_encode"]


class _T5Stack(FamilyModel[Any]):
    family: ClassVar[str] = "t5"
    settings: T5Settings

    def _stack(self, num_layers: int, *, decoder: bool) -> tuple[Connection, Embedding]:
        """``shared`` embedding, the blocks and ``final_layer_norm``: the normalised states and ``shared``."""
        s = self.settings
        shared = Embedding(s.vocab_size, s.d_model, init=initializers.normal(s.initializer_factor), name="shared")
        self |= shared(input=IOKey("input", type="int", shape=[None, None]))
        hidden, bias = shared.output, None
        for i in range(num_layers):
            block = T5Block(s, first=i == 0, decoder=decoder, name=f"block.{i}")
            connections: dict[str, Any] = {"input": hidden}
            if decoder:
                connections["memory"] = IOKey("memory", shape=[None, None, s.d_model])
            if bias is not None:
                connections["position_bias"] = bias
            self |= block(**connections)
            hidden = block.output
            if i == 0:
                bias = block.position_bias
        norm = RMSNorm(s.d_model, eps=s.eps, name="final_layer_norm")
        self |= norm(input=hidden)
        self._cin = self._keys["input"]
        return norm.output, shared


class T5Encoder(_T5Stack):
    """The T5 encoder stack: ``input`` token ids ``[B, S]`` -> ``output`` ``[B, S, d_model]``.

    Children follow ``transformers``' ``T5EncoderModel`` minus the ``encoder.`` prefix: ``shared``,
    ``block.<i>.layer.0.SelfAttention.{q,k,v,o}``, ``block.0.layer.0.SelfAttention.relative_attention_bias``,
    ``block.<i>.layer.<j>.layer_norm``, ``block.<i>.layer.1.DenseReluDense.{wi,wo}`` (or ``wi_0, wi_1, wo``),
    ``final_layer_norm``. Build it with :func:`t5_encode`.

    >>> T5Encoder({"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1, "num_heads": 4}).family
    't5'
    """

    def __init__(self, config: Any, *, name: str | None = None) -> None:
        super().__init__(config, name=name)
        self.settings = T5Settings.from_config(config, "t5_encode")
        self.expose(self._stack(self.settings.num_layers, decoder=False)[0])

    def checkpoint_layouts(self) -> list[Layout]:
        """``T5ForConditionalGeneration`` / ``T5Model`` / ``T5EncoderModel`` names (the decoder's are ignorable)."""
        return encoder_layouts(self.settings)


class T5Decoder(_T5Stack):
    """The T5 decoder stack with its LM head: ``input`` ``[B, T]`` and ``memory`` ``[B, S, d_model]`` ->
    logits ``output`` ``[B, T, vocab_size]``.

    Self-attention is causal and carries the (unidirectional) relative position bias; cross-attention
    (``block.<i>.layer.1.EncDecAttention``) has none. With tied embeddings (original T5) the final states
    are scaled by ``d_model ** -0.5`` and multiplied by ``shared.weight``; otherwise (T5 v1.1,
    ``tie_word_embeddings=False``) an own ``lm_head`` is used, unscaled. Build it with :func:`t5_decode`.

    >>> config = {"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1, "num_heads": 4}
    >>> T5Decoder({**config, "tie_word_embeddings": False}).settings.tied
    False
    """

    def __init__(self, config: Any, *, name: str | None = None) -> None:
        super().__init__(config, name=name)
        s = self.settings = T5Settings.from_config(config, "t5_decode")
        hidden, shared = self._stack(s.num_decoder_layers, decoder=True)
        head = Linear(
            s.vocab_size,
            use_bias=False,
            in_features=s.d_model,
            weight_init=initializers.normal(s.initializer_factor),
            name="lm_head",
        )
        if s.tied:
            self |= head(input=hidden * (s.d_model**-0.5), weight=shared.weight)
        else:
            self |= head(input=hidden)
        self.expose(head.output)

    def checkpoint_layouts(self) -> list[Layout]:
        """``T5ForConditionalGeneration`` / ``T5Model`` names (the encoder's are ignorable)."""
        return decoder_layouts(self.settings)


def t5_encode(config: Any, *, name: str | None = None) -> T5Encoder:
    """The T5 encoder for ``config`` (a ``transformers.T5Config``, or any object or dict with its field names).

    >>> encoder = t5_encode({"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4})
    >>> encoder.family, encoder.input_keys[0], encoder.output_keys
    ('t5', 'input', ['output'])
    """
    return T5Encoder(config, name=name)


def t5_decode(config: Any, *, name: str | None = None) -> T5Decoder:
    """The T5 decoder with its LM head for ``config`` (see :func:`t5_encode`).

    >>> decoder = t5_decode({"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4})
    >>> sorted(k for k in decoder.input_keys if k in ("input", "memory")), decoder.output_keys
    (['input', 'memory'], ['output'])
    """
    return T5Decoder(config, name=name)


def from_hf_config(config: Any) -> tuple[T5Encoder, T5Decoder]:
    """``(t5_encode(config), t5_decode(config))`` for a ``transformers.T5Config``.

    >>> config = {"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1, "num_heads": 4}
    >>> encoder, decoder = from_hf_config(config)
    >>> type(encoder).__name__, type(decoder).__name__
    ('T5Encoder', 'T5Decoder')
    """
    return t5_encode(config), t5_decode(config)
