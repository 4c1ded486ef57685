"""Rotary position embeddings of Llama-style decoders: the inverse frequencies of each ``rope_type``.

The rotation angle of position ``p`` in frequency ``i`` is ``p * inv_freq[i]``; ``cos`` and ``sin`` of the
angles (each frequency used twice, for the two halves of a head) are multiplied by ``attention_scaling``
(1 except for ``"yarn"``). The types are those ``transformers`` documents for Llama
(``transformers.modeling_rope_utils``), computed here in float32 as it does:

- ``"default"``: ``inv_freq[i] = 1 / theta ** (2 i / head_dim)``;
- ``"linear"``: the default frequencies divided by ``factor`` (positions interpolated);
- ``"dynamic"`` (NTK): the default frequencies for sequences up to ``max_position_embeddings``; longer
  sequences (where the base would grow with the length) are refused by the generation code;
- ``"llama3"``: Llama 3.1's smoothing between ``factor``-scaled low frequencies and unscaled high ones
  (``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``);
- ``"yarn"``: YaRN's blend of interpolated and extrapolated frequencies (``beta_fast``, ``beta_slow``,
  ``original_max_position_embeddings``, ``truncate``) with its attention factor (``attention_factor`` or
  from ``mscale``/``mscale_all_dim``).

Example:
    >>> inv_freq, scaling = rope_frequencies(8, 10000.0, None, 2048)
    >>> inv_freq.shape, inv_freq.dtype.name, scaling
    ((4,), 'float32', 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["ROPE_TYPES", "check_rope_scaling", "rope_frequencies"]

ROPE_TYPES: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor",),
}
"""Supported ``rope_type`` -> the keys its ``rope_scaling`` dict must hold."""

_OPTIONAL: dict[str, tuple[str, ...]] = {
    "yarn": (
        "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
        "truncate",
    ),
}  # fmt: skip
_IGNORED = ("rope_type", "type", "rope_theta", "partial_rotary_factor")


def check_rope_scaling(scaling: Any) -> dict[str, Any] | None:
    """``scaling`` (``None`` or a ``rope_scaling``/``rope_parameters`` dict) checked and normalised: ``None``
    for the default rotation, otherwise a dict with ``rope_type`` and its parameters.

    >>> check_rope_scaling({"type": "linear", "factor": 2.0})
    {'rope_type': 'linear', 'factor': 2.0}
    >>> check_rope_scaling({"rope_type": "longrope", "factor": 2.0})
    Traceback (most recent call last):
    ...
    ValueError: Llama: rope_type 'longrope' is not supported; supported: default, linear, dynamic, llama3, yarn
    """
    if scaling is None:
        return None
    if not isinstance(scaling, Mapping):
        raise ValueError(f"Llama: rope_scaling must be None or a dict with 'rope_type', got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"Llama: rope_type {kind!r} is not supported; supported: {', '.join(ROPE_TYPES)}")
    partial = scaling.get("partial_rotary_factor", 1.0)
    if partial not in (None, 1, 1.0):
        raise ValueError(f"Llama: partial_rotary_factor={partial!r} is not supported (only 1.0)")
    if kind == "default":
        return None
    missing = [key for key in ROPE_TYPES[kind] if scaling.get(key) is None]
    if missing:
        raise ValueError(f"Llama: rope_scaling of type {kind!r} needs {', '.join(missing)}; got {dict(scaling)!r}")
    known = set(ROPE_TYPES[kind]) | set(_OPTIONAL.get(kind, ())) | set(_IGNORED)
    result: dict[str, Any] = {"rope_type": kind}
    for key, value in scaling.items():
        if key in _IGNORED:
            continue
        if key not in known:
            raise ValueError(
                f"Llama: rope_scaling key {key!r} is not used by rope_type {kind!r}; "
                f"expected {sorted(known - set(_IGNORED))}"
            )
        result[key] = value
    factor = result.get("factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0):
        raise ValueError(f"Llama: rope_scaling factor must be a positive number, got {factor!r}")
    if kind in ("linear", "dynamic") and factor is not None and factor < 1:
        raise ValueError(f"Llama: rope_scaling factor of type {kind!r} must be >= 1, got {factor!r}")
    return result


def _default(head_dim: int, theta: float) -> np.ndarray:
    exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)


def _llama3(inv_freq: np.ndarray, scaling: Mapping[str, Any]) -> np.ndarray:
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    context = float(scaling["original_max_position_embeddings"])
    low_wavelen, high_wavelen = context / low, context / high
    wavelen = (2 * math.pi / inv_freq).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(factor), inv_freq).astype(np.float32)
    smooth = ((context / wavelen - low) / (high - low)).astype(np.float32)
    smoothed = ((1 - smooth) * scaled / np.float32(factor) + smooth * scaled).astype(np.float32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn(head_dim: int, theta: float, scaling: Mapping[str, Any], max_positions: int) -> tuple[np.ndarray, float]:
    factor = float(scaling["factor"])
    original = scaling.get("original_max_position_embeddings") or max_positions
    attention = scaling.get("attention_factor")
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")

    def magnitude(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention is None:
        attention = (
            magnitude(factor, mscale) / magnitude(factor, mscale_all_dim)
            if mscale and mscale_all_dim
            else magnitude(factor)
        )
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (head_dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = (np.float32(theta) ** (np.arange(0, head_dim, 2).astype(np.float32) / np.float32(head_dim))).astype(
        np.float32
    )
    extrapolation, interpolation = np.float32(1.0) / pos_freqs, np.float32(1.0) / (np.float32(factor) * pos_freqs)
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float32) - low) / (high - low), 0, 1).astype(np.float32)
    keep = (1 - ramp).astype(np.float32)
    return (interpolation * (1 - keep) + extrapolation * keep).astype(np.float32), float(attention)


def rope_frequencies(
    head_dim: int, theta: float, scaling: Mapping[str, Any] | None, max_positions: int
) -> tuple[np.ndarray, float]:
    """``(inv_freq [head_dim // 2] float32, attention_scaling)`` for a head of ``head_dim`` (see the module).

    >>> inv, _ = rope_frequencies(4, 10000.0, {"rope_type": "linear", "factor": 2.0}, 2048)
    >>> [round(float(f), 4) for f in inv]
    [0.5, 0.005]
    """
    if scaling is None:
        return _default(head_dim, theta), 1.0
    kind = scaling["rope_type"]
    if kind == "yarn":
        return _yarn(head_dim, theta, scaling, max_positions)
    inv_freq = _default(head_dim, theta)
    if kind == "linear":
        inv_freq = (inv_freq / np.float32(scaling["factor"])).astype(np.float32)
    elif kind == "llama3":
        inv_freq = _llama3(inv_freq, scaling)
    return inv_freq, 1.0
