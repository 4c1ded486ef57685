"""Keys and connections: how a child model's keys are wired into its parent.

``IOKey`` names (and constrains) a key; a :class:`Connection` is a handle to an existing key of a model
(``linear.output``) and supports arithmetic and indexing that create primitives.

Example:
    >>> from mithril.framework.keys import IOKey
    >>> IOKey("x", shape=["N", 4]).name
    'x'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import initializers, validation
from ..errors import ArgumentError, DtypeError, MithrilError, ShapeError
from ..primitives import operators
from .tensor_types import describe_shape, parse_kind, tensor_kind

if TYPE_CHECKING:
    from ..compiler.graph import Value
    from .model import Model

__all__ = [
    "INITIALISERS",
    "TBD",
    "Connection",
    "Deferred",
    "DimRef",
    "DtypeOf",
    "Expr",
    "IOKey",
    "KeyShape",
    "Operators",
    "ShapeRef",
    "known_rank",
    "materialize_expression",
    "register_expression_builder",
]  # fmt: skip

INITIALISERS = (None, *initializers.SPECS)
"""What ``IOKey(init=...)`` takes (see :mod:`mithril.initializers`)."""


class _TBD:
    def __repr__(self) -> str:
        return "TBD"


TBD: Any = _TBD()
"""A value that is not given yet (the default of ``IOKey.value``)."""


def _sequence(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``x.reshape(2, 3)`` and ``x.reshape((2, 3))`` alike: one tuple/list argument or the arguments."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


class _ExpressionBuilder:
    """Where connection arithmetic is built. Keys sit below the models that arithmetic creates (primitives are
    models), so :mod:`mithril.framework.arithmetic` registers its ``apply``/``materialize`` here when imported
    (``import mithril`` does); nothing else is ever stored."""

    apply: Callable[[str, Sequence[Any], dict[str, Any]], Any] | None = None
    materialize: Callable[[Any, Model], Any] | None = None


def register_expression_builder(
    apply: Callable[[str, Sequence[Any], dict[str, Any]], Any], materialize: Callable[[Any, Model], Any]
) -> None:
    """Install the functions that build connection arithmetic into models (called by
    :mod:`mithril.framework.arithmetic`; registering again replaces them)."""
    _ExpressionBuilder.apply, _ExpressionBuilder.materialize = apply, materialize


def _builder() -> type[_ExpressionBuilder]:
    if _ExpressionBuilder.apply is None:
        raise MithrilError("connection arithmetic needs mithril.framework.arithmetic imported (import mithril does)")
    return _ExpressionBuilder


def materialize_expression(target: Any, model: Model) -> Any:
    """Build an :class:`Expr` into ``model`` and return the connection to its result (see
    :func:`mithril.framework.arithmetic.materialize`)."""
    materialize = _builder().materialize
    assert materialize is not None
    return materialize(target, model)


def _emit(op: str, *args: Any, **attrs: Any) -> Any:
    apply = _builder().apply
    assert apply is not None
    return apply(op, args, attrs)


class Operators:
    """The expression API shared by :class:`Connection`, :class:`IOKey` and :class:`Expr`.

    On a connection each operator adds a primitive to the model tree that owns it and returns a
    connection; on an ``IOKey`` (or an expression of IOKeys and constants) it returns an :class:`Expr`,
    built into the model it is connected to: ``Sigmoid().connect(IOKey("input") * 1.702)``.
    """

    __slots__ = ()

    _emit = staticmethod(_emit)  # what the operators made by mithril.primitives.operators call

    # arithmetic
    __add__, __radd__ = operators.binary("add"), operators.reflected("add")
    __sub__, __rsub__ = operators.binary("subtract"), operators.reflected("subtract")
    __mul__, __rmul__ = operators.binary("multiply"), operators.reflected("multiply")
    __truediv__, __rtruediv__ = operators.binary("divide"), operators.reflected("divide")
    __floordiv__ = operators.binary("floor_divide")
    __pow__, __rpow__ = operators.binary("power"), operators.reflected("power")
    __matmul__, __rmatmul__ = operators.binary("matmul"), operators.reflected("matmul")
    __neg__, __abs__ = operators.unary("neg"), operators.unary("abs")
    __gt__, __ge__ = operators.binary("greater"), operators.binary("greater_equal")
    __lt__, __le__ = operators.binary("less"), operators.binary("less_equal")
    __and__, __or__ = operators.binary("logical_and"), operators.binary("logical_or")
    __xor__, __invert__ = operators.binary("logical_xor"), operators.unary("logical_not")
    eq = operators.binary("equal")
    """Elementwise ``==`` (``__eq__`` stays identity so connections can live in sets and dicts)."""
    ne = operators.binary("not_equal")

    def __getitem__(self, key: Any) -> Any:
        return _emit("index", self, key=key)

    @property
    def T(self) -> Any:
        return _emit("transpose", self, axes=None)

    def transpose(self, *axes: int, **given: Any) -> Any:
        """``x.transpose((1, 0))``, ``x.transpose(1, 0)`` or Mithril's ``x.transpose(axes=(1, 0))``."""
        if "axes" in given:
            value = given.pop("axes")
            axes = () if value is None else (value,)
        return _emit("transpose", self, axes=_sequence(axes) or None, **given)

    def reshape(self, *shape: Any, **given: Any) -> Any:
        """``x.reshape((2, -1))``, ``x.reshape(2, -1)`` or Mithril's ``x.reshape(shape=(2, -1))``."""
        if "shape" in given:
            shape = (given.pop("shape"),)
        return _emit("reshape", self, shape=_sequence(shape), **given)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any:
        return _emit("flatten", self, start_dim=start_dim, end_dim=end_dim)

    def swapaxes(self, axis1: int, axis2: int) -> Any:
        return _emit("swapaxes", self, axis1=axis1, axis2=axis2)

    sum, mean = operators.reduction("sum"), operators.reduction("mean")
    max, min = operators.reduction("max"), operators.reduction("min")
    prod, argmax = operators.reduction("prod"), operators.reduction("argmax")

    def var(self, axis: Any = None, keepdim: bool = False, correction: int = 0) -> Any:
        return _emit("var", self, axis=axis, keepdim=keepdim, correction=correction)

    exp, log, sqrt = operators.unary("exp"), operators.unary("log"), operators.unary("sqrt")
    tanh, sin, cos = operators.unary("tanh"), operators.unary("sin"), operators.unary("cos")
    sigmoid, relu, abs = operators.unary("sigmoid"), operators.unary("relu"), operators.unary("abs")

    def cast(self, dtype: Any) -> Any:
        if isinstance(dtype, DtypeOf):
            if dtype.known() is None:  # x.cast(y.dtype()) with y's type known only when the model runs
                return _emit("cast_like", self, dtype.source)
            dtype = dtype.known()
        return _emit("cast", self, dtype=dtype)

    def dtype(self) -> DtypeOf:
        """This value's element kind, for ``other.cast(x.dtype())`` (resolved when the cast is built)."""
        return DtypeOf(self)


@dataclass(frozen=True)
class IOKey(Operators):
    """Name a key and optionally constrain it.

    An IOKey is also an expression: ``IOKey("input") * 1.702`` is an :class:`Expr` built into the model it
    is connected to (the IOKey's name becomes a key there).

    Args:
        name: the key's name in the parent (exposed when it is an output); ``None`` keeps it unnamed.
        shape: a shape template (``["N", ("V", ...), 4]``; strings are symbols shared within this key).
        type: ``"float"``, ``"int"``, ``"bool"``, ``float``/``int``/``bool`` or an ``ml.Dtype``.
        value: a constant (folded at compile time).
        differentiable: ``True`` makes an input a trainable parameter, ``False`` runtime data.
        expose: ``False`` keeps a named output internal.
        init: how ``randomize_params`` fills a parameter: ``"fan_in"`` (uniform +-1/sqrt(fan_in), PyTorch's
            Linear/Conv default), ``"ones"``, ``"zeros"`` or ``"normal"`` (std 0.02).
        buffer: ``True`` makes an input non-trainable state (PyTorch's buffers, e.g. BatchNorm running
            statistics): it travels with the parameters (``randomize_params``, ``load_params``, the
            ``params`` of ``evaluate``) but is never differentiated.
    """

    name: str | None = None
    shape: Sequence[Any] | None = None
    type: Any = None
    value: Any = TBD
    differentiable: bool | None = None
    expose: bool | None = None
    init: str | None = None
    buffer: bool = False

    def __post_init__(self) -> None:

        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise ArgumentError(f"IOKey: name must be a non-empty string or None, got {self.name!r}")
        where = f"IOKey({self.name!r})"
        object.__setattr__(self, "type", tensor_kind(self.type))  # ml.Tensor[float] -> "float"
        if self.template is not None:
            object.__setattr__(self, "shape", validation.shape_template(where, "shape", self.template))
        if self.type is not None:
            parse_kind(self.type, where)
        initializers.check(f"{where}: init", self.init)
        for flag in ("differentiable", "expose"):
            if getattr(self, flag) is not None:
                validation.boolean(where, flag, getattr(self, flag))
        validation.boolean(where, "buffer", self.buffer)
        if self.buffer and self.differentiable:
            raise ArgumentError(f"{where}: a buffer is never differentiated; drop differentiable=True or buffer=True")

    @property
    def template(self) -> list[Any] | None:
        """The shape template given as ``shape=`` (``None`` when none was given)."""
        return self.__dict__.get("_shape_template")


class _ShapeField:
    """``IOKey.shape``: the template given as ``shape=``; without one, the key's symbolic shape as Mithril's
    published API uses it (``B = IOKey("queries").shape[0]``, resolved once the key is in a model). It then
    compares equal to ``None`` and is falsy, like the absent template it stands for."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return None  # the dataclass field's default
        template = obj.__dict__.get("_shape_template")
        if template is not None:
            return template
        return KeyShape(obj)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["_shape_template"] = None if isinstance(value, KeyShape) else value


IOKey.shape = _ShapeField()  # type: ignore[assignment]  # after @dataclass, which reads the default None


class Connection(Operators):
    """A handle to key ``key`` of ``model``; usable as a connection target and in expressions.

    ``a + b``, ``a @ b``, ``a[0]``, ``a.T``, ``a.reshape(2, -1)``, ``a.sum(axis=1)`` add primitives to the
    model tree that owns ``a`` and return a connection to the result.
    """

    __slots__ = ("key", "model")

    def __init__(self, model: Model, key: str) -> None:
        self.model = model
        self.key = key

    @property
    def value(self) -> Value:
        return self.model._interface()[self.key].find()

    @property
    def shape(self) -> Any:
        """The symbolic shape (:class:`~mithril.framework.symbolic.ShapeRef`): compares equal to the list of
        dims known now; ``conn.shape[0]`` is usable in ``reshape``."""
        return ShapeRef(self)

    def __repr__(self) -> str:
        return f"Connection({type(self.model).__name__}.{self.key}: {self.value.shape!r})"

    def __bool__(self) -> bool:
        raise ArgumentError(f"{self!r} has no truth value; use .eq()/.ne() for elementwise comparison, not ==/if")


class Deferred(Operators):
    """Something built into a model only when it is used there: an :class:`Expr` (``IOKey("x") * 2``) or a
    model called with its inputs (``Linear(4)(input=x)``, Mithril's functional style). ``x.shape`` of one is
    symbolic (``x.shape[0]``), read from the model it is built into."""

    __slots__ = ()

    @property
    def shape(self) -> Any:
        return KeyShape(self)


class Expr(Deferred):
    """A deferred expression over IOKeys and constants (``IOKey("x") ** 2``): nothing is built until it is
    connected to a key of a model (``Relu().connect(expr)``) or combined with a connection, then each
    operation becomes a primitive in that model and IOKeys become its keys.

    >>> from mithril.framework.keys import IOKey
    >>> (IOKey("x") * 1.702).op
    'multiply'
    """

    __slots__ = ("args", "attrs", "op")

    def __init__(self, op: str, args: tuple[Any, ...], attrs: dict[str, Any]) -> None:
        self.op, self.args, self.attrs = op, args, attrs

    def __repr__(self) -> str:
        return (
            f"Expr({self.op}, "
            f"{self.args!r}{', ' if self.attrs else ''}{', '.join(f'{k}={v!r}' for k, v in self.attrs.items())})"
        )

    def __bool__(self) -> bool:
        raise ArgumentError(f"{self!r} has no truth value; use .eq()/.ne() for elementwise comparison, not ==/if")


class DtypeOf:
    """``x.dtype()``: the element kind of ``x``, resolved when it is used (``y.cast(x.dtype())``)."""

    __slots__ = ("source",)

    def __init__(self, source: Any) -> None:
        self.source = source

    def known(self) -> Any:
        """The kind when it is known now, else ``None`` (then ``cast_like`` casts when the model runs)."""
        return self.source.value.kind if isinstance(self.source, Connection) else None

    def resolve(self) -> Any:
        kind = self.known()
        if kind is None:
            raise DtypeError(
                f"{self.source!r}.dtype(): the element type is not known yet; set it with IOKey(type=...) or set_types"
            )
        return kind


# -- symbolic shapes: ``IOKey("x").shape[0]``, ``conn.shape`` (see mithril.framework.symbolic) ------
class KeyShape:
    """``IOKey("x").shape`` of a key given no template: indexing gives :class:`DimRef` values resolved when the
    reshape using them is built (``x`` must be a key of that model by then). Stands for "no template"
    elsewhere: equal to ``None`` and falsy."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, slice):
            if item.stop is None or any(v is not None and v < 0 for v in (item.start, item.stop)):
                raise ShapeError(
                    f"{self.key!r}.shape[{item.start}:{item.stop}]: the rank is not known; use explicit indices "
                    "(shp[:3])"
                )
            return tuple(DimRef(self.key, i) for i in range(*item.indices(item.stop)))
        if not isinstance(item, int):
            raise ArgumentError(f"shape[...] takes an int or a slice, got {item!r}")
        return DimRef(self.key, item)

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, KeyShape)

    def __hash__(self) -> int:
        return hash(None)

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "None"


def _dims(conn: Connection) -> list[Any]:
    return describe_shape(conn.value.shape)


def known_rank(conn: Connection) -> int | None:
    """The rank of ``conn``'s shape when it is known (no variadic part), else ``None``."""
    prefix, var, suffix = conn.value.shape.parts()
    return None if var is not None else len(prefix) + len(suffix)


class DimRef(Operators):
    """Dim ``index`` of ``source``'s shape (``shp[0]``): a connection, or an ``IOKey`` resolved by its name in
    the model where it is used; ``value`` is its int when known. Arithmetic on dims (``B * L``, ``n // 2 + 1``)
    gives an :class:`Expr` of them: a run-time int where it is used (see :mod:`mithril.framework.symbolic`)."""

    __slots__ = ("index", "source")

    def __init__(self, source: Any, index: int) -> None:
        self.source, self.index = source, index

    def bound(self, model: Any) -> DimRef:
        """This dim with an ``IOKey`` source replaced by the connection to that key of the model the IOKey was
        connected in (when it contains ``model``), else of the nearest model from ``model`` up that is still
        being built (not frozen) and has the key. So ``linear.output.reshape(IOKey("input").shape[0], ...)`` reads
        the block's ``input``, not the ``input`` of the ``Linear`` child that produced ``linear.output``."""
        if isinstance(self.source, Connection):
            return self
        if isinstance(self.source, Deferred):  # a called model or an expression: built into the tree's root
            while model._parent is not None:
                model = model._parent
            built = materialize_expression(self.source, model)
            if not isinstance(built, Connection):
                raise ShapeError(f"{self!r}: {self.source!r} is not one tensor, so it has no shape")
            return DimRef(built, self.index)
        name, start = self.source.name, model
        scope = self.source.__dict__.get("_scope")
        scope = scope() if scope is not None else None
        ancestor = model if scope is not None else None
        while ancestor is not None and ancestor is not scope:
            ancestor = ancestor._parent
        if ancestor is not None and name in ancestor._interface():  # the model the IOKey was connected in
            return DimRef(Connection(ancestor, name), self.index)
        # the key is one of a model still being built (children are frozen: their own "input" is not meant)
        while model is not None and (name is None or model.is_frozen or name not in model._interface()):
            model = model._parent
        if model is None:
            raise ShapeError(
                f"{self!r}: neither {start._path()} nor a model containing it has a key {name!r} to read the shape of; "
                "connect the IOKey first"
            )
        return DimRef(Connection(model, name), self.index)

    @property
    def value(self) -> int | None:
        if not isinstance(self.source, Connection):
            return None
        prefix, var, suffix = self.source.value.shape.parts()
        i = self.index
        if i >= 0:
            dims = prefix if var is not None else [*prefix, *suffix]
        else:
            dims, i = (suffix if var is not None else [*prefix, *suffix]), i
        try:
            return dims[i].value
        except IndexError:
            return None

    def __repr__(self) -> str:
        source = self.source
        name = (
            source.key if isinstance(source, Connection) else source.name if isinstance(source, IOKey) else repr(source)
        )
        return f"{name}.shape[{self.index}]"


class ShapeRef:
    """``conn.shape``: the symbolic shape of a connection. Indexing gives :class:`DimRef` values (usable in
    ``reshape``); iterating, ``len`` and ``==`` use the shape as known now (ints, ``"d<n>"`` symbols and
    ``"..."`` for an unknown number of dims)."""

    __slots__ = ("source",)

    def __init__(self, source: Connection) -> None:
        self.source = source

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, slice):
            rank = known_rank(self.source)
            negative = any(v is not None and v < 0 for v in (item.start, item.stop))
            if rank is None and (item.stop is None or negative):
                raise ShapeError(
                    f"{self.source!r}.shape[{item.start}:{item.stop}]: the rank is not known yet; use explicit indices "
                    "(shp[:3])"
                )
            return tuple(DimRef(self.source, i) for i in range(*item.indices(rank if rank is not None else item.stop)))
        if not isinstance(item, int):
            raise ArgumentError(f"shape[...] takes an int or a slice, got {item!r}")
        return DimRef(self.source, item)

    def __iter__(self) -> Iterator[Any]:
        return iter(_dims(self.source))

    def __len__(self) -> int:
        rank = known_rank(self.source)
        if rank is None:
            raise ShapeError(f"{self.source!r}: the rank is not known yet")
        return rank

    def __eq__(self, other: object) -> bool:
        return _dims(self.source) == (list(other) if isinstance(other, (list, tuple)) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(_dims(self.source))
