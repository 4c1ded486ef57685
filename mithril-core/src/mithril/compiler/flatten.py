"""Flatten a logical model into a fresh :class:`Graph`: copy values (shapes keep their symbolic links,
but the logical model is never mutated), order nodes topologically and name every input and output."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ModelConnectionError
from ..shapes import Dim, Shape, Variadic
from .graph import Graph, Node, Value

__all__ = ["FlatModel", "flatten", "is_logical_model"]


def is_logical_model(obj: Any) -> bool:
    """Whether ``obj`` is a logical model (what :func:`flatten` reads: children, graph and interface).

    The compiler sits below :class:`~mithril.framework.model.Model`, so it checks the structure, not the class.
    """
    return all(hasattr(obj, attr) for attr in ("_children", "_graph", "_interface", "_hidden"))


@dataclass
class FlatModel:
    """The flat copy of a logical model: graph, named outputs and named free inputs."""

    graph: Graph
    outputs: dict[str, Value]
    inputs: dict[str, Value]
    optional_only: set[int] = field(default_factory=set)  # input ids used only in optional slots
    paths: dict[str, str] = field(default_factory=dict)  # input name -> logical path (``h_0.attn.c_attn.weight``)


class _ShapeCopier:
    """Copies shapes so that dims/variadics shared in the logical model stay shared in the copy."""

    def __init__(self) -> None:
        self.dims: dict[int, Dim] = {}
        self.vars: dict[int, Variadic] = {}

    def dim(self, d: Dim) -> Dim:
        root = d.find()
        if id(root) not in self.dims:
            self.dims[id(root)] = Dim(root.value)
        return self.dims[id(root)]

    def shape(self, shape: Shape) -> Shape:
        prefix, var, suffix = shape.parts()
        new_var = None
        if var is not None:
            new_var = self.vars.setdefault(id(var), Variadic())
        return Shape([self.dim(d) for d in prefix], new_var, [self.dim(d) for d in suffix])


def _topological(nodes: list[Node]) -> list[Node]:
    producers = {id(v.find()): n for n in nodes for v in n.outputs.values()}
    deps: dict[int, set[int]] = {}
    users: dict[int, list[Node]] = {}
    for node in nodes:
        needed = {
            id(producers[id(v.find())]) for v in node.inputs.values() if v is not None and id(v.find()) in producers
        }
        deps[id(node)] = needed
        for dep in needed:
            users.setdefault(dep, []).append(node)
    ready = deque(n for n in nodes if not deps[id(n)])
    order: list[Node] = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for user in users.get(id(node), ()):
            deps[id(user)].discard(id(node))
            if not deps[id(user)]:
                ready.append(user)
    if len(order) != len(nodes):
        stuck = [n.path or n.spec.name for n in nodes if deps[id(n)]][:5]
        raise ModelConnectionError(f"the model has a cycle through {stuck}; a value cannot depend on itself")
    return order


def _model_names(model: Any, short: bool) -> dict[int, str]:
    """Value root id -> name, from the shallowest model that names it (breadth-first)."""
    names: dict[int, str] = {}
    queue: deque[tuple[str, Any]] = deque((name, child) for name, child in model._children)
    while queue:
        path, child = queue.popleft()
        for key, value in child._interface().items():
            names.setdefault(id(value.find()), key if short else f"{path}.{key}")
        queue.extend((f"{path}.{name}", grandchild) for name, grandchild in child._children)
    return names


def _unique(candidates: Iterable[tuple[int, str]], reserved: set[str]) -> dict[int, str]:
    """Names in order of first use: the first input wanting a name gets it, later ones ``name_1``,
    ``name_2``... (skipping reserved names). Blocks added after a model's existing ones never rename its
    inputs, so parameter files saved before such a change still load."""
    taken = set(reserved)
    next_index: dict[str, int] = {}
    result: dict[int, str] = {}
    for key, name in candidates:
        chosen = name
        if chosen in taken:
            i = next_index.get(name, 1)
            while f"{name}_{i}" in taken:
                i += 1
            next_index[name] = i + 1
            chosen = f"{name}_{i}"
        taken.add(chosen)
        result[key] = chosen
    return result


def flatten(model: Any, registry: Any, *, short_names: bool = True) -> FlatModel:
    """Copy ``model``'s graph into a new :class:`Graph` with named inputs and outputs."""
    graph = Graph(registry)
    copier = _ShapeCopier()
    copies: dict[int, Value] = {}

    def copy(value: Value) -> Value:
        root = value.find()
        new = copies.get(id(root))
        if new is None:
            new = graph.new_value(copier.shape(root.shape), root.kind, root.const)
            new.differentiable, new.init, new.buffer = root.differentiable, root.init, root.buffer
            copies[id(root)] = new
            if root.updates is not None:
                new.updates = copy(root.updates)
        return new

    interface = model._interface()
    top_outputs = {
        k: v.find() for k, v in interface.items() if v.find().producer is not None and k not in model._hidden
    }
    if not top_outputs:
        raise ModelConnectionError(f"{model._path()} has no outputs to compute; name one with IOKey or a string")
    for node in _topological(list(model._graph.nodes)):
        node_inputs = {
            k: (copy(v) if v is not None and v.find().const is not None else None) for k, v in node.inputs.items()
        }
        node_outputs = {k: copy(v) for k, v in node.outputs.items()}
        graph.add_node(node.spec, dict(node.attrs), node_inputs, node_outputs, node.path)
    outputs = {k: copy(v) for k, v in top_outputs.items()}
    graph.deferred = [(copier.shape(a), copier.shape(b), where) for a, b, where in model._graph.deferred]

    # name free inputs: top-level names first, then the shallowest child key
    used: list[Value] = []
    optional_slots: dict[int, bool] = {}
    seen: set[int] = set()
    for node in graph.nodes:
        for key, value in node.inputs.items():
            if value is None or value.producer is not None or value.is_constant:
                continue
            optional = key in node.spec.optional_inputs
            optional_slots[value.id] = optional_slots.get(value.id, True) and optional
            if value.id not in seen:
                seen.add(value.id)
                used.append(value)
    for value in outputs.values():
        if value.producer is None and value.id not in seen and not value.is_constant:
            seen.add(value.id)
            used.append(value)
            optional_slots[value.id] = False
    top_names = {id(copy(v)): k for k, v in interface.items() if v.find().producer is None}
    inner = _model_names(model, short_names)
    by_copy = {id(copies[rid]): name for rid, name in inner.items() if rid in copies}
    long_names = inner if not short_names else _model_names(model, False)
    by_copy_long = {id(copies[rid]): name for rid, name in long_names.items() if rid in copies}
    reserved = set(top_names.values()) | set(outputs)
    candidates = [(v.id, by_copy.get(id(v), "input")) for v in used if id(v) not in top_names]
    generated = _unique(candidates, reserved)
    inputs: dict[str, Value] = {}
    paths: dict[str, str] = {}
    for value in used:
        name = top_names.get(id(value)) or generated[value.id]
        value.name = name
        inputs[name] = value
        paths[name] = top_names.get(id(value)) or by_copy_long.get(id(value), name)
    for name, value in outputs.items():
        if value.name is None:
            value.name = name
    # an optional input (bias, mask) nobody declared as a parameter or data may be left out at compile time
    optional_only = {v.id for v in used if optional_slots.get(v.id) and v.differentiable is None}
    return FlatModel(graph, outputs, inputs, optional_only, paths)
