"""Entry point of mithril-models (``[project.entry-points.mithril] models``).

Builders are registered as lazy ``"module:attr"`` strings, so loading the plugin imports nothing: the
family module is imported the first time ``from mithril.models import resnet18`` asks for it.

Example:
    >>> from mithril.plugins import registry
    >>> "create_gpt" in registry().models
    True
"""

from __future__ import annotations

from collections.abc import Callable

from mithril.extend import hookimpl

__all__ = ["BUILDERS", "mithril_register_demos", "mithril_register_models"]

BUILDERS: dict[str, str] = {
    **{f"resnet{depth}": f"mithril_models.resnet:resnet{depth}" for depth in (18, 34, 50, 101, 152)},
    "create_gpt": "mithril_models.gpt:create_gpt",
    "clip": "mithril_models.clip_family:clip",
    "encode_image": "mithril_models.clip_family:encode_image",
    "encode_text": "mithril_models.clip_family:encode_text",
    "t5_encode": "mithril_models.t5:t5_encode",
    "t5_decode": "mithril_models.t5:t5_decode",
    "export_program": "mithril_models.export:export_program",
    "create_llama": "mithril_models.llama:create_llama",
}
"""Registered builder name -> where it lives."""


@hookimpl
def mithril_register_models(register: Callable[..., None]) -> None:
    """Register every builder of :data:`BUILDERS` (``from mithril.models import resnet18``)."""
    for name, target in BUILDERS.items():
        register(name, target)


@hookimpl
def mithril_register_demos(register: Callable[..., None]) -> None:
    """Add the models section (GPT-2 and ResNet checkpoints on every backend) to ``mithril demo``."""
    register("models", "mithril_models.demo:run")
