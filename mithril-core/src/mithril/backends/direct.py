"""Direct calls: a backend entry point that checks its own inputs lets ``evaluate`` skip its Python checks.

``PhysicalModel.evaluate`` checks every input (keys, dtype, shape) before the backend sees it, which costs
about a microsecond per input. A compiled entry point that already verifies exactly what it reads (the C
backend's: array type, dtype, C order, static shape) may expose ``entry.strict``: the same call, raising
:class:`InputsNeedChecking` instead of converting or reporting anything unexpected. ``evaluate`` calls
``strict`` first for models where those checks are the whole story (static shapes, no sharding, no index
checks, no buffers) and falls back to its own checks, which convert the input or name the problem, when it
raises. Nothing is computed or written before an entry point raises it.

Example:
    >>> def strict(params, data):
    ...     if type(data.get("x")) is not list:
    ...         raise InputsNeedChecking("x")
    ...     return {"y": data["x"] * 2}
    >>> strict({}, {"x": [1]})
    {'y': [1, 1]}
"""

from __future__ import annotations

__all__ = ["InputsNeedChecking"]


class InputsNeedChecking(Exception):
    """Raised by a strict entry point when an input is not exactly what it was compiled for (the caller then
    runs the full checks; never seen by users)."""
