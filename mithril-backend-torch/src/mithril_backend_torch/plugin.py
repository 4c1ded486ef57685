"""Entry point of the PyTorch backend (``[project.entry-points.mithril] torch``).

Registration uses lazy string targets, so loading this plugin imports nothing heavy (not even torch):
the backend class and the op table are imported the first time the ``torch`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "torch" in registry().backends
    True
"""

from __future__ import annotations

from collections.abc import Callable

from mithril.plugins import hookimpl

__all__ = ["mithril_register_backends", "mithril_register_impls"]


@hookimpl
def mithril_register_backends(register: Callable[..., None]) -> None:
    """Register :class:`~mithril_backend_torch.backend.TorchBackend` as ``torch``."""
    register("torch", "mithril_backend_torch.backend:TorchBackend", aliases=("TorchBackend",))


@hookimpl
def mithril_register_impls(register: Callable[..., None]) -> None:
    """Register the op table (one function per primitive) for the ``torch`` backend."""
    register("torch", "mithril_backend_torch.ops:TABLE")
