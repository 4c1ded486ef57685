"""Mithril's PyTorch backend. ``TorchBackend`` is imported on first access, so loading the plugin
(``mithril_backend_torch.plugin``) does not import torch.

Example:
    >>> from mithril_backend_torch import TorchBackend
    >>> TorchBackend().array([1.0, 2.0]).dtype
    torch.float32
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mithril.extend import lazy_exports

if TYPE_CHECKING:
    from .backend import TorchBackend

__all__ = ["TorchBackend"]


__getattr__ = lazy_exports(__name__, {"TorchBackend": "mithril_backend_torch.backend:TorchBackend"})
