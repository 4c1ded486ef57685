"""Parameter names in files: the separator of long names.

Long names (``ml.compile(..., use_short_namings=False)``) are block paths joined with ``.``
(``transformer.h.0.attn.c_attn.weight``, the layout of PyTorch state dicts). Files written by code that
joins them with ``_`` (``transformer_h_0_attn_c_attn_weight``, Mithril's published API's spelling) load too:
a file key that is not a name of the model matches the name that is equal to it once every ``.`` is read
as ``_``, when exactly one name does.

Example:
    >>> match_separators({"linear_0_weight": 1, "bias": 2}, {"linear_0.weight", "bias"})
    {'linear_0.weight': 1, 'bias': 2}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["match_separators"]


def match_separators(arrays: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """``arrays`` with each key that is not in ``names`` renamed to the one name it equals with ``_`` for
    ``.`` (keys that match nothing or several names are kept as they are, for the caller's checks)."""
    names = set(names)
    by_underscores: dict[str, list[str]] = {}
    for name in names:
        by_underscores.setdefault(name.replace(".", "_"), []).append(name)
    result: dict[str, Any] = {}
    for key, value in arrays.items():
        candidates = by_underscores.get(key.replace(".", "_"), []) if key not in names else [key]
        target = candidates[0] if len(candidates) == 1 and candidates[0] not in arrays else key
        result[target] = value
    return result
