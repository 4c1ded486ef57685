"""The options of :func:`~mithril_models.generate`: :class:`GenerationConfig`, named as ``transformers``'
``GenerationConfig``, and :func:`resolve_config`, which merges a config-like object (ours, a
``transformers.GenerationConfig``, a ``generation_config.json`` dict) with keyword arguments and checks
every value.

Example:
    >>> config = resolve_config("generate", {"eos_token_id": 2, "top_k": 50}, {"do_sample": True})
    >>> config.do_sample, config.top_k, config.eos_token_id, config.pad_token_id
    (True, 50, (2,), 2)
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mithril.extend import validation

__all__ = ["FIELDS", "GenerationConfig", "resolve_config"]


@dataclass(frozen=True)
class GenerationConfig:
    """How to generate: the fields of ``transformers.GenerationConfig`` that Mithril implements, with the
    same names and meanings.

    Attributes:
        max_new_tokens: how many tokens to generate at most (default 20).
        min_new_tokens: end-of-sequence tokens are suppressed until this many were generated.
        do_sample: sample (``True``) or pick the most likely token (``False``, the default: greedy or beam
            search, as ``transformers``).
        temperature: sampling scores are ``logits / temperature`` (> 0).
        top_k: sample among the ``top_k`` most likely tokens (``None``: no limit; ``transformers``' own
            default is 50).
        top_p: sample among the most likely tokens whose probabilities add up to ``top_p`` (nucleus).
        repetition_penalty: scores of tokens already in the sequence (prompt included) are divided by it
            (multiplied when negative), as ``transformers``' ``RepetitionPenaltyLogitsProcessor``.
        num_beams: beam search with that many beams when > 1.
        length_penalty: a finished beam's score is ``sum of log-probabilities / length ** length_penalty``.
        early_stopping: beam search stops a prompt's search once ``num_beams`` hypotheses finished
            (``True``), when no better one is likely (``False``), or only at ``max_new_tokens``
            (``"never"``).
        eos_token_id: end-of-sequence id(s): a sequence that emits one stops (the others go on).
        pad_token_id: what a stopped sequence gets in the remaining columns (default: the first
            ``eos_token_id``).
        decoder_start_token_id: the first decoder token of an encoder-decoder model (T5: 0, its pad).
        seed: seeds NumPy's generator for sampling (the same seed, the same tokens on every backend).

    >>> GenerationConfig(num_beams=4).num_beams
    4
    """

    max_new_tokens: int = 20
    min_new_tokens: int = 0
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    decoder_start_token_id: int | None = None
    seed: int | None = None

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """``eos_token_id`` as a tuple (empty without one)."""
        eos = self.eos_token_id
        return () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos)


FIELDS = tuple(f.name for f in dataclasses.fields(GenerationConfig))
"""The option names :func:`resolve_config` reads."""

_SAMPLING = {"temperature": 1.0, "top_k": None, "top_p": 1.0}


def _read(source: Any) -> dict[str, Any]:
    """The options set in ``source`` (``None`` values are unset, as in ``transformers``)."""
    if source is None:
        return {}
    if isinstance(source, Mapping):
        items = {name: source.get(name) for name in FIELDS}
    else:
        items = {name: getattr(source, name, None) for name in FIELDS}
    return {name: value for name, value in items.items() if value is not None}


def _int(where: str, name: str, value: Any, minimum: int, accepted: str | None = None) -> int:
    if not validation.is_int(value) or value < minimum:
        raise validation.fail(where, name, accepted or f"an int >= {minimum}", value)
    return int(value)


def _token_ids(where: str, name: str, value: Any) -> tuple[int, ...] | None:
    """``eos_token_id``: an id, a non-empty list of ids, or ``None``."""
    if value is None:
        return None
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items or not all(validation.is_int(i) and i >= 0 for i in items):
        raise validation.fail(where, name, "None, a token id (an int >= 0) or a non-empty list of them", value)
    return tuple(int(i) for i in items)


def _finite(where: str, name: str, value: Any) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number):
            return number
    raise validation.fail(where, name, "a finite number", value)


def _check(where: str, options: dict[str, Any]) -> dict[str, Any]:
    """Every option of :class:`GenerationConfig` checked and normalised (an :class:`ArgumentError` naming
    the first bad one, what is accepted and what was given)."""
    out = dict(options)
    out["max_new_tokens"] = _int(where, "max_new_tokens", options["max_new_tokens"], 0)
    out["min_new_tokens"] = _int(where, "min_new_tokens", options["min_new_tokens"], 0)
    out["do_sample"] = validation.boolean(where, "do_sample", options["do_sample"])
    greedy = "a number > 0 (finite; do_sample=False for greedy decoding)"
    out["temperature"] = validation.positive_finite(where, "temperature", options["temperature"], accepted=greedy)
    if options["top_k"] is not None:
        out["top_k"] = _int(where, "top_k", options["top_k"], 1, "None (the full distribution) or an int >= 1")
    top_p = options["top_p"]
    if not isinstance(top_p, numbers.Real) or isinstance(top_p, bool) or not 0.0 < float(top_p) <= 1.0:
        raise validation.fail(where, "top_p", "a number in (0, 1] (1: the full distribution)", top_p)
    out["top_p"] = float(top_p)
    out["repetition_penalty"] = validation.positive_finite(
        where, "repetition_penalty", options["repetition_penalty"], accepted="a number > 0 (finite; 1: no penalty)"
    )
    out["num_beams"] = _int(where, "num_beams", options["num_beams"], 1)
    out["length_penalty"] = _finite(where, "length_penalty", options["length_penalty"])
    stopping = options["early_stopping"]
    if stopping not in (True, False, "never") or not isinstance(stopping, (bool, str)):
        raise validation.fail(where, "early_stopping", "True, False or 'never'", stopping)
    out["eos_token_id"] = _token_ids(where, "eos_token_id", options["eos_token_id"])
    for name in ("pad_token_id", "decoder_start_token_id"):
        if options[name] is not None:
            out[name] = _int(where, name, options[name], 0, "None or a token id (an int >= 0)")
    if options["seed"] is not None:
        out["seed"] = _int(where, "seed", options["seed"], 0, "None or an int >= 0")
    if out["pad_token_id"] is None and out["eos_token_id"]:
        out["pad_token_id"] = out["eos_token_id"][0]  # as transformers (which warns)
    return out


def resolve_config(
    where: str,
    config: Any = None,
    overrides: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> GenerationConfig:
    """The options of one call: ``defaults`` (e.g. a checkpoint's ``generation_config.json``), then
    ``config`` (a :class:`GenerationConfig`, a ``transformers.GenerationConfig``, a dict or ``None``),
    then ``overrides`` (keyword arguments; ``None`` values are not given), each value checked.

    A sampling option (``temperature``, ``top_k``, ``top_p``, ``seed``) given without ``do_sample=True``
    warns: greedy decoding is the default (as in ``transformers``) and ignores them.

    >>> resolve_config("generate", None, {"num_beams": 4, "length_penalty": 0.5}).num_beams
    4
    """
    if config is not None and not isinstance(config, (GenerationConfig, Mapping)) and not hasattr(config, "do_sample"):
        raise validation.fail(
            where, "generation_config", "a GenerationConfig (Mithril's or transformers'), a dict or None", config
        )
    given = {**_read(defaults), **_read(config), **{k: v for k, v in (overrides or {}).items() if v is not None}}
    options = {f.name: f.default for f in dataclasses.fields(GenerationConfig)}
    options.update(given)
    checked = _check(where, options)
    if not checked["do_sample"]:
        ignored = [k for k in ("temperature", "top_k", "top_p", "seed") if k in given and given[k] != _SAMPLING.get(k)]
        if ignored and given.get("top_k") != 1:
            warnings.warn(
                f"{where}: {', '.join(ignored)} {'only applies' if len(ignored) == 1 else 'only apply'} when "
                "sampling; greedy decoding is the default (as in "
                "transformers): pass do_sample=True to sample",
                UserWarning,
                stacklevel=3,
            )
    return GenerationConfig(**checked)
