"""Reading model configurations given as ``transformers`` config objects, dataclasses or plain dicts.

Example:
    >>> read_config({"d_model": 512}, "d_model", num_heads=8)
    (512, 8)
    >>> config_fields({"n_embd": 32}, {"dims": "n_embd", "bias": ("bias", True)})
    {'dims': 32, 'bias': True}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["config_fields", "config_value", "read_config"]

_MISSING: Any = object()


def config_value(config: Any, name: str, default: Any = _MISSING) -> Any:
    """``config.name`` or ``config[name]``; ``default`` when absent (a clear error when there is none)."""
    if isinstance(config, Mapping):
        if name in config:
            return config[name]
    elif hasattr(config, name):
        return getattr(config, name)
    if default is _MISSING:
        kind = "dict" if isinstance(config, Mapping) else type(config).__name__
        raise KeyError(f"model configuration ({kind}) has no field {name!r}")
    return default


def read_config(config: Any, *names: str, **defaults: Any) -> tuple[Any, ...]:
    """Several fields at once: required ``names`` in order, then the fields of ``defaults`` in order."""
    return tuple(config_value(config, n) for n in names) + tuple(
        config_value(config, n, d) for n, d in defaults.items()
    )


def config_fields(config: Any, fields: Mapping[str, str | tuple[str, Any]]) -> dict[str, Any]:
    """Our field name -> its value in ``config``, read under the name ``fields`` gives it there (or a pair: that
    name and the default when it is absent), in the order of ``fields``."""
    return {
        ours: config_value(config, *theirs) if isinstance(theirs, tuple) else config_value(config, theirs)
        for ours, theirs in fields.items()
    }
