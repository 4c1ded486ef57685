"""Entry point of the PyTorch backend (``[project.entry-points.mithril] torch``).

Registration uses lazy string targets, so loading this plugin imports nothing heavy (not even torch):
the backend class and the op table are imported the first time the ``torch`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "torch" in registry().backends
    True
"""

from __future__ import annotations

from mithril.extend import backend_plugin

__all__ = ["mithril_register_backends", "mithril_register_impls"]

mithril_register_backends, mithril_register_impls = backend_plugin(
    "torch",
    backend="mithril_backend_torch.backend:TorchBackend",
    ops="mithril_backend_torch.ops:TABLE",
    aliases=("TorchBackend",),
)
