"""Name -> backend class / model builder, with errors that name the package to install."""

from __future__ import annotations

from typing import Any

from ..errors import BackendAttributeError, BackendNotAvailableError, MissingAttributeError
from ..primitives.registry import resolve_target
from .manager import manager

__all__ = ["KNOWN_BACKENDS", "KNOWN_MODELS", "available_backends", "backend_class", "model_builder"]

# Backends Mithril publishes: attribute name -> (registry name, distribution, extra)
KNOWN_BACKENDS: dict[str, tuple[str, str, str]] = {
    "NumpyBackend": ("numpy", "mithril-backend-numpy", "numpy"),
    "JaxBackend": ("jax", "mithril-backend-jax", "jax"),
    "TorchBackend": ("torch", "mithril-backend-torch", "torch"),
    "MlxBackend": ("mlx", "mithril-backend-mlx", "mlx"),
    "MLXBackend": ("mlx", "mithril-backend-mlx", "mlx"),
    "CBackend": ("c", "mithril-backend-c", "c"),
    "GGMLBackend": ("ggml", "mithril-backend-ggml", "ggml"),
}


def backend_class(name: str) -> type:
    """The backend class registered under ``name`` or one of its aliases (``"numpy"``, ``"NumpyBackend"``)."""
    pm = manager()
    registered = pm.registry.backend_name(name)
    if registered is not None:
        entry = pm.registry.backends[registered]
        try:
            return entry.load()
        except Exception as exc:
            raise BackendNotAvailableError(
                f"backend {name!r} from plugin {entry.plugin!r} failed to import: {type(exc).__name__}: {exc}"
            ) from exc
    if name not in KNOWN_BACKENDS:
        raise BackendAttributeError(
            f"no backend named {name!r}; available backends: {', '.join(available_backends()) or 'none'}"
        )
    registry_name, dist, extra = KNOWN_BACKENDS[name]
    broken = pm.broken_for(registry_name)
    cause = broken.describe() if broken else f"the package {dist} is not installed"
    raise BackendNotAvailableError(
        f"{name} is not available: {cause}. Install it with: pip install \"mithril-core[{extra}]\" "
        f"(or pip install {dist}). Available backends: {', '.join(available_backends()) or 'none'}"
    )


def available_backends() -> list[str]:
    return sorted(manager().registry.backends)


KNOWN_MODELS: frozenset[str] = frozenset(
    {
        "resnet18",
        "resnet34",
        "resnet50",
        "resnet101",
        "resnet152",
        "create_gpt",
        "clip",
        "encode_image",
        "encode_text",
        "t5_encode",
        "t5_decode",
    }
)
"""Builders the mithril-models package provides (asking for one without it names the package to install)."""


def model_builder(name: str) -> Any:
    """A registered model builder (``resnet18``). A builder mithril-models provides raises
    :class:`BackendNotAvailableError` (an ``ImportError``, so ``from mithril.models import resnet18`` shows
    it) naming ``pip install "mithril-core[models]"`` when that package is missing; other names raise
    ``AttributeError``."""
    pm = manager()
    if name in pm.registry.models:
        return resolve_target(pm.registry.models[name])
    broken = pm.broken_for("models")
    if broken:
        hint = broken.describe()
    elif "models" in pm.disabled:
        hint = "the models plugin is disabled by MITHRIL_DISABLE_PLUGINS"
    else:
        hint = "the package mithril-models is not installed"
    message = (
        f"mithril.models has no model {name!r}: {hint}. Install it with: pip install \"mithril-core[models]\" "
        f"(registered builders: {', '.join(sorted(pm.registry.models)) or 'none'})"
    )
    if name in KNOWN_MODELS:
        raise BackendNotAvailableError(message)
    raise MissingAttributeError(message)
