"""Device meshes on ``torch.distributed``: the PyTorch side of :mod:`mithril.parallel`.

``TorchBackend(device_mesh=(2,))`` inside a ``torch.distributed`` job (``torchrun --nproc_per_node 2``,
or the ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` variables it sets) builds a
``DeviceMesh`` with ``init_device_mesh`` (gloo on ``cpu``, nccl on ``cuda``), axes ``mesh_0``,
``mesh_1``, ... Arrays are placed as DTensors: a spec's mesh axis becomes ``Shard(dim)`` on that mesh
dimension, everything else ``Replicate()``; DTensor's sharding propagation runs every op and inserts the
collectives (the all-reduce of data-parallel gradients, the reductions of row-parallel layers).

Exit. The mesh runs on process groups of its own (a 1-D mesh on a ``new_group`` of every process, not on
the default group, which ``torch.distributed`` itself keeps alive until the interpreter is torn down). An
``atexit`` hook destroys them, and the default group when this module initialised it, while the interpreter
still runs: their gloo threads are joined, so none of them still finishes a collective (dropping the last
reference to a tensor, which needs the GIL) once Python has begun to finalise; that aborted the process
(``terminate called without an active exception``). A user's own ``destroy_process_group()`` before exit
is fine too.

Example (in a 2-process job):
    >>> backend = ml.TorchBackend(device_mesh=(2,))                            # doctest: +SKIP
    >>> x = backend.ones(8, 4, device_mesh=(2,), tensor_split=(0,))            # doctest: +SKIP
    >>> x.to_local().shape                                                      # doctest: +SKIP
    torch.Size([4, 4])
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.distributed as dist
from mithril.errors import ArgumentError
from mithril.extend import mesh_axis_names

__all__ = ["build_mesh", "full_tensor", "is_distributed", "like", "place", "replicated_like", "replication"]


def is_distributed(array: Any) -> bool:
    """Whether ``array`` is a DTensor (placed over a device mesh)."""
    from torch.distributed.tensor import DTensor

    return isinstance(array, DTensor)


def build_mesh(sizes: tuple[int, ...], device: str) -> Any:
    """The ``DeviceMesh`` of ``sizes`` over the processes of this ``torch.distributed`` job (initialised
    here from torchrun's environment variables when it is not yet)."""
    needed = math.prod(sizes)
    device_type = str(device).split(":")[0]
    if not dist.is_available():
        raise ArgumentError("TorchBackend(device_mesh=...): this torch build has no torch.distributed")
    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
            raise ArgumentError(
                f"TorchBackend(device_mesh={sizes}) needs {needed} processes of a torch.distributed job, but this "
                "process is not part of one (1 process, no RANK/WORLD_SIZE set). Launch it with "
                f"`torchrun --nproc_per_node {needed} script.py` (one process per device; gloo on CPU, nccl on CUDA)"
            )
        _release_meshes()  # the user destroyed their groups: let them go before new ones are made
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
        _OWNED["default_group"] = True
    world = dist.get_world_size()
    if world != needed:
        raise ArgumentError(
            f"TorchBackend: device_mesh={sizes} needs {needed} processes, but this torch.distributed job has "
            f"{world}; launch it with `torchrun --nproc_per_node {needed}` or use a mesh of {world} devices"
        )
    key = (sizes, device_type)
    mesh = _OWNED["meshes"].get(key)
    if mesh is not None and _usable(mesh):
        return mesh
    if mesh is not None:  # its groups were destroyed by the user: let their threads go
        _destroy(_take_groups(mesh))
    if not _OWNED["hook"]:
        atexit.register(release_at_exit)
        _OWNED["hook"] = True
    mesh = _OWNED["meshes"][key] = _new_mesh(sizes, device_type, world)
    return mesh


_OWNED: dict[str, Any] = {"meshes": {}, "default_group": False, "hook": False}
"""The meshes :func:`build_mesh` made (one per sizes and device type, shared by the backends that ask for
it), and whether it initialised the default process group."""


def _new_mesh(sizes: tuple[int, ...], device_type: str, world: int) -> Any:
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    names = mesh_axis_names(len(sizes))
    if len(sizes) == 1:  # init_device_mesh would use the default group, which torch itself keeps alive
        return DeviceMesh.from_group(dist.new_group(list(range(world))), device_type, mesh_dim_names=names)
    return init_device_mesh(device_type, sizes, mesh_dim_names=names)  # a new group per mesh axis


def _usable(mesh: Any) -> bool:
    """Whether ``mesh``'s process groups still exist (a user's ``destroy_process_group()`` ends them)."""
    try:
        return dist.is_initialized() and all(mesh.get_group(axis) is not None for axis in range(mesh.ndim))
    except (RuntimeError, ValueError, KeyError):
        return False


def release_at_exit() -> None:
    """Destroy the process groups of the meshes :func:`build_mesh` made (and the default group when it
    initialised it), so their communication threads are joined before the interpreter finalises.

    Runs from ``atexit``; safe when the user already called ``destroy_process_group()``. A DeviceMesh holds
    its groups (``_pg_registry``), and so does every DTensor through its mesh: the registry is emptied, as the
    groups' last references must go for torch to join their threads.
    """
    _release_meshes()
    if _OWNED["default_group"] and dist.is_initialized():
        dist.destroy_process_group()
    _OWNED["default_group"] = False


def _release_meshes() -> None:
    """Destroy the groups of every mesh :func:`build_mesh` made, and forget the meshes."""
    meshes, _OWNED["meshes"] = _OWNED["meshes"], {}
    _destroy([group for mesh in meshes.values() for group in _take_groups(mesh)])


def _take_groups(mesh: Any) -> list[Any]:
    """The process groups ``mesh`` holds, which it then no longer does."""
    registry = getattr(mesh, "_pg_registry", {})
    groups = list(registry.values())
    registry.clear()
    return groups


def _destroy(groups: list[Any]) -> None:
    """Destroy ``groups`` (holding their last references: they are freed, and their threads joined, on return)."""
    for group in groups:
        if dist.is_initialized() and group is not dist.group.WORLD:
            with contextlib.suppress(ValueError, RuntimeError):  # the user destroyed it already
                dist.destroy_process_group(group)


def _placements(mesh: Any, spec: Sequence[str | None] | None) -> list[Any]:
    from torch.distributed.tensor import Replicate, Shard

    placements: list[Any] = [Replicate() for _ in mesh.mesh_dim_names]
    for dim, axis in enumerate(spec or ()):
        if axis is not None:
            placements[mesh.mesh_dim_names.index(axis)] = Shard(dim)
    return placements


def place(mesh: Any, array: torch.Tensor, spec: Sequence[str | None] | None) -> Any:
    """``array`` as a DTensor over ``mesh`` with ``spec``: a plain tensor (the same global value on
    every process) is split; a DTensor is redistributed (or returned as it is when already placed so)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    placements = _placements(mesh, spec)
    if isinstance(array, DTensor):
        if array.device_mesh != mesh:
            raise ArgumentError(
                f"TorchBackend: an array placed on the mesh {tuple(array.device_mesh.shape)} cannot be used on this "
                f"backend's mesh {tuple(mesh.shape)}; arrays of one model live on one mesh"
            )
        if list(array.placements) == placements:
            return array
        return array.redistribute(mesh, placements)
    return distribute_tensor(array.detach(), mesh, placements)


def full_tensor(array: Any) -> torch.Tensor:
    """The global value of a DTensor (gathered on every process); other tensors as they are."""
    return cast(torch.Tensor, array.full_tensor() if is_distributed(array) else array)


def like(reference: Any, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (the global value, e.g. a cotangent) placed as the DTensor ``reference`` is (a pending
    reduction ``Partial`` becomes ``Replicate``)."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    placements = [p if p.is_shard() or p.is_replicate() else Replicate() for p in reference.placements]
    return distribute_tensor(tensor.detach(), reference.device_mesh, placements)


def replication(mesh: Any) -> contextlib.AbstractContextManager[Any]:
    """DTensor's implicit replication when ``mesh`` is a device mesh, else nothing: plain tensors made
    inside (``arange`` positions, masks, constants) count as replicated over the mesh instead of failing
    to mix with DTensors."""
    if mesh is None:
        return contextlib.nullcontext()
    from torch.distributed.tensor.experimental import implicit_replication

    return implicit_replication()


def replicated_like(reference: Any, tensor: torch.Tensor) -> Any:
    """``tensor`` as a replicated DTensor on ``reference``'s mesh when ``reference`` is a DTensor and
    ``tensor`` is not (for ops whose backward would mix the two); else ``tensor``."""
    from torch.distributed.tensor import DTensor, Replicate

    if type(tensor) is not torch.Tensor or not isinstance(reference, DTensor):
        return tensor
    mesh = reference.device_mesh
    return DTensor.from_local(tensor, mesh, [Replicate()] * mesh.ndim, run_check=False)
