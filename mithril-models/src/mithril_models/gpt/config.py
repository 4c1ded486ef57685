"""``GPTConfig``: the sizes and options of a GPT-2 model, checked once when it is created.

Example:
    >>> config = GPTConfig(bias=True, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=50)
    >>> config.head_dim, config.hidden_dims
    (8, 128)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._config import config_value

__all__ = ["ACTIVATIONS", "GPTConfig", "config_from_hf"]

ACTIVATIONS: dict[str, bool] = {"gelu_new": True, "gelu_pytorch_tanh": True, "gelu": False}
"""Supported ``activation_function`` names -> whether GELU uses the tanh approximation."""


@dataclass(frozen=True)
class GPTConfig:
    """Sizes and options of a GPT-2 model (the arguments of :func:`create_gpt` plus two HF extras).

    Attributes:
        bias: linear layers and layer norms have biases (GPT-2: ``True``).
        block_size: the longest sequence (number of learned positions, HF ``n_positions``).
        dims: the embedding width (HF ``n_embd``).
        num_heads: attention heads; ``dims`` must be divisible by it.
        num_layers: transformer blocks.
        vocab_size: token ids are ``0 .. vocab_size - 1``.
        tie_word_embeddings: the LM head reuses ``transformer.wte.weight`` (otherwise its own ``lm_head.weight``).
        layer_norm_epsilon: added to the variance in every layer norm.
        mlp_dims: hidden width of the MLP (HF ``n_inner``; ``None`` means ``4 * dims``).
        activation: ``"gelu_new"`` / ``"gelu_pytorch_tanh"`` (tanh approximation) or ``"gelu"`` (exact, erf).
        initializer_range: the std of GPT-2's normal initialisation (``randomize_params``): every linear
            layer and embedding, with ``c_proj`` scaled by ``1 / sqrt(2 * num_layers)`` (HF's rule).

    >>> GPTConfig(bias=True, block_size=8, dims=10, num_heads=3, num_layers=1, vocab_size=5)
    Traceback (most recent call last):
    ...
    ValueError: GPT: dims=10 is not divisible by num_heads=3
    """

    bias: bool
    block_size: int
    dims: int
    num_heads: int
    num_layers: int
    vocab_size: int
    tie_word_embeddings: bool = True
    layer_norm_epsilon: float = 1e-5
    mlp_dims: int | None = field(default=None)
    activation: str = "gelu_new"
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        for name in ("block_size", "dims", "num_heads", "num_layers", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GPT: {name} must be a positive int, got {value!r}")
        if self.mlp_dims is not None and (
            isinstance(self.mlp_dims, bool) or not isinstance(self.mlp_dims, int) or self.mlp_dims < 1
        ):
            raise ValueError(f"GPT: mlp_dims (HF n_inner) must be a positive int or None, got {self.mlp_dims!r}")
        if self.dims % self.num_heads:
            raise ValueError(f"GPT: dims={self.dims} is not divisible by num_heads={self.num_heads}")
        if (
            not isinstance(self.layer_norm_epsilon, (int, float))
            or isinstance(self.layer_norm_epsilon, bool)
            or not self.layer_norm_epsilon > 0
        ):
            raise ValueError(f"GPT: layer_norm_epsilon must be a positive number, got {self.layer_norm_epsilon!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"GPT: activation {self.activation!r} is not supported; supported: {', '.join(ACTIVATIONS)}"
            )

    @property
    def head_dim(self) -> int:
        return self.dims // self.num_heads

    @property
    def hidden_dims(self) -> int:
        """The MLP's hidden width."""
        return self.mlp_dims if self.mlp_dims is not None else 4 * self.dims

    @property
    def approximate_gelu(self) -> bool:
        return ACTIVATIONS[self.activation]

    @property
    def kv_cache_sizes(self) -> tuple[int, int, int]:
        """The decode steps' caches: one per layer, every head (:class:`~mithril_models.gpt.KVDecoder`)."""
        return self.num_layers, self.num_heads, self.head_dim


def _refuse(config: Any, name: str, supported: Any) -> None:
    value = config_value(config, name, supported)
    if value != supported:
        raise ValueError(f"GPT from_hf_config: {name}={value!r} is not supported (only {supported!r})")


def config_from_hf(config: Any) -> GPTConfig:
    """A :class:`GPTConfig` from a ``transformers.GPT2Config`` (or a dict with its field names).

    >>> config_from_hf({"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 16, "vocab_size": 50}).dims
    32
    """
    activation = config_value(config, "activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"GPT from_hf_config: activation_function {activation!r} is not supported; "
            f"supported: {', '.join(ACTIVATIONS)}"
        )
    _refuse(config, "scale_attn_weights", True)
    _refuse(config, "scale_attn_by_inverse_layer_idx", False)
    _refuse(config, "add_cross_attention", False)
    return GPTConfig(
        bias=True,
        block_size=config_value(config, "n_positions"),
        dims=config_value(config, "n_embd"),
        num_heads=config_value(config, "n_head"),
        num_layers=config_value(config, "n_layer"),
        vocab_size=config_value(config, "vocab_size"),
        tie_word_embeddings=bool(config_value(config, "tie_word_embeddings", True)),
        layer_norm_epsilon=float(config_value(config, "layer_norm_epsilon", 1e-5)),
        mlp_dims=config_value(config, "n_inner", None),
        activation=activation,
        initializer_range=float(config_value(config, "initializer_range", 0.02)),
    )
