"""The GGML backend's capability table: which primitives run as native ggml ops, which as ggml custom
ops with NumPy kernels, and which are missing (declared gaps; compiling a model that needs one raises
:class:`~mithril.errors.UnsupportedPrimitiveError`).

Example:
    >>> from mithril_backend_ggml.capabilities import capability_table
    >>> capability_table()["linear"]
    'native'
"""

from __future__ import annotations

__all__ = ["UNSUPPORTED", "capability_table"]

UNSUPPORTED: frozenset[str] = frozenset()
"""Core primitives the backend lacks."""


def capability_table() -> dict[str, str]:
    """Every registered primitive -> ``"native"`` (ggml ops, with custom-op fallback for the cases
    listed in the README), ``"custom op"`` (NumPy kernel inside the graph) or ``"unsupported"``."""
    from mithril.plugins import registry

    from .ops import BUILDERS, NATIVE

    return {
        name: "native" if name in NATIVE else ("custom op" if name in BUILDERS else "unsupported")
        for name in sorted(registry().primitives)
    }
