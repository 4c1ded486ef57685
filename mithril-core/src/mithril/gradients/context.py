"""What a VJP rule sees: the forward node's inputs, outputs, attributes and output cotangents, and a
way to emit primitives into the backward graph.

A rule is a function ``rule(ctx) -> {input_key: cotangent}`` returning cotangents for the node's
differentiable inputs (omit a key, or map it to ``None``, when its gradient is zero). Rules are written
only in terms of primitives, so one rule serves every manual-gradient backend (NumPy, C, GGML).

Example (the rule for ``multiply``):
    >>> def multiply(ctx):
    ...     g, left, right = ctx.cotangent, ctx["left"], ctx["right"]
    ...     return {
    ...         "left": ctx.ops.sum_to_like(g * right, left),
    ...         "right": ctx.ops.sum_to_like(g * left, right),
    ...     }
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..compiler.graph import Graph, Node, Value
from ..errors import MissingAttributeError, ModelKeyError, UnsupportedPrimitiveError
from ..primitives.shape_rules import normalize_axes, normalize_axis

__all__ = ["Cotangents", "GradContext", "Ops", "VjpRule"]


class Ops:
    """``ops.<primitive>(*inputs, **attrs)`` emits that primitive into the backward graph."""

    def __init__(self, graph: Graph, path: str) -> None:
        self._graph = graph
        self._path = path

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise MissingAttributeError(f"ops has no attribute {name!r}")
        graph, path = self._graph, self._path

        def emit(*args: Any, **kwargs: Any) -> Value | tuple[Value, ...]:
            return graph.emit(name, *args, path=path, **kwargs)

        emit.__name__ = name
        return emit


class GradContext:
    """The view of one forward node given to its VJP rule.

    Attributes:
        node: the forward node.
        attrs: its resolved attributes.
        inputs / outputs: key -> forward :class:`Value` (``None`` for an absent optional input).
        cotangents: output key -> cotangent value, ``None`` where no gradient flows into that output.
        ops: emits primitives (``ctx.ops.sum(x, axis=0)``); values also support ``+ - * / ** @`` and ``-x``.
    """

    def __init__(self, graph: Graph, node: Node, cotangents: Mapping[str, Value | None]) -> None:
        self.graph = graph
        self.node = node
        self.attrs = node.attrs
        self.inputs = node.inputs
        self.outputs = node.outputs
        self.cotangents = dict(cotangents)
        self.ops = Ops(graph, f"{node.path}.grad" if node.path else "grad")

    def __getitem__(self, key: str) -> Value:
        value = self.inputs[key]
        if value is None:
            raise ModelKeyError(
                f"optional input {key!r} of {self.node.spec.name} at {self.node.path or '<root>'} is absent"
            )
        return value

    @property
    def cotangent(self) -> Value:
        """The cotangent of the single output ``"output"``."""
        return self.cotangents["output"]  # type: ignore[return-value]

    @property
    def output(self) -> Value:
        return self.outputs["output"]

    def rank(self, value: Value) -> int:
        """Rank of a value; rules that need it fail clearly when it is not known at compile time."""
        rank = value.shape.rank
        if rank is None:
            raise UnsupportedPrimitiveError(
                f"{self.node.path or '<root>'}: the gradient of {self.node.spec.name!r} needs the rank of "
                f"{value!r}; give its shape to ml.compile(shapes=...)"
            )
        return rank

    def axes(self, value: Value, axis: int | tuple[int, ...] | None) -> tuple[int, ...]:
        """Normalised, sorted axes of ``value`` (all axes for ``None``)."""
        return normalize_axes(axis, self.rank(value))

    def axis(self, value: Value, axis: int) -> int:
        return normalize_axis(axis, self.rank(value))

    def constant(self, value: Any) -> Value:
        return self.graph.constant(value)


Cotangents = Mapping[str, Value | None]
"""What a VJP rule returns: input key -> its cotangent (``None`` or absent: zero)."""

VjpRule = Callable[[GradContext], Cotangents]
"""A VJP rule: ``rule(ctx) -> {input_key: cotangent}`` (see the module doc)."""

