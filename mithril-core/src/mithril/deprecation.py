"""Deprecated names: this project's earlier spellings of things Mithril names differently, in one table.

Mithril's name is the canonical one; the old name keeps working and points at the same implementation, with a
:class:`DeprecationWarning` naming the canonical name. :data:`DEPRECATED_NAMES` is the one table of deprecated
module attributes (``mithril.models.Abs`` -> ``Absolute``); the modules that publish them resolve them through
:func:`deprecated_attribute` in their ``__getattr__``, so no alias is in any ``__all__``. Deprecated keys and
arguments (``Power(left=)``) warn where they are accepted. ``docs/seed-compatibility.md`` ("Deprecated names")
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

import importlib
import warnings
from typing import Any

__all__ = ["DEPRECATED_NAMES", "deprecated_attribute", "warn_deprecated"]

DEPRECATED_NAMES: dict[str, dict[str, str]] = {
    "mithril.models": {
        "Abs": "Absolute", "Cos": "Cosine", "Exp": "Exponential", "Index": "Indexer", "Matmul": "MatrixMultiply",
        "Neg": "Negate", "Sin": "Sine", "Var": "Variance", "ScaledDotProductAttention": "ScaledDotProduct",
        "Silu": "SiLU", "MaxPool2d": "MaxPool2D", "AvgPool2d": "AvgPool2D", "LogicalModel": "Model",
        "Operator": "Primitive",
    },
    "mithril.errors": {
        "KeyError_": "ModelKeyError", "ConnectionError_": "ModelConnectionError",
        "AttributeError_": "MissingAttributeError",
    },
}  # fmt: skip
"""Module -> {deprecated attribute: canonical attribute of the same module}."""

_OURS = frozenset({"Primitive", "ModelKeyError", "ModelConnectionError", "MissingAttributeError"})
"""Canonical names above that are this project's, not Mithril's (Mithril has no such name, or, for ``Operator``, a
base class of another shape)."""


def warn_deprecated(old: str, canonical: str, *, stacklevel: int = 3, mithrils: bool = True) -> None:
    """Warn that ``old`` is a deprecated alias of ``canonical``; ``mithrils=False`` when the name to use is this
    project's (Mithril took the old name for another model: ``RNNCell(hidden_size)`` -> ``TorchRNNCell``)."""
    suffix = " (Mithril's name)" if mithrils else ""
    warnings.warn(f"{old} is deprecated; use {canonical}{suffix}", DeprecationWarning, stacklevel=stacklevel)


def deprecated_attribute(module: str, name: str) -> Any:
    """The canonical object a deprecated ``module.name`` stands for, after a :class:`DeprecationWarning`; ``None``
    when ``name`` is not a deprecated name of ``module`` (the caller goes on with its lookup).

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     deprecated_attribute("mithril.models", "Abs").__name__
    'Absolute'
    """
    canonical = DEPRECATED_NAMES.get(module, {}).get(name)
    if canonical is None:
        return None
    warn_deprecated(f"{module}.{name}", f"{module}.{canonical}", stacklevel=4, mithrils=canonical not in _OURS)
    return getattr(importlib.import_module(module), canonical)
