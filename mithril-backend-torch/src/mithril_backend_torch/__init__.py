"""Mithril's PyTorch backend. ``TorchBackend`` is imported on first access, so loading the plugin
(``mithril_backend_torch.plugin``) does not import torch.

Example:
    >>> from mithril_backend_torch import TorchBackend
    >>> TorchBackend().array([1.0, 2.0]).dtype
    torch.float32
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mithril.errors import AttributeError_

if TYPE_CHECKING:
    from .backend import TorchBackend

__all__ = ["TorchBackend"]


def __getattr__(name: str) -> Any:
    if name == "TorchBackend":
        from .backend import TorchBackend

        return TorchBackend
    raise AttributeError_(f"module {__name__!r} has no attribute {name!r}")
