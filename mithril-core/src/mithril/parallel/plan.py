"""Sharding plans: which mesh axis splits which dimension of every parameter and data key.

A plan is backend-neutral: a mapping ``key -> spec`` where a spec has one entry per dimension of the
array, each a mesh axis name (``"mesh_0"``, ``"mesh_1"``, ...) or ``None`` (not split). Backends turn a
spec into their own placement (``jax.sharding.NamedSharding``, a ``torch.distributed`` DTensor).

``ml.compile(..., parallelism=...)`` builds one with :func:`make_plan`:

- ``"data"``: every data key is split on its first (batch) axis over the first mesh axis; parameters
  are replicated.
- ``"model"``: large parameters are split over the last mesh axis, Megatron-style: a ``Linear`` whose
  input comes from a column-parallel ``Linear`` is row-parallel (``weight [out, in]`` split on ``in``),
  every other one column-parallel (split on ``out``, its bias too), so consecutive layers alternate and
  attention is split by heads; embedding tables are split by vocabulary. Data is replicated.
- ``"mixed"``: both, on a mesh of two or more axes.
- a dict ``{key: spec}``: exactly those placements (keys left out are replicated).

Example:
    >>> plan = ShardingPlan(("mesh_0",), (2,), {"input": ("mesh_0", None)})
    >>> plan.spec("input"), plan.spec("weight")
    (('mesh_0', None), None)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError, ShapeError
from ..validation import is_int

__all__ = [
    "MODES", "ShardingPlan", "Spec", "indivisible_dimension", "make_plan", "mesh_axis_names", "mesh_sizes",
    "normalise_spec", "parameter_bytes_per_device",
]  # fmt: skip

Spec = tuple[str | None, ...]
MODES = ("data", "model", "mixed")


def mesh_sizes(owner: str, device_mesh: Any) -> tuple[int, ...]:
    """A ``device_mesh=`` option as a tuple of mesh sizes: a positive int (``2``) or a non-empty tuple or
    list of them (``(2,)``, ``(2, 2)``). Anything else (strings, floats such as ``2.5``, nested tuples,
    bools) is refused with an :class:`~mithril.errors.ArgumentError` naming ``owner``.

    >>> mesh_sizes("JaxBackend", 2), mesh_sizes("JaxBackend", [2, 2])
    ((2,), (2, 2))
    >>> mesh_sizes("JaxBackend", (2.5,))
    Traceback (most recent call last):
    ...
    mithril.errors.ArgumentError: JaxBackend: device_mesh must be a positive int or a non-empty tuple of positive ints, one size per mesh axis (e.g. 2, (2,) or (2, 2)); got (2.5,) (tuple)
    """  # noqa: E501 - a doctest output line (the error message)
    entries = (device_mesh,) if is_int(device_mesh) else device_mesh
    if not isinstance(entries, (tuple, list)) or not entries or not all(is_int(s) and s >= 1 for s in entries):
        raise ArgumentError(
            f"{owner}: device_mesh must be a positive int or a non-empty tuple of positive ints, one size per mesh "
            f"axis (e.g. 2, (2,) or (2, 2)); got {device_mesh!r} ({type(device_mesh).__name__})"
        )
    return tuple(int(s) for s in entries)


def indivisible_dimension(
    spec: Sequence[str | None], shape: Sequence[int], mesh_axes: Sequence[str], mesh_shape: Sequence[int]
) -> tuple[int, str, int] | None:
    """``(dimension, mesh axis, devices)`` of the first dimension of ``shape`` that ``spec`` splits over a
    mesh axis whose device count does not divide its size; ``None`` when all divide.

    >>> indivisible_dimension(("mesh_0", None), (3, 4), ("mesh_0",), (2,))
    (0, 'mesh_0', 2)
    """
    for dim, (axis, size) in enumerate(zip(spec, shape, strict=False)):  # a spec may leave trailing dims unsplit
        if axis is not None and size % mesh_shape[list(mesh_axes).index(axis)]:
            return dim, axis, mesh_shape[list(mesh_axes).index(axis)]
    return None


def mesh_axis_names(rank: int) -> tuple[str, ...]:
    """The names of a mesh's axes: ``mesh_0``, ``mesh_1``, ...

    >>> mesh_axis_names(2)
    ('mesh_0', 'mesh_1')
    """
    return tuple(f"mesh_{i}" for i in range(rank))


@dataclass(frozen=True)
class ShardingPlan:
    """Placements of a compiled model's inputs over a device mesh (``mesh_axes`` named, ``mesh_shape``
    sized); ``specs`` holds the split keys only (a key not in it is replicated)."""

    mesh_axes: tuple[str, ...]
    mesh_shape: tuple[int, ...]
    specs: dict[str, Spec] = field(default_factory=dict)
    mode: str = "explicit"

    def spec(self, key: str) -> Spec | None:
        """The spec of ``key``, or ``None`` when it is replicated."""
        return self.specs.get(key)

    def axis_size(self, axis: str) -> int:
        return self.mesh_shape[self.mesh_axes.index(axis)]

    def check_shape(self, key: str, shape: Sequence[int]) -> None:
        """Refuse an array of ``shape`` for ``key`` whose split dimensions the mesh does not divide.

        >>> ShardingPlan(("mesh_0",), (2,), {"x": ("mesh_0",)}).check_shape("x", (3,))
        Traceback (most recent call last):
        ...
        mithril.errors.ShapeError: parallelism: dimension 0 of 'x' has size 3, which the mesh axis 'mesh_0' (2 devices) does not divide; mesh (2,) with axes ('mesh_0',)
        """  # noqa: E501 - a doctest output line (the error message)
        spec = self.specs.get(key)
        if spec is None:
            return
        if len(spec) > len(shape):
            raise ShapeError(
                f"parallelism: the spec {spec} of {key!r} has {len(spec)} entries but the array has shape "
                f"{tuple(shape)} ({len(shape)} dimensions)"
            )
        bad = indivisible_dimension(spec, shape, self.mesh_axes, self.mesh_shape)
        if bad is not None:
            dim, axis, devices = bad
            raise ShapeError(
                f"parallelism: dimension {dim} of {key!r} has size {shape[dim]}, which the mesh axis {axis!r} "
                f"({devices} devices) does not divide; mesh {self.mesh_shape} with axes {self.mesh_axes}"
            )


def normalise_spec(key: str, spec: Any, mesh_axes: Sequence[str], rank: int | None) -> Spec | None:
    """A user's spec for ``key`` as a tuple of axis names or ``None``: entries may be an axis name, a mesh
    axis index or ``None``; a spec of all ``None`` is replication (``None``).

    >>> normalise_spec("w", (None, 1), ("mesh_0", "mesh_1"), 2)
    (None, 'mesh_1')
    """
    if spec is None:
        return None
    if isinstance(spec, (str, int)):
        spec = (spec,)
    if not isinstance(spec, (tuple, list)):
        raise ArgumentError(
            f"parallelism: the spec of {key!r} must be a tuple naming a mesh axis or None per dimension, got {spec!r}"
        )
    names: list[str | None] = []
    for entry in spec:
        if entry is None:
            names.append(None)
        elif isinstance(entry, bool) or not isinstance(entry, (str, int)):
            raise ArgumentError(
                f"parallelism: the spec of {key!r} has {entry!r}; expected a mesh axis name {tuple(mesh_axes)}, an "
                "axis index or None"
            )
        elif isinstance(entry, int):
            if not 0 <= entry < len(mesh_axes):
                raise ArgumentError(
                    f"parallelism: the spec of {key!r} names mesh axis {entry}, but the mesh has axes "
                    f"{tuple(mesh_axes)}"
                )
            names.append(mesh_axes[entry])
        elif entry not in mesh_axes:
            raise ArgumentError(
                f"parallelism: the spec of {key!r} names the mesh axis {entry!r}, but the mesh has axes "
                f"{tuple(mesh_axes)}"
            )
        else:
            names.append(entry)
    used = [n for n in names if n is not None]
    if len(used) != len(set(used)):
        raise ArgumentError(f"parallelism: the spec of {key!r} uses a mesh axis twice: {tuple(names)}")
    if rank is not None and len(names) != rank:
        raise ArgumentError(f"parallelism: the spec of {key!r} has {len(names)} entries; {key!r} has {rank} dimensions")
    return tuple(names) if used else None


def make_plan(
    parallelism: str | Mapping[str, Any],
    *,
    mesh_shape: Sequence[int],
    graph: Any,
    params: Mapping[str, Any],
    data: Mapping[str, Any],
) -> ShardingPlan:
    """The plan of ``parallelism`` for a compiled graph's ``params`` and ``data`` (name -> graph value).

    Dimensions the mesh does not divide stay replicated for parameters (only what splits evenly is
    split) and are refused for data at ``evaluate`` (:meth:`ShardingPlan.check_shape`).
    """
    mesh_shape = tuple(int(s) for s in mesh_shape)
    axes = mesh_axis_names(len(mesh_shape))
    ranks = {name: _rank(value) for name, value in {**params, **data}.items()}
    if isinstance(parallelism, Mapping):
        unknown = sorted(set(parallelism) - set(ranks))
        if unknown:
            raise ArgumentError(f"parallelism: unknown key(s) {unknown}; the model's inputs are {sorted(ranks)}")
        given = {key: normalise_spec(key, spec, axes, ranks[key]) for key, spec in parallelism.items()}
        plan = ShardingPlan(axes, mesh_shape, {k: s for k, s in given.items() if s is not None})
        for key, value in {**params, **data}.items():
            shape = value.shape.static()
            if shape is not None:
                plan.check_shape(key, shape)
        return plan
    if parallelism not in MODES:
        raise ArgumentError(
            f"ml.compile: parallelism={parallelism!r} is not a parallelism mode; expected one of {MODES}, a dict "
            "{key: spec} or None"
        )
    if parallelism == "mixed" and len(mesh_shape) < 2:
        raise ArgumentError(
            "ml.compile: parallelism='mixed' needs a mesh of two or more axes (data, model), got "
            f"device_mesh={mesh_shape}"
        )
    specs: dict[str, Spec] = {}
    if parallelism in ("data", "mixed"):
        for key in data:
            rank = ranks[key]
            if rank is None:  # rank known at run time: the batch axis, whatever follows
                specs[key] = (axes[0],)
            elif rank:
                specs[key] = (axes[0],) + (None,) * (rank - 1)
    if parallelism in ("model", "mixed"):
        specs.update(_megatron(graph, params, axes[-1], mesh_shape[-1]))
    return ShardingPlan(axes, mesh_shape, specs, mode=parallelism)


def _rank(value: Any) -> int | None:
    pattern = value.shape.ints()
    return None if pattern is None else len(pattern)


def _megatron(graph: Any, params: Mapping[str, Any], axis: str, size: int) -> dict[str, Spec]:
    """Column/row-parallel linear layers and vocabulary-split embeddings (see the module docstring)."""
    by_id = {value.id: name for name, value in params.items()}
    specs: dict[str, Spec] = {}
    decided: set[str] = set()
    style: dict[int, str] = {}  # value id -> "col"/"row": the nearest upstream linear layer's split

    def divides(value: Any, dim: int) -> bool:
        shape = value.shape.static()
        return shape is not None and shape[dim] % size == 0 and shape[dim] >= size

    for node in _topological(graph.nodes):
        inputs = {k: v for k, v in node.inputs.items() if v is not None}
        if node.spec.name == "linear" and inputs.get("weight") is not None and inputs["weight"].id in by_id:
            weight, bias = inputs["weight"], inputs.get("bias")
            name = by_id[weight.id]
            kind = "row" if style.get(inputs["input"].id) == "col" else "col"
            if name in decided:  # a shared weight keeps its first placement
                kinds: dict[Spec, str] = {(axis, None): "col", (None, axis): "row"}
                kind = kinds.get(specs.get(name, ()), "")
            elif kind == "col" and divides(weight, 0):
                specs[name] = (axis, None)
                if bias is not None and bias.id in by_id:
                    specs[by_id[bias.id]] = (axis,)
                    decided.add(by_id[bias.id])
            elif kind == "row" and divides(weight, 1):
                specs[name] = (None, axis)
            else:
                kind = ""
            decided.add(name)
            if kind:
                style[node.output.id] = kind
            continue
        if node.spec.name == "embedding" and inputs.get("weight") is not None and inputs["weight"].id in by_id:
            name = by_id[inputs["weight"].id]
            if name not in decided and divides(inputs["weight"], 0):
                specs[name] = (axis, None)
            decided.add(name)
            continue
        seen = {style.get(v.id) for v in inputs.values()}
        mark = "col" if "col" in seen else "row" if "row" in seen else None
        if mark is not None:
            for out in node.outputs.values():
                style[out.id] = mark
    return specs


def _topological(nodes: Iterable[Any]) -> list[Any]:
    """``nodes`` ordered so that every node comes after the producers of its inputs."""
    nodes = list(nodes)
    producer = {out.id: node for node in nodes for out in node.outputs.values()}
    order: list[Any] = []
    state: dict[int, int] = {}  # node id -> 1 visiting, 2 done
    for root in nodes:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                state[node.id] = 2
                order.append(node)
                continue
            if state.get(node.id):
                continue
            state[node.id] = 1
            stack.append((node, True))
            for value in node.inputs.values():
                parent = producer.get(value.id) if value is not None else None
                if parent is not None and not state.get(parent.id):
                    stack.append((parent, False))
    return order


def parameter_bytes_per_device(
    plan: ShardingPlan, shapes: Mapping[str, Sequence[int]], itemsize: int
) -> tuple[int, int]:
    """``(bytes on one device, total bytes)`` of the parameters of ``shapes`` under ``plan``.

    >>> parameter_bytes_per_device(ShardingPlan(("mesh_0",), (4,), {"w": ("mesh_0", None)}), {"w": (8, 2)}, 4)
    (16, 64)
    """
    per_device = total = 0
    for key, shape in shapes.items():
        count = math.prod(shape)
        total += count * itemsize
        spec = plan.spec(key) or ()
        split = math.prod(plan.axis_size(a) for a in spec if a is not None)
        per_device += count // split * itemsize
    return per_device, total
