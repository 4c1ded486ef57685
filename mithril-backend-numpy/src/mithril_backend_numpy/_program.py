"""The NumPy backend's program: core's generated Python (:func:`mithril.compiler.codegen.python.generate_python`)
with buffer reuse. An elementwise primitive whose operand is an intermediate array that nothing reads
afterwards writes its result into that operand's memory (``np.subtract(a, b, out=a)``) instead of a new
array: a chain such as BatchNorm in inference mode + ReLU after a convolution then runs in the
convolution's output buffer, which stays in cache, and allocates nothing.

An operand is reused only when it is provably private: it was made by a primitive that always returns a
new array (:data:`FRESH`), every other primitive reading it also returns a new array (so no view of it
exists), the reusing node is its last reader in every generated function, it is not returned, and its
static shape is the result's. At run time the operand must still be a writable array of the result's
dtype (else the primitive allocates as usual), so the values are exactly those of the plain primitive.

The generated source names the reusing calls, e.g. ``_t5 = subtract__into_left(_t4, _t1)``.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Conv2d, Relu, Model
    >>> model = Model(); model |= Conv2d(4, 3)(input="input"); model += Relu()
    >>> pm = ml.compile(model, ml.NumpyBackend(), shapes={"input": [1, 2, 8, 8]}, inference=True)
    >>> "relu__into_input" in pm.source
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
from mithril.extend import live_nodes

__all__ = ["FRESH", "IN_PLACE", "into", "reuse_plan", "reusing_graph"]


IN_PLACE: dict[str, tuple[tuple[str, ...], Callable[..., Any]]] = {
    "add": (("left", "right"), np.add),
    "subtract": (("left", "right"), np.subtract),
    "multiply": (("left", "right"), np.multiply),
    "relu": (("input",), np.maximum),
}
"""Primitives that can write into an operand: (input keys in order, the ufunc computing them)."""

FRESH = frozenset({"conv1d", "conv2d", "linear", "matmul", "max_pool2d", "avg_pool2d", *IN_PLACE})
"""Primitives whose NumPy implementation returns a new array (never an input or a view of one); a result
written into a private operand is that operand's memory, private too."""

_SCALARS = (int, float, bool)


def into(reusing: str) -> Callable[..., Any]:
    """The implementation of ``reusing`` (``"subtract__into_left"``): the primitive writing its result into
    that operand when it can."""
    name, key = reusing.split("__into_")
    keys, ufunc = IN_PLACE[name]
    index = keys.index(key)
    if name == "relu":

        def relu_into(input: Any) -> Any:
            if type(input) is np.ndarray and input.flags.writeable and input.dtype.kind == "f":
                return np.maximum(input, 0, out=input)
            return np.maximum(input, 0)

        relu_into.__name__ = relu_into.__qualname__ = "relu__into_input"
        return relu_into

    def binary_into(left: Any, right: Any) -> Any:
        target, other = (left, right) if index == 0 else (right, left)
        if (
            type(target) is np.ndarray
            and target.flags.writeable
            and (type(other) in _SCALARS or getattr(other, "dtype", None) == target.dtype)
        ):
            return ufunc(left, right, out=target)
        return ufunc(left, right)

    binary_into.__name__ = binary_into.__qualname__ = f"{name}__into_{key}"
    return binary_into


def _static(value: Any) -> tuple[int, ...] | None:
    shape = value.shape.static()
    return None if shape is None else tuple(shape)


def reuse_plan(nodes: Sequence[Any], functions: Sequence[Any]) -> dict[int, str]:
    """Node id -> the input key whose array the node may overwrite (valid in every function)."""
    plan: dict[int, str | None] = {}
    for fn in functions:
        targets = [v for group in fn.returns for v in group.values()]
        returned = {v.id for v in targets}
        order = live_nodes(nodes, targets)
        readers: dict[int, list[Any]] = {}
        for node in order:
            for value in node.inputs.values():
                if value is not None:
                    readers.setdefault(value.id, []).append(node)
        for node in order:
            if node.spec.name not in IN_PLACE or plan.get(node.id, "") is None:
                continue
            choice = None
            for key in IN_PLACE[node.spec.name][0]:
                value = node.inputs.get(key)
                if value is None or value.producer is None or value.producer.spec.name not in FRESH:
                    continue
                if value.id in returned or _static(value) is None or _static(value) != _static(node.output):
                    continue
                users = readers[value.id]
                if users[-1] is not node or users.count(node) != 1:
                    continue
                if all(user.spec.name in FRESH for user in users):
                    choice = key
                    break
            previous = plan.get(node.id, "")
            plan[node.id] = choice if previous in ("", choice) else None
    return {node_id: key for node_id, key in plan.items() if key is not None}


class _Reusing:
    """A node seen by the code generator under the name of its buffer-reusing implementation."""

    def __init__(self, node: Any, key: str) -> None:
        self._node = node
        self.spec = SimpleNamespace(name=f"{node.spec.name}__into_{key}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


def reusing_graph(graph: Any, functions: Sequence[Any]) -> Any:
    """``graph`` with the nodes of :func:`reuse_plan` renamed to their buffer-reusing implementations
    (:func:`into`), for core's Python code generator."""
    plan = reuse_plan(graph.nodes, functions)
    return SimpleNamespace(nodes=[_Reusing(node, plan[node.id]) if node.id in plan else node for node in graph.nodes])
