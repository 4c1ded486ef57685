"""Errors raised by Mithril. Every message names what was expected, what was given and where."""

from __future__ import annotations

from .deprecation import deprecated_attribute

__all__ = [
    "ArgumentError",
    "BackendAttributeError",
    "BackendNotAvailableError",
    "CheckpointError",
    "DtypeError",
    "IndexRangeError",
    "MissingAttributeError",
    "MithrilError",
    "ModelConnectionError",
    "ModelKeyError",
    "PluginError",
    "ShapeError",
    "UnsupportedPrimitiveError",
]


class MithrilError(Exception):
    """Base class of all Mithril errors."""


class ShapeError(MithrilError, ValueError):
    """Two shapes that must agree do not; the message names the model path, the keys and both shapes."""


class DtypeError(MithrilError, TypeError):
    """A value has the wrong kind or dtype (e.g. float indices for ``Embedding``)."""


class ModelKeyError(MithrilError, KeyError):
    """A key that does not exist, or a required key that is missing.

    ``KeyError`` quotes its message with ``repr``; we override ``__str__`` so the text stays readable.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ModelConnectionError(MithrilError, ValueError):
    """An invalid connection between models (two producers for one key, unknown key, re-used model)."""


class BackendNotAvailableError(MithrilError, ImportError):
    """A backend (or model builder) was requested whose plugin is not installed or failed to load
    (``from mithril.backends import JaxBackend``)."""


class MissingAttributeError(MithrilError, AttributeError):
    """An attribute or key a Mithril object does not have (``model.nonexistent``); an ``AttributeError``, so
    ``hasattr`` and ``getattr(obj, name, default)`` keep working."""


class BackendAttributeError(MissingAttributeError):
    """The same failure met through attribute access (``ml.JaxBackend``), so ``hasattr`` stays usable."""


class UnsupportedPrimitiveError(MithrilError, NotImplementedError):
    """A compiled model needs a primitive (or its gradient) that the chosen backend does not provide."""


class ArgumentError(MithrilError, ValueError, TypeError):
    """A block, primitive or function was given an invalid argument (``stride=0``, ``Linear(dimension="4")``);
    the message names the argument, what is accepted and what was given."""


class CheckpointError(MithrilError, ValueError):
    """A parameter or checkpoint file that cannot be read (missing, truncated, corrupt, pickle-based) or does
    not fit the model (missing, unexpected or mis-shaped tensors); the message names the path and every problem."""


class IndexRangeError(MithrilError, IndexError):
    """An integer index (token id, class target, gather index) outside the range of what it indexes; the
    message names the key, the bad value, its position and the valid range."""


class PluginError(MithrilError, RuntimeError):
    """A plugin registered something invalid (duplicate name, bad signature)."""


def __getattr__(name: str) -> type[MithrilError]:
    """The deprecated names ``KeyError_``, ``ConnectionError_``, ``AttributeError_`` (``mithril.deprecation``)."""
    found = deprecated_attribute(__name__, name)
    if found is None:
        raise MissingAttributeError(f"module 'mithril.errors' has no attribute {name!r}")
    return found  # type: ignore[no-any-return]
