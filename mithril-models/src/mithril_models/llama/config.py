"""``LlamaConfig``: the sizes and options of a Llama-style decoder (Llama 1-3, Mistral), checked once.

Field names are those of ``transformers.LlamaConfig``. :meth:`LlamaConfig.from_hf` reads a
``transformers`` config (``LlamaConfig``, ``MistralConfig``), a ``config.json`` dict, either the
``rope_theta``/``rope_scaling`` fields of ``transformers`` 4 or the ``rope_parameters`` of version 5.

Example:
    >>> config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...                      num_attention_heads=4, num_key_value_heads=2)
    >>> config.head_dim, config.num_key_value_groups
    (16, 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._config import config_value
from .rope import check_rope_scaling, rope_frequencies

__all__ = ["ACTIVATIONS", "MODEL_TYPES", "LlamaConfig"]

ACTIVATIONS: tuple[str, ...] = ("silu", "swish")
"""Supported ``hidden_act`` values (both name ``x * sigmoid(x)``, the SwiGLU gate)."""

MODEL_TYPES: tuple[str, ...] = ("llama", "mistral")
"""``config.model_type`` values this family builds (Mistral differs only in options: ``sliding_window``)."""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Llama: {name} must be a positive int, got {value!r}")
    return value


def _positive_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"Llama: {name} must be a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes and options of a Llama-style decoder.

    Attributes:
        vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads: the sizes.
        num_key_value_heads: heads of keys and values (grouped-query attention; ``1`` is multi-query,
            ``None`` means ``num_attention_heads``); must divide ``num_attention_heads``.
        head_dim: width of a head (``None``: ``hidden_size // num_attention_heads``).
        rms_norm_eps: added to the mean square in every RMSNorm.
        rope_theta: base of the rotary frequencies.
        rope_scaling: ``None`` or a dict with ``rope_type`` (``linear``, ``dynamic``, ``llama3``, ``yarn``)
            and its parameters (see :mod:`mithril_models.llama.rope`).
        max_position_embeddings: the longest sequence the model was trained for (generation's limit).
        tie_word_embeddings: the LM head reuses ``model.embed_tokens.weight``.
        attention_bias: ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` have biases.
        mlp_bias: ``gate_proj``, ``up_proj`` and ``down_proj`` have biases.
        hidden_act: the gate's activation (``"silu"``).
        sliding_window: Mistral's attention window (a query sees the last ``sliding_window`` positions);
            ``None`` for none.
        initializer_range: the std of the normal initialisation of ``randomize_params``.
        model_type: ``"llama"`` or ``"mistral"`` (names the checkpoint's family in messages).

    >>> LlamaConfig(vocab_size=10, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
    ...             num_attention_heads=4, num_key_value_heads=3)
    Traceback (most recent call last):
    ...
    ValueError: Llama: num_attention_heads=4 is not a multiple of num_key_value_heads=3
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    sliding_window: int | None = None
    initializer_range: float = 0.02
    model_type: str = "llama"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
            _positive_int(name, getattr(self, name))
        _positive_int("max_position_embeddings", self.max_position_embeddings)
        heads = self.num_attention_heads
        kv_heads = (
            heads
            if self.num_key_value_heads is None
            else _positive_int("num_key_value_heads", self.num_key_value_heads)
        )
        if heads % kv_heads:
            raise ValueError(f"Llama: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
        if self.head_dim is None:
            if self.hidden_size % heads:
                raise ValueError(
                    f"Llama: hidden_size={self.hidden_size} is not divisible by num_attention_heads={heads} "
                    "(give head_dim explicitly)"
                )
            head_dim = self.hidden_size // heads
        else:
            head_dim = _positive_int("head_dim", self.head_dim)
        if head_dim % 2:
            raise ValueError(f"Llama: head_dim={head_dim} must be even (rotary embeddings rotate pairs)")
        object.__setattr__(self, "num_key_value_heads", kv_heads)
        object.__setattr__(self, "head_dim", head_dim)
        object.__setattr__(self, "rms_norm_eps", _positive_number("rms_norm_eps", self.rms_norm_eps))
        object.__setattr__(self, "rope_theta", _positive_number("rope_theta", self.rope_theta))
        object.__setattr__(self, "rope_scaling", check_rope_scaling(self.rope_scaling))
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"Llama: hidden_act {self.hidden_act!r} is not supported; supported: {', '.join(ACTIVATIONS)}"
            )
        if self.sliding_window is not None:
            _positive_int("sliding_window", self.sliding_window)
        if self.model_type not in MODEL_TYPES:
            raise ValueError(
                f"Llama: model_type {self.model_type!r} is not supported; supported: {', '.join(MODEL_TYPES)}"
            )
        for name in ("tie_word_embeddings", "attention_bias", "mlp_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Llama: {name} must be a bool, got {getattr(self, name)!r}")

    @property
    def kv_heads(self) -> int:
        """``num_key_value_heads`` as ``__post_init__`` filled it in (``num_attention_heads`` when not given)."""
        assert self.num_key_value_heads is not None  # __post_init__ sets it
        return int(self.num_key_value_heads)

    @property
    def head_width(self) -> int:
        """``head_dim`` as ``__post_init__`` filled it in (``hidden_size // num_attention_heads`` when not given)."""
        assert self.head_dim is not None  # __post_init__ sets it
        return int(self.head_dim)

    @property
    def kv_cache_sizes(self) -> tuple[int, int, int]:
        """The decode steps' caches: one per layer, the key-value heads only (grouped-query attention)."""
        return self.num_hidden_layers, self.kv_heads, self.head_width

    @property
    def num_key_value_groups(self) -> int:
        """Query heads per key-value head."""
        return self.num_attention_heads // self.kv_heads

    @property
    def rope_type(self) -> str:
        return "default" if self.rope_scaling is None else str(self.rope_scaling["rope_type"])

    def rope(self) -> tuple[Any, float]:
        """``(inv_freq, attention_scaling)`` of the rotary embeddings
        (:func:`~mithril_models.llama.rope.rope_frequencies`)."""
        return rope_frequencies(self.head_width, self.rope_theta, self.rope_scaling, self.max_position_embeddings)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (``LlamaConfig.from_dict(config.to_dict()) == config``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> LlamaConfig:
        """A config from a dict of this class's fields; an unknown key is an error naming it.

        >>> LlamaConfig.from_dict({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
        ...                        "num_hidden_layers": 1, "num_attention_heads": 2}).head_dim
        4
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ValueError(f"LlamaConfig.from_dict: unknown fields {unknown}; fields: {sorted(fields)}")
        return cls(**dict(values))

    @classmethod
    def from_hf(cls, config: Any) -> LlamaConfig:
        """A config from a ``transformers`` ``LlamaConfig``/``MistralConfig`` or a ``config.json`` dict.

        ``rope_parameters`` (``transformers`` 5) or ``rope_theta`` and ``rope_scaling`` (earlier) give the
        rotary embeddings; ``pretraining_tp`` (a way of splitting the same matmuls) is ignored.

        >>> LlamaConfig.from_hf({"model_type": "mistral", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
        ...                      "num_hidden_layers": 1, "num_attention_heads": 2, "sliding_window": 4}).sliding_window
        4
        """
        model_type = config_value(config, "model_type", "llama") or "llama"
        if model_type not in MODEL_TYPES:
            raise ValueError(
                f"Llama from_hf: model_type {model_type!r} is not a Llama-style decoder; "
                f"supported: {', '.join(MODEL_TYPES)}"
            )
        parameters = config_value(config, "rope_parameters", None)
        if isinstance(parameters, Mapping) and parameters and all(isinstance(v, Mapping) for v in parameters.values()):
            raise ValueError(f"Llama from_hf: per-layer-type rope_parameters are not supported: {dict(parameters)!r}")
        theta = config_value(config, "rope_theta", None)
        scaling = config_value(config, "rope_scaling", None)
        if isinstance(parameters, Mapping) and parameters:
            theta = parameters.get("rope_theta", theta)
            scaling = parameters
        sizes = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        try:
            required = {name: config_value(config, name) for name in sizes}
        except KeyError as exc:
            raise KeyError(f"Llama from_hf: {exc.args[0]} (a Llama configuration needs {', '.join(sizes)})") from None
        sliding_window = config_value(config, "sliding_window", None) if model_type == "mistral" else None
        if model_type == "mistral" and config_value(config, "use_sliding_window", True) is False:
            sliding_window = None
        return cls(
            **required,
            num_key_value_heads=config_value(config, "num_key_value_heads", None),
            head_dim=config_value(config, "head_dim", None),
            rms_norm_eps=config_value(config, "rms_norm_eps", 1e-6),
            rope_theta=10000.0 if theta is None else theta,
            rope_scaling=None if scaling is None else dict(scaling),
            max_position_embeddings=config_value(config, "max_position_embeddings", 2048),
            tie_word_embeddings=bool(config_value(config, "tie_word_embeddings", False)),
            attention_bias=bool(config_value(config, "attention_bias", False)),
            mlp_bias=bool(config_value(config, "mlp_bias", False)),
            hidden_act=config_value(config, "hidden_act", "silu"),
            sliding_window=sliding_window,
            initializer_range=float(config_value(config, "initializer_range", 0.02)),
            model_type=model_type,
        )
