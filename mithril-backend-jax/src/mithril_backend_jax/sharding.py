"""Placing arrays over a ``jax.sharding.Mesh`` (GSPMD): the JAX side of :mod:`mithril.parallel`.

A spec names, per dimension, the mesh axis that splits it (``"mesh_0"``) or ``None``; it becomes a
``NamedSharding(mesh, PartitionSpec(*spec))``. ``jax.jit`` follows the shardings of its arguments, so a
compiled model placed this way runs partitioned, with the collectives XLA inserts.

Multi-process (``jax.distributed.initialize``): a mesh spans devices of other processes; arrays are
built from the global value every process holds (``jax.make_array_from_callback``), and :func:`gather`
collects a global array on every process.

Example:
    >>> import jax, numpy as np
    >>> from jax.sharding import Mesh
    >>> mesh = Mesh(np.array(jax.devices()[:1]), ("mesh_0",))
    >>> tuple(place(mesh, np.ones((2, 3), np.float32), ("mesh_0", None)).sharding.spec)
    ('mesh_0', None)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from mithril.errors import ArgumentError

__all__ = ["gather", "place"]


def place(mesh: Mesh, array: Any, spec: Sequence[str | None] | None) -> jax.Array:
    """``array`` (a ``jax.Array`` or NumPy data) placed over ``mesh`` with ``spec``.

    An array already placed that way is returned as it is (no copy); one on this mesh is resharded,
    one on a single device is moved, and one on another mesh is refused.
    """
    target = NamedSharding(mesh, PartitionSpec(*(spec or ())))  # type: ignore[no-untyped-call]  # P.__new__ unannotated
    current = getattr(array, "sharding", None)
    if current is not None and current.is_equivalent_to(target, np.ndim(array)):
        return cast(jax.Array, array)  # it has a sharding: a jax.Array
    if isinstance(current, NamedSharding) and current.mesh.shape_tuple != mesh.shape_tuple:
        raise ArgumentError(
            f"JaxBackend: an array placed on the mesh {dict(current.mesh.shape)} cannot be used with this backend's "
            f"mesh {dict(mesh.shape)}; arrays of one model live on one mesh (create them with this backend)"
        )
    if target.is_fully_addressable:
        return cast(jax.Array, jax.device_put(array, target))
    # a mesh over other processes' devices too: every process holds the global value; each builds its
    # own shards from it
    host = gather(array) if isinstance(array, jax.Array) else np.asarray(array)
    return jax.make_array_from_callback(host.shape, target, lambda index: host[index])


def gather(array: Any) -> np.ndarray:
    """The whole (global) value of ``array`` as NumPy, on every process."""
    if isinstance(array, jax.Array) and not array.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(array, tiled=True))
    return np.asarray(jax.device_get(array))
