"""Entry point of the MLX backend (``[project.entry-points.mithril] mlx``).

Registration uses lazy string targets, so loading this plugin imports neither ``mlx`` nor the op table:
both are imported the first time the ``mlx`` backend is used.

Example:
    >>> from mithril.plugins import registry
    >>> "mlx" in registry().backends
    True
"""

from __future__ import annotations

from collections.abc import Callable

from mithril.plugins import hookimpl

__all__ = ["mithril_register_backends", "mithril_register_impls"]


@hookimpl
def mithril_register_backends(register: Callable[..., None]) -> None:
    """Register :class:`~mithril_backend_mlx.backend.MlxBackend` as ``mlx`` (aliases ``MlxBackend``, ``MLXBackend``)."""
    register("mlx", "mithril_backend_mlx.backend:MlxBackend", aliases=("MlxBackend", "MLXBackend"))


@hookimpl
def mithril_register_impls(register: Callable[..., None]) -> None:
    """Register the op table (one function per primitive) for the ``mlx`` backend."""
    register("mlx", "mithril_backend_mlx.ops:TABLE")
