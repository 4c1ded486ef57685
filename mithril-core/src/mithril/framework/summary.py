"""Text summary of a logical model: children, key shapes and parameter counts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Model

__all__ = ["model_summary", "parameter_count"]


def parameter_count(model: Model) -> int | None:
    """Elements of the model's trainable inputs (``differentiable=True``); ``None`` if a shape is unknown."""
    from .model import describe_shape

    seen: set[int] = set()
    total = 0
    for node in model._graph.nodes:
        for value in node.inputs.values():
            if value is None:
                continue
            root = value.find()
            if root.differentiable is not True or root.producer is not None or id(root) in seen:
                continue
            seen.add(id(root))
            dims = describe_shape(root.shape)
            if any(not isinstance(d, int) for d in dims):
                return None
            total += math.prod(dims)
    return total


def model_summary(model: Model, indent: str = "") -> str:
    """The model tree, one line per key (``in``/``out`` and its symbolic shape) and per child."""
    from .model import describe_shape

    count = parameter_count(model) if not indent else None
    kind = getattr(model, "primitive_name", None) or type(model).__name__
    title = f"{indent}{model.name or type(model).__name__} ({kind})"
    if not indent:
        title += f" - trainable parameters: {count if count is not None else 'unknown until shapes are known'}"
    lines = [title]
    for key, value in model._interface().items():
        role = "out" if model._is_output(key, value) else "in "
        lines.append(f"{indent}  {role} {key}: {describe_shape(value.find().shape)}")
    for name, child in model._children:
        child_lines = model_summary(child, indent + "    ").splitlines()
        child_lines[0] = f"{indent}  - {name}: {child_lines[0].strip()}"
        lines.extend(child_lines)
    return "\n".join(lines)
