"""``Model``: the composable container of the logical layer.

``model |= child(key=target, ...)`` adds ``child`` with exactly the given connections; ``model += child``
also connects the parent's canonical output to the child's canonical input. Targets are parent key
names (``str``), :class:`IOKey`, connections (``other.output``), constants, or ``None`` for an optional
input left out. Every add runs shape and type inference, so a mismatch knowable at connect time is
reported at connect time.

Example:
    >>> from mithril.models import Model, Linear, Relu
    >>> model = Model()
    >>> model |= Linear(dimension=8)(input="x")
    >>> model += Relu()
    >>> sorted(model.input_keys), model.output_keys
    (['x'], ['output'])
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..compiler.compile import compile as compile_model
from ..compiler.graph import NOTHING, Graph, Value, fit_constant
from ..deprecation import warn_deprecated
from ..display._tree import ModelView
from ..display.mixin import Displayable
from ..errors import ArgumentError, DtypeError, MissingAttributeError, ModelConnectionError, ModelKeyError, ShapeError
from ..gc_pause import paused_gc
from ..journal import touch, transaction
from ..lazy_numpy import np
from ..lazy_plugins import registry
from ..shapes import ShapeMismatch, ShapeUndetermined, note_change, shape_from_template, unify
from ..types import Kind, kind_of_python_value
from .keys import TBD, Connection, Deferred, DimRef, Expr, IOKey, materialize_expression
from .tensor_types import Tensor, _TensorOf, describe_shape, parse_kind, tensor_kind

if TYPE_CHECKING:  # annotations only (typing.Self is Python 3.11+)
    from typing_extensions import Self

__all__ = ["Model", "describe_shape", "merge_values", "parse_kind"]

_NOT_GIVEN: Any = object()


def merge_values(a: Value, b: Value, where: str, graph: Graph | None = None) -> Value:
    """Make two logical values one (a connection). Shapes unify; kinds, constants and producers must agree.

    When the shapes can be matched in several ways for now (``[..., 3]`` vs ``[N, C, ...]``), the
    equality is deferred to ``graph``'s solver, which settles it once more is known."""
    a, b = a.find(), b.find()
    if a is b:
        return a
    touch(a)
    touch(b)
    if a.producer is not None and b.producer is not None:
        raise ModelConnectionError(f"{where}: both sides are outputs of other models; a key can have one producer")
    try:
        unify(a.shape, b.shape)
    except ShapeUndetermined:
        if graph is None:
            raise ShapeError(f"{where}: shapes {a.shape!r} and {b.shape!r} can be matched in several ways") from None
        touch(graph)
        graph.deferred.append((a.shape, b.shape, where))
    except ShapeMismatch as exc:
        raise ShapeError(f"{where}: shapes {a.shape!r} and {b.shape!r} do not match ({exc})") from None
    if a.kind is not None and b.kind is not None and a.kind != b.kind:
        raise DtypeError(f"{where}: a {a.kind} value is connected to a {b.kind} key")
    if a.const is not NOTHING and b.const is not NOTHING and not _same_constant(a.const, b.const):
        raise ModelConnectionError(f"{where}: conflicting constant values {a.const!r} and {b.const!r}")
    b._parent = a
    note_change(b)  # rules reading ``b`` now read ``a``
    if a.kind is None and b.kind is not None:
        a.set_kind(b.kind)
    a.const = a.const if a.const is not NOTHING else b.const
    a.producer = a.producer or b.producer
    a.differentiable = a.differentiable if a.differentiable is not None else b.differentiable
    a.init = a.init or b.init
    a.buffer = a.buffer or b.buffer
    a.updates = a.updates or b.updates
    return a


def _same_constant(x: Any, y: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(x), np.asarray(y)))
    except Exception:
        return x is y


def snake_case(name: str) -> str:
    """A class name as a default block or primitive name: ``MaxPool2D`` -> ``max_pool2d``, ``SinTimeX`` ->
    ``sin_time_x`` (a dimension suffix such as ``2D`` stays with its number).

    >>> snake_case("BatchNorm2D"), snake_case("LayerNorm")
    ('batch_norm2d', 'layer_norm')
    """
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[0-9])(?=[A-Z][a-z])", "_", name).lower()


class _Call(Deferred):
    """``child(key=target, ...)``: a model together with the connections to make when it is added
    (``parent |= child(...)``).

    Used as a value instead, it is Mithril's functional style: the call stands for the model's output
    (``Gelu()(input=Linear(8)(input=x))``, ``y.shape``, ``y.reshape(...)``; a model with several outputs
    unpacks into them: ``h, height, width = block(input=x)``) and the model is added, once, to the model the
    expression is built into (:meth:`Model.create` or a connection of a model).
    """

    __slots__ = ("_built", "kwargs", "model")

    def __init__(self, model: Model, kwargs: dict[str, Any]) -> None:
        self.model = model
        self.kwargs = kwargs
        self._built: Any = None

    def __repr__(self) -> str:
        return f"{type(self.model).__name__}(...)({', '.join(self.kwargs)})"

    def __iter__(self) -> Iterator[Expr]:
        """One value per output of the model, in its output order (``a, b = block(input=x)``)."""
        return iter([Expr("call_output", (self,), {"key": key}) for key in self._outputs()])

    def _outputs(self) -> list[str]:
        keys = self.model.output_keys
        if not keys and self.model._cout is not None:
            keys = [self.model.cout.key]
        return keys

    def add_to(self, model: Model) -> None:
        """Add the called model to ``model``, once (later uses in the same tree reuse it)."""
        if self._built is None:
            if self.model._parent is not None:
                raise ModelConnectionError(
                    f"{self!r} is already part of {self.model._parent._path()}; call a new model instance"
                )
            model._add(self.model, self.kwargs, extend=False)
            self._built = model
        elif not model._owns(self.model):
            raise ModelConnectionError(f"{self!r} is part of {self._built._path()}, not of {model._path()}")

    def build_into(self, model: Model) -> Any:
        """Add the called model to ``model`` (once) and return its output connection (a tuple of them for a
        list-valued output, e.g. ``Split``'s)."""
        self.add_to(model)
        groups = self.model.__dict__.get("_key_groups", {})
        outputs = self._outputs()
        if len(outputs) == 1:
            return Connection(self.model, outputs[0])
        listed = [name for name, members in groups.items() if all(m.key in outputs for m in members)]
        if len(listed) == 1 and not set(outputs) - {m.key for m in groups[listed[0]]}:
            return tuple(Connection(self.model, m.key) for m in groups[listed[0]])
        raise ModelConnectionError(f"{self!r} has {len(outputs)} outputs {outputs}; unpack them (a, b = model(...))")


def _expand_groups(
    child: Model, kwargs: Mapping[str, Any], where: str
) -> tuple[dict[str, Any], dict[str, tuple[Connection, ...]]]:
    """List-valued keys (Split's ``output``): a list of targets connects member by member; a name
    (``str``/``IOKey``) names the list in the parent (``parent.split_out[0]``)."""
    members = child.__dict__.get("_key_groups", {})
    if not members or not set(kwargs) & set(members):
        return dict(kwargs), {}
    expanded = dict(kwargs)
    groups: dict[str, tuple[Connection, ...]] = {}
    for key, connections in members.items():
        if key not in expanded:
            continue
        target = expanded.pop(key)
        if isinstance(target, (list, tuple)):
            if len(target) != len(connections):
                raise ModelConnectionError(
                    f"{where}: {type(child).__name__}.{key} has {len(connections)} parts, got {len(target)} targets"
                )
            expanded.update({conn.key: t for conn, t in zip(connections, target, strict=True)})
        elif isinstance(target, str) or (isinstance(target, IOKey) and target.name):
            groups[target if isinstance(target, str) else str(target.name)] = tuple(connections)
        else:
            raise ModelConnectionError(
                f"{where}: {type(child).__name__}.{key} is a list of {len(connections)} values; connect it to a name "
                f"or a list, got {target!r}"
            )
    return expanded, groups


class Model(Displayable):
    """A logical model: a tree of child models whose primitives form one flat graph.

    Args:
        name: the child name used in paths (``gpt.h_3.attn``); defaults to ``<snake_class>_<n>``.
    """

    def __init__(self, name: str | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise ArgumentError(f"{type(self).__name__}: name must be a non-empty string or None, got {name!r}")
        self.name = name
        self._graph = Graph(_core_registry())
        self._keys: dict[str, Value] = {}
        self._hidden_keys: set[str] = set()  # named with IOKey(expose=False)
        self._exposed: set[str] | None = None  # Mithril's exposure rule once set (see output_keys)
        self._children: list[tuple[str, Model]] = []
        self._child_names: dict[str, int] = {}
        self._parent: Model | None = None
        self._cin: Value | None = None
        self._cout: Value | None = None
        self._frozen = False
        self._role_snapshot: dict[str, bool] | None = None  # key -> is_output, fixed when added to a parent

    # -- composition -----------------------------------------------------------------------------
    _aliases: Mapping[str, str] = {}
    """Other spellings of this model's keys, accepted silently: ``{"is_causal": "causal"}``."""
    _deprecated_aliases: Mapping[str, str] = {}
    """This project's earlier names of keys Mithril names differently (``{"left": "numerator"}`` for ``Divide``):
    accepted with a ``DeprecationWarning`` naming the canonical key."""

    def _alias(self, key: str) -> str:
        """The canonical name of ``key`` (itself unless it is an alias; a deprecated alias warns)."""
        if key in self._aliases:
            return self._aliases[key]
        if key in self._deprecated_aliases:
            real = self._deprecated_aliases[key]
            warn_deprecated(f"{type(self).__name__} key {key!r}", repr(real), stacklevel=4)
            return real
        return key

    _canonical_attribute: str | None = None
    """An attribute ``+=`` fills with the previous model's canonical output when the model has no canonical
    input yet (``Arange``'s ``stop``): it is given through :meth:`_connect_attributes`, as ``.connect`` does."""

    def __call__(self, *args: Any, **connections: Any) -> _Call:
        """Connections to make when this model is added to a parent: ``Linear(4)(input="x")``.

        Positional arguments fill the keys in declaration order (inputs, then outputs), as in Mithril's
        published API: ``Add().connect("x", "y", output="z")``. Key aliases (``Power(base=, exponent=)``)
        are accepted as keywords.

        >>> from mithril.models import Add
        >>> sorted(Add()("x", "y").kwargs.items())
        [('left', 'x'), ('right', 'y')]
        """
        if args:
            order = [*self.input_keys, *self.output_keys]
            if len(args) > len(order):
                raise ArgumentError(
                    f"{type(self).__name__}.connect takes at most {len(order)} positional connections {order}, got "
                    f"{len(args)}"
                )
            for key, target in zip(order, args, strict=False):
                if key in connections:
                    raise ArgumentError(f"{type(self).__name__}.connect: key {key!r} given positionally and by name")
                connections[key] = target
        canonical: dict[str, Any] = {}
        for key, target in connections.items():
            real = self._alias(key)
            if real in canonical:
                raise ArgumentError(f"{type(self).__name__}.connect: key {real!r} given twice (as {key!r} too)")
            canonical[real] = target
        return _Call(self, self._connect_attributes(canonical))

    connect = __call__

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        """Hook for models whose static attributes may be given at connect time (``Sum().connect(x, axis=1)``):
        take those out of ``connections`` and apply them. The base model has none."""
        return connections

    def __ior__(self, other: Model | _Call) -> Self:
        call = other if isinstance(other, _Call) else _Call(other, {})
        self._add(call.model, call.kwargs, extend=False)
        return self

    def __iadd__(self, other: Model | _Call) -> Self:
        call = other if isinstance(other, _Call) else _Call(other, {})
        attribute = call.model._canonical_attribute if isinstance(call.model, Model) else None
        if attribute and attribute not in call.kwargs and self._children and self._cout is not None:
            # the canonical input is an attribute given at connect time (Arange's stop): give it the output
            call = _Call(call.model, call.model._connect_attributes({**call.kwargs, attribute: self.cout}))
        self._add(call.model, call.kwargs, extend=True)
        return self

    def freeze(self) -> Model:
        """Forbid further additions (a model also freezes when it becomes someone's child)."""
        self._frozen = True
        return self

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    def _path(self) -> str:
        parts = []
        model: Model | None = self
        while model is not None:
            parts.append(model.name or type(model).__name__)
            model = model._parent
        return ".".join(reversed(parts))

    def _child_name(self, child: Model) -> str:
        if child.name is not None:
            if any(n == child.name for n, _ in self._children):
                raise ModelConnectionError(f"{self._path()}: a child named {child.name!r} already exists")
            return child.name
        base: str = (
            snake_case(type(child).__name__)
            if type(child).__name__ != "Primitive"
            else child.__dict__["primitive_name"]
        )
        index = self._child_names.get(base, 0)
        self._child_names[base] = index + 1
        return f"{base}_{index}"

    def _add(self, child: Model, kwargs: Mapping[str, Any], *, extend: bool, canonical_update: bool = True) -> None:
        """Add ``child``; if anything fails, both models are restored exactly (see :mod:`mithril.journal`)."""
        with self._transaction():
            if isinstance(child, Model):
                touch(child)
                touch(child._graph)
            self._connect_child(child, kwargs, extend=extend, canonical_update=canonical_update)

    def _connect_child(self, child: Model, kwargs: Mapping[str, Any], *, extend: bool, canonical_update: bool) -> None:
        if not isinstance(child, Model):
            raise ArgumentError(
                f"{self._path()}: only models can be added to a Model, got {child!r} ({type(child).__name__})"
            )
        if child is self:
            raise ModelConnectionError(f"{self._path()}: a model cannot be added to itself")
        if child._parent is not None:
            raise ModelConnectionError(
                f"{type(child).__name__} {child._path()} is already part of {child._parent._path()}; "
                "create a new instance to use it again"
            )
        if self._frozen:
            raise ModelConnectionError(f"{self._path()} is frozen; models cannot be added to it any more")
        kwargs, groups = _expand_groups(child, kwargs, self._path())
        iface = child._interface()
        unknown = set(kwargs) - set(iface)
        if unknown:
            raise ModelKeyError(
                f"{type(child).__name__} has no key(s) {sorted(unknown)}; its keys are {sorted(iface)}"
            )
        name = self._child_name(child)
        where = f"{self._path()}.{name}"
        child._role_snapshot = {k: v.find().producer is not None for k, v in iface.items()}
        if extend and self._children and (self._cout is None or child._cin is None):
            missing = (
                f"{self._path()} has no canonical output"
                if self._cout is None
                else f"{type(child).__name__} {name!r} has no canonical input"
            )
            raise ModelConnectionError(
                f"{where}: += connects the canonical output to the new model's canonical input, but {missing}; "
                "connect the keys with |= and .connect(...), or name them with set_cin/set_cout"
            )
        if extend and self._cout is not None and child._cin is not None:
            cin_key = next((k for k, v in iface.items() if v.find() is child._cin.find()), None)
            if cin_key is None or cin_key not in kwargs:
                merge_values(
                    self._cout,
                    child._cin,
                    f"{where}: connecting the canonical output to its canonical input",
                    self._graph,
                )
        for key, value in iface.items():
            target = kwargs.get(key, _NOT_GIVEN)
            if target is not _NOT_GIVEN:
                self._connect(value, target, f"{where}.{key}")
        self._graph.absorb(child._graph, name)
        self._children.append((name, child))
        if groups:
            self.__dict__["_key_groups"] = {**self.__dict__.get("_key_groups", {}), **groups}
        child._parent = self
        child._frozen = True
        if canonical_update:
            if self._cin is None or self._cin.find().producer is not None:
                self._cin = child._cin if child._cin is not None and child._cin.find().producer is None else self._cin
            self._cout = child._cout or self._cout
        try:
            self._graph.solve()
        except ShapeError as exc:  # name the model the conflicting primitive sits in: gpt.h_3.attn...
            raise ShapeError(f"{self._path()}.{exc}") from None

    def _connect(self, value: Value, target: Any, where: str) -> None:
        if isinstance(target, str):
            self._bind_name(target, value, where)
        elif isinstance(target, IOKey):
            self.apply_iokey(value, target, where)
        elif isinstance(target, Connection):
            if not self._owns(target.model):
                raise ModelConnectionError(
                    f"{where}: connection {target!r} belongs to a model outside {self._path()}; add that model "
                    "to this one first"
                )
            merge_values(target.value, value, where, self._graph)
        elif isinstance(target, Value):  # a value of this model's graph (blocks rewiring a connection)
            merge_values(target, value, where, self._graph)
        elif isinstance(target, (Deferred, DimRef)):  # IOKey("x") * 1.702, x.shape[1], Relu()(input=x): built here now
            self._connect(value, materialize_expression(target, self), where)
        elif isinstance(target, Model):
            raise ArgumentError(f"{where}: connect to a key of the model (e.g. model.output), not the model itself")
        elif target is None:
            if value.producer is not None:
                raise ModelConnectionError(f"{where}: an output cannot be set to None")
            touch(value)
            value.const = None
        else:
            self._set_constant(value, target, where)

    def _owns(self, model: Model) -> bool:
        while model is not None:
            if model is self:
                return True
            model = model._parent  # type: ignore[assignment]
        return False

    def _declare_keys(self, *keys: str) -> None:
        """Give each of ``keys`` not yet known a fresh value, so the keys come first in :attr:`input_keys`,
        in this order (a block's declared ``.connect(*keys)`` order), whatever order its body uses them in."""
        for key in keys:
            if key not in self._keys:
                self._keys[key] = self._graph.new_value()

    def _bind_name(self, name: str, value: Value, where: str) -> None:
        if not name:
            raise ArgumentError(f"{where}: key names must be non-empty strings")
        if name in self._keys:
            merge_values(self._keys[name], value, f"{where} -> {name!r}", self._graph)
        else:
            self._keys[name] = value

    def merge_connections(self, *connections: Connection | str, name: str | None = None) -> None:
        """Make ``connections`` one value, Mithril's ``merge_connections``: keys of this model (by name or
        connection) or of models already added to it, e.g. one input feeding two children, or a child's
        output read as two others' inputs. The value keeps one name in this model: ``name`` when given,
        else the first name it had.

        >>> from mithril.models import Add, Model
        >>> model = Model()
        >>> model |= (first := Add())(left="a", right="b")
        >>> model |= (second := Add())(left="c", right="d")
        >>> model.merge_connections(first.left, second.left, name="x")
        >>> "x" in model.input_keys
        True
        """
        where = f"{self._path()}.merge_connections"
        if not connections:
            raise ArgumentError(f"{where}: give the connections to merge")
        values = []
        for connection in connections:
            if isinstance(connection, str):
                if connection not in self._keys:
                    raise ModelKeyError(
                        f"{where}: {self._path()} has no key {connection!r}; its keys are {sorted(self._keys)}"
                    )
                connection = Connection(self, connection)
            if not isinstance(connection, Connection):
                raise ArgumentError(
                    f"{where}: expected connections (model.key) or key names, got {connection!r} "
                    f"({type(connection).__name__})"
                )
            if not self._owns(connection.model):
                raise ModelConnectionError(
                    f"{where}: connection {connection!r} belongs to a model outside {self._path()}; add that model "
                    "first"
                )
            values.append(connection.value)
        merged = values[0]
        for value in values[1:]:
            merged = merge_values(merged, value, where, self._graph)
        merged = merged.find()
        names = [key for key, value in self._keys.items() if value.find() is merged]
        keep = name if name is not None else (names[0] if names else None)
        for key in names:  # one name for the one value: the given one, else the first it had
            if key != keep:
                del self._keys[key]
        if name is not None:
            self._bind_name(name, merged, where)

    def expose(self, connection: Connection, name: str = "output", *, canonical: bool = True) -> None:
        """Name an internal connection as a key of this model (block builders name their result)."""
        value = self._resolve(connection, "expose")
        self._bind_name(name, value, f"{self._path()}.expose({name!r})")
        if canonical:
            self._cout = value

    def apply_iokey(self, value: Value, key: IOKey, where: str) -> None:
        if key.template is not None:
            self._unify_template(value, key.template, {}, where)
        if key.type is not None:
            self._set_kind(value, parse_kind(key.type), where)
        if key.value is not TBD:
            self._set_constant(value, key.value, where)
        if key.differentiable is not None:
            touch(value.find())
            value.find().differentiable = key.differentiable
        if key.init is not None:
            touch(value.find())
            value.find().init = key.init
        if key.buffer:
            touch(value.find())
            value.find().buffer = True
            value.find().differentiable = False
        if key.name is not None:
            self._bind_name(key.name, value, where)
            key.__dict__["_scope"] = weakref.ref(self)  # where IOKey(...).shape[i] reads this key's dims
            if key.expose is False:
                self._hidden_keys.add(key.name)
            elif key.expose and value.find().producer is not None:  # IOKey(expose=True): Mithril's exposure rule
                self._exposed = {*(self._exposed or ()), key.name}
                self._hidden_keys.discard(key.name)

    def _unify_template(self, value: Value, template: Any, symbols: dict[str, object], where: str) -> None:
        try:
            shape = shape_from_template(template, symbols)
            unify(value.find().shape, shape)
        except ShapeUndetermined:
            self._graph.deferred.append((value.find().shape, shape, where))
        except ShapeMismatch as exc:
            raise ShapeError(f"{where}: shape {value.find().shape!r} does not match {template!r} ({exc})") from None
        self._graph.solve()

    def _set_kind(self, value: Value, kind: Kind, where: str) -> None:
        root = value.find()
        if root.kind is not None and root.kind != kind:
            raise DtypeError(f"{where}: is {root.kind}, cannot be set to {kind}")
        root.set_kind(kind)
        self._graph.solve()

    def _apply_tensor(self, value: Value, tensor: Tensor, where: str) -> None:
        """Connect ``ml.Tensor(...)`` to ``value``: its shape template, kind, differentiability and constant."""
        if tensor.shape is not None:
            self._unify_template(value, tensor.shape, {}, where)
        if tensor.kind is not None and not tensor.has_value:
            self._set_kind(value, tensor.kind, where)
        if tensor.differentiable is not None and value.find().producer is None:
            touch(value.find())
            value.find().differentiable = tensor.differentiable
        if tensor.has_value:
            constant = tensor.value
            if tensor.kind == "float" and kind_of_python_value(constant) != "float":
                constant = np.asarray(constant, dtype=float)  # Tensor(1, type=float)
            self._set_constant(value, constant, where)

    def _set_constant(self, value: Value, constant: Any, where: str) -> None:
        if isinstance(constant, Tensor):
            self._apply_tensor(value, constant, where)
            return
        root = value.find()
        if root.producer is not None:
            raise ModelConnectionError(
                f"{where}: is an output of a primitive; a constant can only be given to an input"
            )
        kind = kind_of_python_value(constant)
        if kind is None:
            raise DtypeError(f"{where}: constant {constant!r} is not a number, bool or array")
        array = fit_constant(
            root,
            constant,
            lambda _, shape, exc: (
                f"{where}: constant of shape {describe_shape(shape)} does not fit {root.shape!r} ({exc})"
            ),
        )
        if root.const is not NOTHING and not _same_constant(root.const, array):
            raise ModelConnectionError(f"{where}: already has constant {root.const!r}")
        touch(root)
        root.const = array
        if root.kind is None:
            root.set_kind(kind)
        self._graph.solve()

    # -- keys ------------------------------------------------------------------------------------
    def _interface(self) -> dict[str, Value]:
        """Named keys plus ``input``/``output`` for unnamed canonical keys."""
        keys = dict(self._keys)
        named = {id(v.find()) for v in keys.values()}
        if (
            self._cin is not None
            and "input" not in keys
            and id(self._cin.find()) not in named
            and self._cin.find().producer is None
        ):
            keys["input"] = self._cin
        if self._cout is not None and "output" not in keys and id(self._cout.find()) not in named:
            keys["output"] = self._cout
        return keys

    def __getattr__(self, name: str) -> Connection:
        if name.startswith("_"):
            raise MissingAttributeError(f"{type(self).__name__} has no attribute {name!r}")
        iface = self._interface()
        name = name if name in iface else self._alias(name)
        if name in iface:
            return Connection(self, name)
        group = self.__dict__.get("_key_groups", {}).get(name)
        if group is not None:  # a list-valued key (Split's output): model.split_out[0]
            return tuple(group)  # type: ignore[return-value]
        raise MissingAttributeError(
            f"{type(self).__name__} has no attribute or key {name!r}; keys: {sorted(self._interface())}"
        )

    def _is_output(self, key: str, value: Value) -> bool:
        if self._role_snapshot is not None and key in self._role_snapshot:
            return self._role_snapshot[key]
        return value.find().producer is not None

    @property
    def input_keys(self) -> list[str]:
        """Named keys that are not produced inside the model (data, parameters, constants)."""
        return [k for k, v in self._interface().items() if not self._is_output(k, v)]

    @property
    def _hidden(self) -> set[str]:
        """Keys that are not outputs even when produced inside: ``IOKey(expose=False)``, and under Mithril's
        exposure rule every key that was not exposed."""
        if self._exposed is None:
            return self._hidden_keys
        return self._hidden_keys | {k for k in self._interface() if k not in self._exposed}

    @property
    def output_keys(self) -> list[str]:
        """Keys produced inside the model and exposed.

        Two rules, one per style of code. The manual's: every output named by a string or an ``IOKey`` is
        exposed (and an unnamed canonical output as ``"output"``). Mithril's published API's: once a model
        calls :meth:`expose_keys` or names an output with ``IOKey(name, expose=True)``, only the keys exposed
        that way are outputs; outputs named otherwise are internal connections (still usable as
        ``model.name``). A plain ``IOKey("name")`` output keeps the manual's rule, so code mixing strings and
        IOKeys keeps every named output."""
        hidden = self._hidden
        return [k for k, v in self._interface().items() if self._is_output(k, v) and k not in hidden]

    @classmethod
    def create(cls, *args: Any, name: str | None = None, **outputs: Any) -> Model:
        """A model from values written in Mithril's functional style: models called with their inputs
        (``Linear(8)(input=IOKey("input"))``), connection arithmetic and symbolic dims. Each keyword names an
        output (``Model.create(embeddings=h, height=shape[2])``); a positional value is the output
        ``"output"`` (``"output_0"``, ``"output_1"``... for several). IOKeys in the values become the model's
        inputs. The first output is the canonical one; the model is frozen, as Mithril's is.

        >>> from mithril.models import IOKey, Linear, Model, Relu
        >>> hidden = Relu()(input=Linear(8)(input=IOKey("input")))
        >>> block = Model.create(hidden, name="mlp")
        >>> block.input_keys[:1], block.output_keys
        (['input'], ['output'])
        """
        if len(args) == 1:
            outputs = {"output": args[0], **outputs}
        else:
            outputs = {**{f"output_{i}": value for i, value in enumerate(args)}, **outputs}
        if not outputs:
            raise ArgumentError(f"{cls.__name__}.create: give at least one output value")
        model = cls(name=name)
        where = f"{cls.__name__}.create"
        with model._transaction():
            for key, value in outputs.items():
                built = materialize_expression(value, model)
                if isinstance(built, IOKey):  # an input passed straight through
                    built = materialize_expression(Expr("index", (built,), {"key": Ellipsis}), model)
                if not isinstance(built, Connection):
                    raise ArgumentError(f"{where}: output {key!r} must be a tensor value of the model, got {value!r}")
                model._bind_name(key, built.value, f"{where}({key}=...)")
            model.expose_keys(*outputs)
            model.set_cout(next(iter(outputs)))
        return model.freeze()

    def expose_keys(self, *keys: str | Connection, **named: str | Connection) -> Model:
        """Make keys outputs of this model (Mithril's exposure rule, see :attr:`output_keys`):
        ``model.expose_keys("output")``, or ``model.expose_keys(logits=model.cout)`` to name a connection.

        >>> from mithril.models import Add, Model, Relu
        >>> model = Model()
        >>> model |= Add()(left="x", right="y", output="s")
        >>> model |= Relu()(input="s", output="r")
        >>> _ = model.expose_keys("r")
        >>> model.output_keys
        ['r']
        """
        with self._transaction():
            exposed = set(self._exposed or ())
            for key in keys:
                if isinstance(key, Connection):
                    name = self._name_of(key, "expose_keys")
                else:
                    self._resolve(key, "expose_keys")
                    name = self._alias(key) if key not in self._interface() else key
                exposed.add(name)
            for name, key in named.items():
                self._bind_name(name, self._resolve(key, "expose_keys"), f"{self._path()}.expose_keys({name}=...)")
                exposed.add(name)
            for name in exposed:
                value = self._interface()[name].find()
                if value.producer is None:
                    raise ModelConnectionError(
                        f"{self._path()}.expose_keys({name!r}): an input is always a key of the model; only outputs "
                        "are exposed"
                    )
            self._hidden_keys -= exposed
            self._exposed = exposed
        return self

    def _name_of(self, connection: Connection, where: str) -> str:
        """The key of this model ``connection`` is bound to (an unnamed one gets a name from its owner's key)."""
        value = self._resolve(connection, where)
        for key, v in self._interface().items():
            if v.find() is value.find():
                return key
        name = connection.key if connection.key not in self._interface() else f"{connection.key}_{len(self._keys)}"
        self._bind_name(name, value, f"{self._path()}.{where}")
        return name

    @property
    def cin(self) -> Connection:
        """The canonical input (what ``+=`` connects the previous output to)."""
        return self._canonical(self._cin, "input")

    @property
    def cout(self) -> Connection:
        """The canonical output (what ``+=`` connects to the next model's canonical input)."""
        return self._canonical(self._cout, "output")

    def set_cin(self, key: str | Connection) -> Model:
        """Make ``key`` the canonical input (what ``+=`` and ``model.cin`` use)."""
        with self._transaction():
            value = self._resolve(key, "set_cin")
            if value.find().producer is not None:
                raise ModelConnectionError(
                    f"{self._path()}.set_cin({key!r}): the canonical input must be an input of the model"
                )
            self._cin = value
        return self

    def set_cout(self, key: str | Connection) -> Model:
        """Make ``key`` the canonical output (what ``+=`` and ``model.cout`` use).

        >>> from mithril.models import Linear, Model
        >>> model = Model()
        >>> model |= Linear(2)(input="x", output="a")
        >>> model |= Linear(3)(input="x", output="b")
        >>> model.set_cout("a").cout.key
        'a'
        """
        with self._transaction():
            self._cout = self._resolve(key, "set_cout")
        return self

    def _canonical(self, value: Value | None, kind: str) -> Connection:
        if value is None:
            raise ModelKeyError(f"{self._path()} has no canonical {kind}")
        for key, v in self._interface().items():
            if v.find() is value.find():
                return Connection(self, key)
        raise ModelKeyError(f"{self._path()}: its canonical {kind} has no name")

    # -- constraints -----------------------------------------------------------------------------
    def _resolve(self, key: str | Connection, where: str) -> Value:
        if isinstance(key, Connection):
            if not self._owns(key.model):
                raise ModelConnectionError(f"{where}: {key!r} is not part of {self._path()}")
            return key.value
        iface = self._interface()
        key = key if key in iface else self._alias(key)
        if key not in iface:
            raise ModelKeyError(f"{where}: {self._path()} has no key {key!r}; its keys are {sorted(iface)}")
        return iface[key]

    def _items(self, mapping: Mapping[Any, Any] | None, kwargs: Mapping[str, Any]) -> Iterable[tuple[Any, Any]]:
        return [*(mapping or {}).items(), *kwargs.items()]

    def set_shapes(self, mapping: Mapping[str | Connection, Any] | None = None, **shapes: Any) -> Model:
        """Constrain shapes with templates; symbols (strings) are shared within one call.

        >>> from mithril.models import Add
        >>> add = Add()
        >>> _ = add.set_shapes(left=["N", 4], right=["N", 4])
        """
        symbols: dict[str, object] = {}
        with self._transaction():
            for key, template in self._items(mapping, shapes):
                self._unify_template(
                    self._resolve(key, "set_shapes"), template, symbols, f"{self._path()}.set_shapes({key!r})"
                )
        return self

    def set_types(self, mapping: Mapping[str | Connection, Any] | None = None, **types: Any) -> Model:
        """Set kinds: ``float``/``int``/``bool``, an ``ml.Dtype`` or ``ml.Tensor[float]`` (``ml.Tensor`` or
        ``ml.Tensor[int | float | bool]`` leave the kind open, as in Mithril).

        >>> from mithril.models import Add
        >>> import mithril as ml
        >>> _ = Add().set_types(left=ml.Tensor[float], right=ml.Tensor)
        """
        with self._transaction():
            for key, type_ in self._items(mapping, types):
                where = f"{self._path()}.set_types({key!r})"
                value = self._resolve(key, "set_types")
                kind = tensor_kind(type_)
                if kind is None and (type_ is Tensor or isinstance(type_, _TensorOf)):
                    continue  # a tensor of any kind: nothing to constrain
                self._set_kind(value, parse_kind(kind, where), where)
        return self

    def set_values(self, mapping: Mapping[str | Connection, Any] | None = None, **values: Any) -> Model:
        """Give inputs constant values (folded at compile time). A list-valued key (``Concat``'s ``input``)
        takes a list, one value per member (``ml.Tensor[float](differentiable=True)`` declares a member
        trainable); a model that sizes the list from it (``Concat``) takes as many members as given."""
        with self._transaction():
            for key, value in self._items(mapping, values):
                where = f"{self._path()}.set_values({key!r})"
                members = self.__dict__.get("_key_groups", {}).get(key) if isinstance(key, str) else None
                if members is not None and isinstance(value, (list, tuple)):
                    if len(value) != len(members):
                        members = self._resize_key_group(key, len(value), where)
                    for member, item in zip(members, value, strict=True):
                        self._set_constant(member.value, item, where)
                    continue
                self._set_constant(self._resolve(key, "set_values"), value, where)
        return self

    def _resize_key_group(self, key: str, size: int, where: str) -> tuple[Connection, ...]:
        """Hook for models whose list-valued key takes any number of members (``Concat``): rebuild with
        ``size`` members and return them. Other models have a fixed number."""
        members = self.__dict__["_key_groups"][key]
        raise ArgumentError(f"{where}: {key!r} is a list of {len(members)} values, got {size}")

    def set_differentiability(self, mapping: Mapping[str | Connection, bool] | None = None, **flags: bool) -> Model:
        """``True`` makes an input a trainable parameter; ``False`` makes it runtime data."""
        with self._transaction():
            for key, flag in self._items(mapping, flags):
                value = self._resolve(key, "set_differentiability").find()
                if value.producer is not None:
                    raise ModelConnectionError(f"{self._path()}.set_differentiability({key!r}): only inputs can be set")
                touch(value)
                value.differentiable = bool(flag)
        return self

    def set_buffer_update(self, buffer: str | Connection, new_value: str | Connection) -> Model:
        """Declare ``new_value`` the next value of the buffer ``buffer`` (a state update, e.g. BatchNorm's
        running statistics in training mode).

        A compiled model returns it as the output ``"<buffer name>_new"``; ``pm.buffer_updates`` maps each
        buffer to its output and ``pm.update_buffers(params, outputs)`` applies them.

        >>> from mithril.models import Add, IOKey, Model
        >>> model = Model()
        >>> model |= Add()(left=IOKey("count", buffer=True, shape=[1]), right=1.0, output=IOKey("next"))
        >>> _ = model.set_buffer_update("count", "next")
        """
        with self._transaction():
            target = self._resolve(buffer, "set_buffer_update").find()
            if not target.buffer or target.producer is not None:
                raise ModelConnectionError(
                    f"{self._path()}.set_buffer_update({buffer!r}): not a buffer input (declare it with "
                    "IOKey(buffer=True))"
                )
            value = self._resolve(new_value, "set_buffer_update").find()
            if value.producer is None:
                raise ModelConnectionError(
                    f"{self._path()}.set_buffer_update({new_value!r}): the new value must be computed by the model"
                )
            touch(value)
            value.updates = target
            try:
                unify(value.shape, target.shape)
                self._graph.solve()
            except ShapeMismatch as exc:
                raise ShapeError(
                    f"{self._path()}.set_buffer_update({buffer!r}): the new value's shape {value.shape!r} differs from "
                    f"the buffer's {target.shape!r} ({exc})"
                ) from None
        return self

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """All-or-nothing changes to this model (see :mod:`mithril.journal`), with the cyclic GC paused."""
        with paused_gc(), transaction():
            touch(self)
            touch(self._graph)
            yield

    @property
    def shapes(self) -> dict[str, list[Any]]:
        """Shapes of the named keys: ints, ``"..."`` for a variadic part, and unknown dims by the readable
        names the summary shows (``batch``, ``seq``, ``<key>_<axis>``), never by internal ids.

        >>> from mithril.models import IOKey, Linear, Model
        >>> model = Model()
        >>> model |= Linear(16)(input=IOKey("tokens", shape=["N", "T", 8]))
        >>> print(model.shapes["output"])
        ['batch', 'seq', 16]
        """
        return ModelView(self).interface_shapes()

    def compile(self, backend: Any, **options: Any) -> Any:
        """``ml.compile(self, backend, **options)``: the Backends API page's ``model.compile(backend)``.

        >>> import mithril as ml
        >>> from mithril.models import Linear
        >>> pm = Linear(2).compile(ml.NumpyBackend(), shapes={"input": [1, 3]})   # doctest: +SKIP
        """
        return compile_model(self, backend, **options)

    # -- display: summary(), plot(), str() and the notebook views come from Displayable ---------
    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, keys={sorted(self._interface())})"


def _core_registry() -> Any:
    return registry(entry_points=False)
