"""Reading a T5 configuration (``transformers.T5Config``, a dataclass or a dict) into :class:`T5Settings`.

Field names follow ``transformers.T5Config``. The sizes (``vocab_size``, ``d_model``, ``d_kv``, ``d_ff``,
``num_layers``, ``num_heads``) are required; the rest default to the ``T5Config`` defaults.

Example:
    >>> settings = T5Settings.from_config(
    ...     {"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4}
    ... )
    >>> settings.inner_dim, settings.num_decoder_layers, settings.activation, settings.gated
    (32, 2, 'relu', False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._config import config_value

__all__ = ["ACTIVATIONS", "T5Settings", "parse_feed_forward_proj"]

ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "gelu_new", "silu")
"""Activations of the feed-forward block: ``relu``, ``gelu`` (exact, erf), ``gelu_new`` (tanh
approximation) and ``silu``; each also gated (``"gated-<name>"``). ``"gated-gelu"`` means ``gelu_new``,
as in ``transformers``."""

_REQUIRED = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads")


def parse_feed_forward_proj(value: Any) -> tuple[str, bool]:
    """``(activation, gated)`` for a ``feed_forward_proj`` string, or a clear error.

    >>> parse_feed_forward_proj("gated-gelu")
    ('gelu_new', True)
    >>> parse_feed_forward_proj("relu")
    ('relu', False)
    """
    supported = ", ".join(repr(p) for a in ACTIVATIONS for p in (a, f"gated-{a}"))
    if not isinstance(value, str):
        raise ValueError(f"T5 feed_forward_proj must be a string ({supported}), got {value!r}")
    parts = value.split("-")
    gated = len(parts) == 2 and parts[0] == "gated"
    activation = parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and not gated) or activation not in ACTIVATIONS:
        raise ValueError(f"T5 feed_forward_proj {value!r} is not supported; expected one of {supported}")
    if value == "gated-gelu":  # transformers' backward-compatible meaning (T5 v1.1)
        activation = "gelu_new"
    return activation, gated


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"T5 configuration: {name} must be a positive integer, got {value!r}")
    return value


def _untied(config: Any) -> bool:
    """Whether the decoder has its own ``lm_head`` (T5 v1.1) instead of reusing ``shared`` scaled by d_model**-0.5.

    transformers >= 5 always sets ``tie_word_embeddings=True`` on ``T5Config`` and keeps the value it was
    given as ``scale_decoder_outputs``; earlier versions (and plain dicts) carry ``tie_word_embeddings``.
    """
    scale = config_value(config, "scale_decoder_outputs", None)
    if scale is not None:
        return not bool(scale)
    return config_value(config, "tie_word_embeddings", True) is False


@dataclass(frozen=True)
class T5Settings:
    """The validated T5 hyper-parameters both builders use (see :meth:`from_config`).

    >>> T5Settings.from_config({"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
    ...                         "num_heads": 4, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}).tied
    False
    """

    vocab_size: int
    d_model: int
    d_kv: int
    d_ff: int
    num_layers: int
    num_decoder_layers: int
    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    eps: float = 1e-6
    activation: str = "relu"
    gated: bool = False
    tied: bool = True
    initializer_factor: float = 1.0  # HF's: scales every initialiser's std (randomize_params)

    @property
    def inner_dim(self) -> int:
        """``num_heads * d_kv``: the width of the attention projections (need not equal ``d_model``)."""
        return self.num_heads * self.d_kv

    @classmethod
    def from_config(cls, config: Any, builder: str = "t5") -> T5Settings:
        """Read and check ``config``; a missing required field or a bad value raises an error naming it."""
        try:
            sizes = {name: _positive_int(name, config_value(config, name)) for name in _REQUIRED}
        except KeyError as exc:
            raise KeyError(f"{builder}: {exc.args[0]} (a T5 configuration needs {', '.join(_REQUIRED)})") from None
        decoder_layers = config_value(config, "num_decoder_layers", None)
        decoder_layers = (
            sizes["num_layers"] if decoder_layers is None else _positive_int("num_decoder_layers", decoder_layers)
        )
        num_buckets = _positive_int(
            "relative_attention_num_buckets", config_value(config, "relative_attention_num_buckets", 32)
        )
        max_distance = _positive_int(
            "relative_attention_max_distance", config_value(config, "relative_attention_max_distance", 128)
        )
        eps = config_value(config, "layer_norm_epsilon", 1e-6)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ValueError(f"T5 configuration: layer_norm_epsilon must be a positive number, got {eps!r}")
        activation, gated = parse_feed_forward_proj(config_value(config, "feed_forward_proj", "relu"))
        return cls(
            num_decoder_layers=decoder_layers,
            num_buckets=num_buckets,
            max_distance=max_distance,
            eps=float(eps),
            activation=activation,
            gated=gated,
            tied=not _untied(config),
            initializer_factor=float(config_value(config, "initializer_factor", 1.0)),
            **sizes,
        )
