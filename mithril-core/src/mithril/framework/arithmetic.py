"""Connection arithmetic: ``a + b`` on connections adds a primitive to the model tree that owns them;
on IOKeys and constants alone it gives an :class:`~mithril.framework.keys.Expr`, built when connected."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConnectionError_
from .keys import Connection, DtypeOf, Expr, IOKey

if TYPE_CHECKING:
    from .model import Model

__all__ = ["apply", "build", "has_tensor_key", "materialize"]


def _owner(conn: Connection) -> Model:
    model = conn.model
    while model._parent is not None:
        model = model._parent
    return model


def _connections(args: Sequence[Any]) -> list[Connection]:
    found: list[Connection] = []
    for arg in args:
        if isinstance(arg, Connection):
            found.append(arg)
        elif isinstance(arg, (tuple, list)):
            found.extend(_connections(arg))
    return found


def apply(op: str, args: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """Add primitive ``op`` with ``args`` (connections, IOKeys, expressions or constants) to the common root
    model of the connections among them; without any connection, return the deferred :class:`Expr`."""
    if op == "index" and has_tensor_key(attrs.get("key")):
        from .indexing import tensor_index

        found = _connections([args[0], attrs["key"]])
        if not found:  # IOKeys only: built where connected
            return Expr(op, tuple(args), attrs)
        return tensor_index(_common_owner(op, found), args[0], attrs["key"])
    if op == "reshape" and any(not isinstance(d, int) and d is not None for d in attrs["shape"]):
        from .symbolic import resolve_reshape

        return resolve_reshape(args[0], attrs["shape"])
    attrs = {k: (v.resolve() if isinstance(v, DtypeOf) else v) for k, v in attrs.items()}
    connections = _connections(args)
    if not connections:
        return Expr(op, tuple(args), attrs)
    return build(_common_owner(op, connections), op, args, attrs)


def _common_owner(op: str, connections: list[Connection]) -> Model:
    owners = {id(_owner(a)): _owner(a) for a in connections}
    if len(owners) != 1:
        raise ConnectionError_(
            f"{op}: the connections belong to {len(owners)} different model trees; add the models to one "
            "parent first"
        )
    return next(iter(owners.values()))


def has_tensor_key(key: Any) -> bool:
    """Whether an index key holds tensors (connections, IOKeys or expressions), not only static entries."""
    parts = key if isinstance(key, tuple) else (key,)
    return any(isinstance(part, (Connection, IOKey, Expr)) for part in parts)


def build(root: Model, op: str, args: Sequence[Any], attrs: dict[str, Any]) -> Connection:
    """Add primitive ``op`` to ``root`` with ``args`` filling its input keys in order."""
    from ..models.primitive import Primitive

    if op == "index" and has_tensor_key(attrs.get("key")):
        from .indexing import tensor_index

        return tensor_index(root, args[0], attrs["key"])
    child = Primitive(op, **attrs)
    keys = child.input_keys
    targets = [materialize(arg, root) for arg in args]
    root._add(child, dict(zip(keys, targets)), extend=False, canonical_update=False)
    return Connection(child, "output")


def materialize(target: Any, model: Model) -> Any:
    """Build an :class:`Expr` into ``model`` (IOKeys in it become keys of ``model``) and return the connection
    to its result; anything else is returned as it is."""
    if not isinstance(target, Expr):
        return target
    return build(model, target.op, target.args, target.attrs)
