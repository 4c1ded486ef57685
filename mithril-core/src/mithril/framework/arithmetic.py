"""Connection arithmetic: ``a + b`` on connections adds a primitive to the model tree that owns them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConnectionError_
from .keys import Connection

__all__ = ["apply"]


def _owner(conn: Connection):
    model = conn.model
    while model._parent is not None:
        model = model._parent
    return model


def apply(op: str, args: Sequence[Any], attrs: dict[str, Any]) -> Connection:
    """Add primitive ``op`` with ``args`` (connections or constants) to the common root model."""
    from ..models.primitive import Primitive

    owners = {id(_owner(a)): _owner(a) for a in args if isinstance(a, Connection)}
    if len(owners) != 1:
        raise ConnectionError_(
            f"{op}: the connections belong to {len(owners)} different model trees; add the models to one "
            "parent first"
        )
    root = next(iter(owners.values()))
    child = Primitive(op, **attrs)
    keys = child.input_keys
    root._add(child, dict(zip(keys, args)), extend=False, canonical_update=False)
    return Connection(child, "output")
