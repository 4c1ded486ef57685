"""Indexing with connections, as Mithril's published API writes it: ``x[arange_out, argmax_out]`` picks
``x[a[i], b[i]]`` (NumPy advanced indexing with integer tensors on the leading axes).

The table and the indices may also be IOKeys (``IOKey("positional_embedding", ...)[positions]``, OpenAI
CLIP's bare parameter table); they become keys of the model the expression is built in.

Built from primitives every backend has, with gradients: the leading axes are merged (``flatten``) and the
rows taken with ``embedding`` at ``a * x.shape[1] + b``; the axis sizes are read at run time.

Example:
    >>> from mithril.models import IOKey, Model, Relu
    >>> model = Model()
    >>> model |= Relu()(input=IOKey("x", shape=[2, 3, 4]), output="h")
    >>> model |= Relu()(input=IOKey("i", type=int, shape=[2]), output="a")
    >>> model.h[model.a, model.a].shape
    [2, 4]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError
from .keys import Connection, Expr, IOKey

if TYPE_CHECKING:
    from .model import Model

__all__ = ["tensor_index"]


def tensor_index(root: Model, x: Any, key: Any) -> Connection:
    """``x[key]`` built into ``root``, where ``key`` holds integer tensors (connections, IOKeys or expressions;
    one or two, on the leading axes). ``x`` may be an IOKey too (a parameter table: ``IOKey("table")[ids]``);
    IOKeys become keys of ``root``."""
    from .arithmetic import build, materialize
    from .symbolic import _rank

    parts = key if isinstance(key, tuple) else (key,)
    tensors = (Connection, IOKey, Expr)
    if not isinstance(x, tensors) or not all(isinstance(p, tensors) for p in parts) or len(parts) > 2:
        raise ArgumentError(
            f"indexing with tensors takes one or two integer tensors (connections or IOKeys) on the leading axes "
            f"(x[rows] or x[rows, cols]) of a connection or IOKey; got {x!r}[{key!r}]"
        )
    with root._transaction():  # nothing is left in root when a check below fails
        x = build(root, "index", [x], {"key": Ellipsis}) if isinstance(x, IOKey) else materialize(x, root)
        parts = tuple(materialize(p, root) for p in parts)
        rank = _rank(x)
        if rank is None:
            raise ArgumentError(f"{x!r}[...]: indexing with tensors needs the rank of {x.key!r}; give its shape (IOKey(shape=...) or set_shapes)")
        if not len(parts) <= rank <= len(parts) + 1:
            raise ArgumentError(
                f"{x!r}[...]: {len(parts)} index tensor(s) for a tensor of rank {rank}; indexing with tensors "
                f"takes rank {len(parts)} or {len(parts) + 1} (at most one trailing axis kept)"
            )
        table, flat_index = x, parts[0]
        if len(parts) == 2:
            cols = build(root, "index", [build(root, "shape", [x], {})], {"key": 1})
            flat_index = parts[0] * cols + parts[1]
            table = build(root, "flatten", [x], {"start_dim": 0, "end_dim": 1})
        if rank == len(parts):  # x[a, b] of a matrix: scalars, taken as rows of width 1
            picked = build(root, "embedding", [flat_index, build(root, "unsqueeze", [table], {"axis": -1})], {})
            return build(root, "squeeze", [picked], {"axis": -1})
        return build(root, "embedding", [flat_index, table], {})
