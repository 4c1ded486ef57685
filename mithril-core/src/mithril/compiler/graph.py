"""The flat graph the compiler works on: values (tensors) and primitive nodes, with incremental shape
and type inference. Gradient rules build the backward pass by emitting nodes into the same graph.

Example:
    >>> from mithril.compiler.graph import Graph
    >>> from mithril.plugins import registry
    >>> g = Graph(registry())
    >>> x = g.new_value(shape=[2, 3], kind="float", name="x")
    >>> y = g.emit("relu", x) * 2.0
    >>> y.shape.ints(), y.kind
    ((2, 3), 'float')
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError, DtypeError, ShapeError
from ..journal import touch
from ..lazy_numpy import np
from ..primitives import operators
from ..primitives.apply import run_shape_rule, run_type_rule
from ..primitives.spec import PrimitiveSpec, ShapeIO
from ..shapes import (
    Shape,
    ShapeMismatch,
    ShapeUndetermined,
    changes_since,
    epoch,
    note_change,
    shape_from_template,
    unify,
)
from ..types import Kind, kind_of_python_value
from ..union_find import find_root

__all__ = ["NOTHING", "Graph", "Node", "Value", "as_constant", "constant_kind", "fit_constant"]


class _Nothing:
    def __repr__(self) -> str:
        return "NOTHING"

    def __bool__(self) -> bool:
        return False


NOTHING: Any = _Nothing()
"""Marks a value with no constant (distinct from a constant ``None``)."""


def constant_kind(value: Any) -> Kind:
    kind = kind_of_python_value(value)
    if kind is None:
        raise DtypeError(f"constant {value!r} is not a number, bool or array")
    return kind


def as_constant(value: Any) -> tuple[Any, Shape]:
    """A constant as stored in the graph (Python scalar or NumPy array) and its shape."""
    if isinstance(value, (bool, int, float)):
        return value, Shape()
    array = np.asarray(value)
    return array, Shape.of(list(array.shape))


def fit_constant(target: Value, value: Any, mismatch: Callable[[Any, Shape, ShapeMismatch], str]) -> Any:
    """``value`` as stored in the graph (:func:`as_constant`), its shape unified into ``target``'s; where it
    does not fit, a ``ShapeError`` whose message is ``mismatch(constant, its shape, the mismatch)``."""
    array, shape = as_constant(value)
    try:
        unify(target.shape, shape)
    except ShapeMismatch as exc:
        raise ShapeError(mismatch(array, shape, exc)) from None
    return array


class Value:
    """A tensor in the flat graph. Arithmetic on values emits primitives into their graph."""

    __slots__ = (
        "_parent",
        "buffer",
        "const",
        "differentiable",
        "graph",
        "id",
        "init",
        "kind",
        "name",
        "producer",
        "shape",
        "updates",
    )

    def __init__(self, graph: Graph, id: int, shape: Shape, kind: Kind | None, const: Any, name: str | None) -> None:
        self.id = id
        self.graph = graph
        self.shape = shape
        self.kind = kind
        self.const = const
        self.name = name
        self.producer: Node | None = None
        self.differentiable: bool | None = None  # None: decided by the compiler's defaults
        self.init: str | None = None  # parameter initialiser hint ("ones", "zeros", ...)
        self.buffer = False  # non-trainable state that travels with the parameters
        self.updates: Value | None = None  # this value is the next value of that buffer (a state update)
        self._parent: Value | None = None

    def set_kind(self, kind: Kind) -> None:
        """Give this (root) value its kind; rules waiting for it are woken (see ``Graph.solve``)."""
        touch(self)
        self.kind = kind
        note_change(self)

    def find(self) -> Value:
        """The representative after logical merges (connections unify values through union-find)."""
        return find_root(self)

    @property
    def is_constant(self) -> bool:
        return self.const is not NOTHING

    def __repr__(self) -> str:
        label = self.name or f"%{self.id}"
        return f"<{label}: {self.kind or '?'}{self.shape!r}>"

    # arithmetic sugar used by gradient rules
    def _emit(self, name: str, *args: Any) -> Value:
        path = self.producer.path + ".grad" if self.producer is not None and self.producer.path else "grad"
        return self.graph.emit(name, *args, path=path)  # type: ignore[return-value]

    __add__: _Operator = operators.binary("add")
    __radd__: _Operator = operators.reflected("add")
    __sub__: _Operator = operators.binary("subtract")
    __rsub__: _Operator = operators.reflected("subtract")
    __mul__: _Operator = operators.binary("multiply")
    __rmul__: _Operator = operators.reflected("multiply")
    __truediv__: _Operator = operators.binary("divide")
    __rtruediv__: _Operator = operators.reflected("divide")
    __pow__: _Operator = operators.binary("power")
    __matmul__: _Operator = operators.binary("matmul")
    __neg__: Callable[[Value], Value] = operators.unary("neg")


_Operator = Callable[[Value, Any], Value]
"""The type of ``Value``'s binary operators (made by :mod:`mithril.primitives.operators`)."""


@dataclass(eq=False, repr=False, slots=True)
class Node:
    """One primitive call. ``inputs`` maps input keys to values (``None`` for absent optional inputs)."""

    id: int
    spec: PrimitiveSpec
    attrs: dict[str, Any]
    inputs: dict[str, Value | None]
    outputs: dict[str, Value]
    path: str
    shape_done: bool = field(default=False, init=False)
    type_done: bool = field(default=False, init=False)
    kinds_seen: tuple[Any, ...] | None = field(default=None, init=False)  # input kinds the pending type rule last saw

    @property
    def output(self) -> Value:
        return self.outputs["output"]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.inputs.items())
        return f"{self.spec.name}({args}) @ {self.path or '<root>'}"


class Graph:
    """Values and nodes in topological (insertion) order, with a solver for pending shape/type rules."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry  # primitive specs by name (mithril.primitives.registry.Registry)
        self.nodes: list[Node] = []
        self._ids = itertools.count()
        self._pending: list[Node] = []
        self.deferred: list[tuple[Shape, Shape, str]] = []  # shapes that must be equal but cannot be unified yet
        # Pending shape rules are re-run only when a dim they read is refined: id(dim root) -> nodes that
        # read it, and the shapes epoch up to which refinements were looked at (see ``solve``).
        self._watch: dict[int, dict[int, Node]] = {}
        self._seen_epoch = epoch()

    # -- undo (see mithril.journal) ---------------------------------------------------------------
    def _journal_snapshot(self) -> tuple[Any, ...]:
        """Nodes and pending rules only grow between solver passes (which replace ``_pending``), so a
        list and its length undo them without copying the graph at every connection."""
        return (self.nodes, len(self.nodes), self._pending, len(self._pending), list(self.deferred))

    def _journal_restore(self, state: tuple[Any, ...]) -> None:
        nodes, n_nodes, pending, n_pending, deferred = state
        self.nodes, self._pending, self.deferred = nodes[:n_nodes], pending[:n_pending], deferred
        self.recheck()  # the watch index may have lost entries

    # -- construction ----------------------------------------------------------------------------
    def new_value(
        self,
        shape: Shape | Sequence[Any] | None = None,
        kind: Kind | None = None,
        const: Any = NOTHING,
        name: str | None = None,
    ) -> Value:
        if shape is None:
            shape = Shape.unknown()
        elif not isinstance(shape, Shape):
            shape = shape_from_template(list(shape), {})
        return Value(self, next(self._ids), shape, kind, const, name)

    def constant(self, value: Any, name: str | None = None) -> Value:
        """A constant value (Python scalar or array); its shape and kind come from the data."""
        if isinstance(value, Value):
            return value
        constant, shape = as_constant(value)
        return self.new_value(shape, constant_kind(constant), constant, name)

    def emit(self, primitive: str, *args: Any, path: str = "", **kwargs: Any) -> Value | tuple[Value, ...]:
        """Add a call of ``primitive``: positional args fill input keys in order, keyword args may name
        inputs or attributes. Returns the output value (a tuple for multi-output primitives)."""
        spec = self.registry.primitive(primitive)
        input_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k not in spec.attributes}
        attrs = spec.resolve_attributes(kwargs, path or primitive)
        keys = spec.input_keys(attrs)
        if len(args) > len(keys):
            raise ArgumentError(f"{primitive} takes inputs {keys}, got {len(args)} positional arguments")
        given = dict(zip(keys, args, strict=False)) | input_kwargs
        unknown = set(given) - set(keys)
        if unknown:
            raise ArgumentError(f"{primitive}: unknown input(s) {sorted(unknown)}; inputs are {keys}")
        inputs: dict[str, Value | None] = {}
        for key in keys:
            if key not in given or given[key] is None:
                if key not in spec.optional_inputs:
                    raise ArgumentError(f"{primitive}: missing input {key!r}")
                inputs[key] = None
            else:
                inputs[key] = self.constant(given[key])
        node = self.add_node(spec, attrs, inputs, path=path)
        outs = tuple(node.outputs.values())
        return outs[0] if len(outs) == 1 and "output" in node.outputs else outs

    def add_node(
        self,
        spec: PrimitiveSpec,
        attrs: dict[str, Any],
        inputs: dict[str, Value | None],
        outputs: Mapping[str, Value] | None = None,
        path: str = "",
    ) -> Node:
        """Append a node; outputs are created unless given. Shape and type rules run immediately."""
        if outputs is None:
            outputs = {key: self.new_value() for key in spec.output_keys(attrs)}
        node = Node(next(self._ids), spec, attrs, inputs, dict(outputs), path)
        for value in node.outputs.values():
            value.producer = node
        self.nodes.append(node)
        self._infer(node)
        if not (node.shape_done and node.type_done):
            self._pending.append(node)
        return node

    # -- inference -------------------------------------------------------------------------------
    def _where(self, node: Node) -> str:
        return f"{node.path or '<root>'} ({node.spec.name})"

    def reinfer(self, node: Node) -> None:
        """Run ``node``'s rules again after a pass changed its primitive or attributes (they refine the
        shapes and kinds known, never undo them)."""
        node.shape_done = node.type_done = False
        node.kinds_seen = None
        self._infer(node)

    def _infer(self, node: Node) -> None:
        """Run ``node``'s pending rules (a type rule only when its input kinds changed since it last ran)."""
        seen = None if node.type_done else tuple(v.find().kind for v in node.inputs.values() if v is not None)
        types = seen is not None and seen != node.kinds_seen
        if not (types or not node.shape_done):
            return
        touch(node)
        if types:  # wake the type rule again when one of its inputs gets a kind
            for value in node.inputs.values():
                if value is not None and value.find().kind is None:
                    self._watch.setdefault(id(value.find()), {})[id(node)] = node
        inputs = {k: v.find() for k, v in node.inputs.items() if v is not None}
        kinds = {k: v.kind for k, v in inputs.items()}
        if not node.shape_done:
            io = ShapeIO({k: v.shape for k, v in inputs.items()})
            io.update({k: v.find().shape for k, v in node.outputs.items()})
            node.shape_done = run_shape_rule(node.spec, node.attrs, io, self._where(node))
            if not node.shape_done:
                self._watch_shapes(node, io.values())
        if types:
            node.kinds_seen = seen  # a type rule only learns from new input kinds
            result = run_type_rule(node.spec, node.attrs, kinds, self._where(node))
            for key, value in inputs.items():
                learned = kinds.get(key)
                if value.kind is None and learned is not None:
                    value.set_kind(learned)
            if result is not None:
                for key, kind in result.items():
                    out = node.outputs[key].find()
                    if out.kind is not None and out.kind != kind:
                        raise DtypeError(
                            f"{self._where(node)}: output {key!r} is {kind}, but it is connected where {out.kind} is "
                            "required"
                        )
                    if out.kind != kind:
                        out.set_kind(kind)
                node.type_done = True

    def _watch_shapes(self, node: Node, shapes: Iterable[Shape]) -> None:
        """Re-run ``node``'s shape rule when any dim it reads now is refined."""
        for shape in shapes:
            for root in shape.roots():
                self._watch.setdefault(id(root), {})[id(node)] = node

    def _due(self) -> list[Node]:
        """Pending nodes whose rules may learn something: those reading a dim refined, or a value given a
        kind, since the last pass (all of them when the change log no longer reaches back)."""
        changed = changes_since(self._seen_epoch)
        self._seen_epoch = epoch()
        if changed is None:
            return list(self._pending)
        woken: set[int] = set()
        for key in set(changed):
            woken.update(self._watch.pop(key, ()))  # woken nodes re-register on what they read now
        return [n for n in self._pending if id(n) in woken]

    def solve(self, max_idle_passes: int = 2) -> None:
        """Re-run pending rules until nothing changes.

        A pass that completes no rule but still refines some dim (rules may link fresh symbols) counts as
        idle; after ``max_idle_passes`` such passes in a row the solver stops, so it always terminates.
        Only rules whose shapes were refined since they last ran are re-run, so building a model costs
        time linear in its size.
        """
        idle = 0
        while (self._pending or self.deferred) and idle <= max_idle_passes:
            before = (epoch(), len(self._pending) + len(self.deferred), sum(1 for n in self._pending if n.type_done))
            self._retry_deferred()
            for node in self._due():
                self._infer(node)
            self._pending = [n for n in self._pending if not (n.shape_done and n.type_done)]
            after = (epoch(), len(self._pending) + len(self.deferred), sum(1 for n in self._pending if n.type_done))
            if after == before:
                break
            idle = idle + 1 if after[1:] == before[1:] else 0

    def _retry_deferred(self) -> None:
        still = []
        for a, b, where in self.deferred:
            try:
                unify(a, b)
            except ShapeUndetermined:
                still.append((a, b, where))
            except ShapeMismatch as exc:
                raise ShapeError(f"{where}: shapes {a!r} and {b!r} do not match ({exc})") from None
        self.deferred = still

    def recheck(self) -> None:
        """Make the next ``solve`` re-run every pending rule (after node inputs were rewired directly)."""
        self._seen_epoch = -1

    def default_kinds(self, values: Iterable[Value], kind: Kind = "float") -> None:
        """Give unknown-kind values a kind (free inputs default to float) and re-solve every pending rule
        (the compiler rewires inputs before calling this, e.g. dropping unused optional ones)."""
        self.recheck()
        for value in values:
            if value.find().kind is None:
                value.find().set_kind(kind)
        self.solve()

    def absorb(self, other: Graph, prefix: str) -> None:
        """Take over another graph's nodes (a child model joining its parent), prefixing their paths."""
        touch(self)
        touch(other)
        for node in other.nodes:
            touch(node)
            node.path = f"{prefix}.{node.path}" if node.path else prefix
        self.nodes.extend(other.nodes)
        self._pending.extend(other._pending)
        self.deferred.extend(other.deferred)
        for key, nodes in other._watch.items():
            self._watch.setdefault(key, {}).update(nodes)
        self._seen_epoch = min(self._seen_epoch, other._seen_epoch)
        other.nodes, other._pending, other.deferred, other._watch = [], [], [], {}

    # -- queries ---------------------------------------------------------------------------------
    def consumers(self) -> dict[int, list[Node]]:
        """Value id -> nodes reading it."""
        users: dict[int, list[Node]] = {}
        for node in self.nodes:
            for value in node.inputs.values():
                if value is not None:
                    users.setdefault(value.id, []).append(node)
        return users
