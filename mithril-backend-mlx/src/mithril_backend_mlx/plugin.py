"""Entry point of the MLX backend (``[project.entry-points.mithril] mlx``).

Registration uses lazy string targets, so loading this plugin imports neither ``mlx`` nor the op table:
both are imported the first time the ``mlx`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "mlx" in registry().backends
    True
"""

from __future__ import annotations

from mithril.extend import backend_plugin

__all__ = ["mithril_register_backends", "mithril_register_impls"]

mithril_register_backends, mithril_register_impls = backend_plugin(
    "mlx",
    backend="mithril_backend_mlx.backend:MlxBackend",
    ops="mithril_backend_mlx.ops:TABLE",
    aliases=("MlxBackend", "MLXBackend"),
)
