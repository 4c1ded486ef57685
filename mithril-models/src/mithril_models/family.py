"""``FamilyModel``: the logical model a builder returns, carrying its configuration and its checkpoint layouts.

A family (ResNet, GPT-2, CLIP, T5) subclasses it, builds its graph in :meth:`FamilyModel._build` (or in
its own ``__init__``, after ``super().__init__``; or names the function that builds it in
:attr:`FamilyModel.builder`) and says in :meth:`FamilyModel.checkpoint_layouts` (or :attr:`FamilyModel.layouts`)
how each published checkpoint format names its tensors. Child blocks are named after the modules of the most
common checkpoint (``transformer.h.0.attn.c_attn``), so ``ml.compile(..., use_short_namings=False)`` gives
parameter names a PyTorch user already knows.

Example:
    >>> from mithril_models import create_gpt
    >>> gpt = create_gpt(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)
    >>> gpt.family, isinstance(gpt, FamilyModel)
    ('gpt2', True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Generic, TypeVar

from mithril.models import Model

from .checkpoints.layout import Layout

__all__ = ["FamilyModel", "find_family_models"]

ConfigT = TypeVar("ConfigT")


class FamilyModel(Model, Generic[ConfigT]):
    """A model of a known family: ``config`` holds the builder's arguments (or the ``transformers`` config).

    The type parameter is the config's class, so ``class GPT(FamilyModel[GPTConfig])`` is constructed as
    ``GPT(config: GPTConfig)`` and its ``self.config`` is a ``GPTConfig``, with no ``__init__`` of its own.
    """

    config: ConfigT

    family: ClassVar[str] = ""
    """Short family name (``"resnet"``, ``"gpt2"``, ``"clip"``, ``"t5"``)."""
    config_type: ClassVar[type] = object
    """The class ``config`` must be (``object``: any); another is refused with a ``TypeError`` naming
    :attr:`made_by`."""
    made_by: ClassVar[str] = ""
    """What makes a ``config`` of the right class (``"create_gpt(...) or from_hf_config(...)"``)."""
    builder: ClassVar[Callable[..., None] | None] = None
    """The function that adds the family's graph to an empty model, ``builder(model, config)`` (a decode step
    calls ``builder(model, config, step)``), as ``staticmethod(build_gpt)``; ``None``: :meth:`_build` builds."""
    layouts: ClassVar[tuple[Callable[[Any], Layout], ...]] = ()
    """The functions that make the family's checkpoint layouts from ``config`` (``(hf_layout,)``), which the
    default :meth:`checkpoint_layouts` returns."""

    def __init__(self, config: ConfigT, *, name: str | None = None) -> None:
        if not isinstance(config, self.config_type):
            raise TypeError(
                f"{type(self).__name__} needs a {self.config_type.__name__}, got {type(config).__name__}; "
                f"use {self.made_by}"
            )
        super().__init__(name=name)
        self.config = config
        self._build()

    def _build(self) -> None:
        """Build the graph from ``self.config``; called once by ``__init__`` (the default calls :attr:`builder`,
        or builds nothing without one)."""
        if self.builder is not None:
            self.builder(self, self.config)

    def checkpoint_layouts(self) -> list[Layout]:
        """Every checkpoint naming convention this model loads from, paths relative to this model (the
        default: one from each of :attr:`layouts`)."""
        if not self.layouts:
            raise NotImplementedError(f"{type(self).__name__} declares no checkpoint layouts")
        return [layout(self.config) for layout in self.layouts]


def find_family_models(model: Model, prefix: str = "") -> Iterator[tuple[str, FamilyModel[Any]]]:
    """``(path prefix, model)`` for the outermost family models in ``model``'s tree (``model`` itself first)."""
    if isinstance(model, FamilyModel):
        yield prefix, model
        return
    for name, child in model._children:
        yield from find_family_models(child, f"{prefix}{name}.")
