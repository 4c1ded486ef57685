"""Deprecated names: this project's earlier spellings of things Mithril names differently.

Mithril's name is the canonical one; the old name keeps working and points at the same implementation, with a
:class:`DeprecationWarning` naming the canonical name. ``docs/seed-compatibility.md`` ("Deprecated names")
lists them all.

Example:
    >>> import warnings
    >>> from mithril.deprecation import warn_deprecated
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_deprecated("Divide key 'left'", "'numerator'")
    >>> str(caught[0].message)
    "Divide key 'left' is deprecated; use 'numerator' (Mithril's name)"
"""

from __future__ import annotations

import warnings

__all__ = ["warn_deprecated"]


def warn_deprecated(old: str, canonical: str, *, stacklevel: int = 3, mithrils: bool = True) -> None:
    """Warn that ``old`` is a deprecated alias of ``canonical``; ``mithrils=False`` when the name to use is this
    project's (Mithril took the old name for another model: ``RNNCell(hidden_size)`` -> ``TorchRNNCell``)."""
    suffix = " (Mithril's name)" if mithrils else ""
    warnings.warn(f"{old} is deprecated; use {canonical}{suffix}", DeprecationWarning, stacklevel=stacklevel)
