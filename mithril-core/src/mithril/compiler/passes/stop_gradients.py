"""Non-differentiable inputs on autograd backends: a ``stop_gradient`` where a primitive's spec says no
gradient flows into an input that depends on a trainable parameter.

Manual-gradient backends (NumPy, C, GGML) follow the specs by construction: the symbolic backward pass
asks each VJP rule only for the spec's differentiable inputs. Autograd backends (JAX, PyTorch, MLX)
differentiate the generated forward instead, so without this pass they would differentiate a loss's
``target``, a gradient helper's operands or ``floor_divide`` (PyTorch even raises for the latter), and
disagree with the manual backends. The pass costs nothing where nothing needs it: data, constants and
values that depend on no parameter are left alone, as are consumers with no float output (comparisons,
``argmax``, ``shape``...), through which no framework propagates a gradient.

Example:
    >>> import mithril as ml
    >>> from mithril.models import BinaryCrossEntropy, IOKey, Model, Sigmoid
    >>> model = Model()
    >>> model |= Sigmoid()(input="x", output="p")
    >>> model |= BinaryCrossEntropy()(input="x", target="p", output=IOKey("loss"))
    >>> pm = ml.compile(model, ml.TorchBackend(), shapes={"x": [2]}, trainable_keys={"x"})
    >>> "stop_gradient" in pm.program.source                                  # target = sigmoid(x)
    True
"""

from __future__ import annotations

from collections.abc import Iterable

from ..graph import Graph, Node, Value

__all__ = ["insert_stop_gradients"]

_NO_GRADIENT_KINDS = frozenset({"int", "bool"})
"""Values that carry no gradient into any consumer: MLX pulls ``multiply(cast(x, int), x)``'s cotangent
back through the ``cast`` as an integer (truncated) array, so it is stopped even at differentiable keys."""


def insert_stop_gradients(graph: Graph, params: Iterable[Value]) -> int:
    """Route every value that depends on ``params`` and feeds an input its consumer's spec declares
    non-differentiable through one ``stop_gradient`` (shared by all such uses of the value). Bool and int
    values are stopped at every key of a consumer with a float output: MLX differentiates ``where``'s
    condition back through ``cast(x, bool)`` and fails on the cotangent's type, and pulls an integer
    (truncated) cotangent back through ``cast(x, int)``. Returns the number of ``stop_gradient`` nodes added."""
    active = {value.id for value in params}
    stopped: dict[int, Value] = {}
    ordered: list[Node] = []
    for node in list(graph.nodes):
        differentiable = set(node.spec.differentiable_keys(node.attrs))
        float_output = any(out.kind == "float" for out in node.outputs.values())
        for key, value in node.inputs.items():
            if value is None or value.id not in active or not float_output:
                continue
            if key in differentiable and value.kind not in _NO_GRADIENT_KINDS:
                continue
            if value.id not in stopped:
                stopped[value.id] = graph.emit("stop_gradient", value, path=node.path)  # type: ignore[assignment]
                ordered.append(graph.nodes.pop())
            node.inputs[key] = stopped[value.id]
        if any(value is not None and value.id in active for key, value in node.inputs.items() if key in differentiable):
            active.update(out.id for out in node.outputs.values())
        ordered.append(node)
    graph.nodes[:] = ordered
    return len(stopped)
