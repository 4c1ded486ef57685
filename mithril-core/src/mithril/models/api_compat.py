"""Blocks whose signatures follow Mithril's published API where it differs from the primitive table.

``ScaledDotProduct(is_causal=True, scale=None, use_attn_mask=False)`` (causal by default; the mask key is
``attn_mask`` and exists only with ``use_attn_mask=True``), ``Concat`` taking a list ``input`` (``axis=None``
flattens first), ``Split`` with one list-valued ``output`` (``split_out[0]``), ``SiLU``, and ``robust=`` on
``Power``, ``Sqrt`` and ``Log``. Our own names stay valid: ``Split(sections=3)``, ``Concat(n=2)`` with keys
``input_0``/``input_1``; ``Power(left=, right=)`` still works, deprecated for ``Power(base=, exponent=)``.

Example:
    >>> from mithril.models import Model, ScaledDotProduct, Split
    >>> ScaledDotProduct().input_keys, ScaledDotProduct().attributes["causal"]
    (['query', 'key', 'value'], True)
    >>> model = Model()
    >>> model |= Split(3, axis=-1).connect("qkv", output="split_out")
    >>> len(model.split_out)
    3
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import validation
from ..errors import ArgumentError, ShapeError
from ..framework.arithmetic import unify_run_time_shape
from ..framework.keys import TBD, Connection, Deferred, DimRef, DtypeOf, Expr, IOKey
from ..framework.model import Model, _Call
from ..framework.symbolic import has_dim_refs, reshape_target, static_shape
from . import primitive_models as _base
from .blocks._util import op
from .blocks.robust import checked_threshold, robust_log, robust_power, robust_sqrt
from .primitive import Primitive

__all__ = [
    "Arange",
    "Buffer",
    "Cast",
    "Concat",
    "Log",
    "Power",
    "Randn",
    "Reshape",
    "ScaledDotProduct",
    "SiLU",
    "Size",
    "Split",
    "Sqrt",
]


class ScaledDotProduct(Primitive):
    """``softmax(query @ key^T * scale + mask) @ value``, **causal by default** as in Mithril's published API.

    Args:
        is_causal: mask positions ``j > i`` (default ``True``; ``causal=`` is accepted as an alias).
        scale: defaults to ``1/sqrt(d)``.
        use_attn_mask: add the input key ``attn_mask`` (a bool keep-mask or an additive float mask that
            broadcasts to ``[..., Lq, Lk]``; ``mask`` is accepted as an alias). Without it the model has no
            mask input at all.

    Keys: ``query``, ``key``, ``value``, (``attn_mask``), ``output``.

    >>> ScaledDotProduct(is_causal=False, use_attn_mask=True).input_keys
    ['query', 'key', 'value', 'attn_mask']
    """

    def __init__(
        self,
        is_causal: bool = True,
        scale: float | None = None,
        use_attn_mask: bool = False,
        *,
        causal: bool | None = None,
        name: str | None = None,
    ) -> None:
        if causal is not None:
            is_causal = causal
        is_causal = validation.boolean("ScaledDotProduct", "is_causal", is_causal)
        use_attn_mask = validation.boolean("ScaledDotProduct", "use_attn_mask", use_attn_mask)
        super().__init__("scaled_dot_product_attention", name=name, causal=is_causal, scale=scale)
        self.use_attn_mask = use_attn_mask
        keys = dict(self._keys)
        mask = keys.pop("mask")
        if use_attn_mask:
            output = keys.pop("output")
            keys["attn_mask"] = mask
            mask.find().differentiable = False  # an input the model needs (data), not an optional one left out
            keys["output"] = output
            self._aliases = {"mask": "attn_mask", "is_causal": "causal"}
        else:
            self._connect(mask, None, "ScaledDotProduct.attn_mask")
            self._aliases = {"is_causal": "causal"}
        self._keys = keys

    def _rebuild(self, attrs: dict[str, Any]) -> None:
        merged = {**self.attributes, **attrs}
        ScaledDotProduct.__init__(self, merged["causal"], merged["scale"], self.use_attn_mask, name=self.name)

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        if "is_causal" in connections:
            connections["causal"] = connections.pop("is_causal")
        return super()._connect_attributes(connections)




class Concat(Model):
    """``np.concatenate([input_0, ..., input_{n-1}], axis)``; ``axis=None`` flattens every input first.

    Mithril's published form takes the inputs as one list: ``Concat(axis=-1).connect(input=[a, b, c])``
    (the number of inputs follows the list). Keys: ``input_0`` ... ``input_{n-1}``, ``output``.

    >>> Concat(axis=1, n=3).input_keys
    ['input_0', 'input_1', 'input_2']
    """

    def __init__(self, axis: int | None = 0, n: int = 2, *, name: str | None = None) -> None:
        super().__init__(name=name)
        n = validation.positive_int("Concat", "n", n)
        self.attributes: dict[str, Any] = {"axis": axis, "n": n}
        parts: list[Any] = [IOKey(f"input_{i}") for i in range(n)]
        if axis is None:
            parts = [op(self, "reshape", part, shape=(-1,)) for part in parts]
        concat = Primitive("concat", n=n, axis=0 if axis is None else axis)
        self |= concat(**{f"input_{i}": part for i, part in enumerate(parts)}, output=IOKey("output"))
        self._cin = self._keys["input_0"]
        # Mithril's list-valued key: set_values(input=[...]) and, compiled, evaluate(data={"input": [...]})
        self.__dict__["_key_groups"] = {"input": tuple(Connection(self, f"input_{i}") for i in range(n))}

    def _resize_key_group(self, key: str, size: int, where: str) -> tuple[Connection, ...]:
        if self._parent is not None or size < 1:
            return super()._resize_key_group(key, size, where)
        Concat.__init__(self, self.attributes["axis"], size, name=self.name)
        group: tuple[Connection, ...] = self.__dict__["_key_groups"][key]
        return group

    def __call__(self, *args: Any, **connections: Any) -> _Call:
        if args and isinstance(args[0], (list, tuple)):  # Concat().connect([a, b], output=...)
            if "input" in connections:
                raise ArgumentError("Concat.connect: the input list is given positionally and as input=")
            connections["input"], args = args[0], args[1:]
        return super().__call__(*args, **connections)

    connect = __call__

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        inputs = connections.pop("input", None)
        axis = connections.pop("axis", self.attributes["axis"])
        n = self.attributes["n"]
        if (
            isinstance(inputs, Connection)
            and inputs.value.producer is not None
            and inputs.value.producer.spec.name in ("to_list", "to_tuple")
        ):
            node = inputs.value.producer  # Concat().connect(input=ToList(n).output): the list's members
            inputs = [node.inputs[f"input_{i}"] for i in range(node.attrs["n"])]
        if inputs is not None:
            if not isinstance(inputs, (list, tuple)) or not inputs:
                raise ArgumentError(
                    f"Concat: input takes a non-empty list of connections, names or constants, got {inputs!r}"
                )
            n = len(inputs)
            connections.update({f"input_{i}": target for i, target in enumerate(inputs)})
        if (axis, n) != (self.attributes["axis"], self.attributes["n"]):
            if self._parent is not None:
                raise ArgumentError("Concat: attributes cannot change once the model is added")
            Concat.__init__(self, axis, n, name=self.name)
        return connections


class Split(_base.Split):  # type: ignore[name-defined,misc]
    """``np.split(input, sections, axis)``. ``Split(3, axis=-1)``; ``split_size=`` is Mithril's name of
    ``sections``. Besides the keys ``output_0`` ... the model has Mithril's list-valued ``output``:
    ``model |= Split(3).connect(x, output="parts")`` names the list, ``model.parts[0]`` is the first part.
    """

    def __init__(self, *args: Any, split_size: int | None = None, name: str | None = None, **kwargs: Any) -> None:
        if split_size is not None:
            kwargs["sections"] = split_size
        super().__init__(*args, name=name, **kwargs)
        self.__dict__["_key_groups"] = {"output": [getattr(self, key) for key in self.output_keys]}


def _unary(name: str, doc: str, build: Any) -> type[Model]:
    def __init__(self: Model, *, name: str | None = None) -> None:
        Model.__init__(self, name=name)
        result = build(self, IOKey("input"))
        self.expose(result, "output")
        self._cin = self._keys["input"]
        self.set_shapes(input=[("S", ...)], output=[("S", ...)])  # shape-preserving

    return type(name, (Model,), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


Buffer = _unary(
    "Buffer",
    "``output = input`` (Mithril's ``Buffer``): gives an input, or any connection, a second name as an output.",
    lambda m, x: op(m, "index", x, key=Ellipsis),
)
SiLU = _unary("SiLU", "``input * sigmoid(input)`` (Swish).", lambda m, x: op(m, "multiply", x, op(m, "sigmoid", x)))


class _RobustUnary(Model):
    """A robust unary function of ``input`` with a ``threshold`` (the dtype's constant when ``None``): the
    subclass names the formula (a function of :mod:`~mithril.models.blocks.robust`) and the owner for errors."""

    _owner: str
    _formula: Callable[[Model, IOKey, float | None], Any]  # (model, input, threshold) -> output connection

    def __init__(self, threshold: float | None = None, *, name: str | None = None) -> None:
        super().__init__(name=name)
        threshold = checked_threshold(self._owner, threshold)
        self.attributes = {"threshold": threshold}
        self.expose(self._formula(self, IOKey("input"), threshold), "output")
        self._cin = self._keys["input"]
        self.set_shapes(input=[("S", ...)], output=[("S", ...)])


class RobustSqrt(_RobustUnary):
    """``sqrt(|input|)``, and ``|input| / sqrt(threshold)`` below ``threshold`` (Mithril's robust square root):
    ``Sqrt(robust=True, threshold=...)``, finite for every input and with a finite gradient at 0.
    ``threshold`` defaults to the smallest normal number of the dtype computed in (:mod:`mithril.numerics`).

    >>> Sqrt(robust=True, threshold=1e-20).input_keys
    ['input']
    """

    _owner = "Sqrt"
    _formula = staticmethod(robust_sqrt)


class RobustLog(_RobustUnary):
    """Mithril's robust log, ``Log(robust=True, threshold=...)``: ``log|input|``, and below ``threshold`` the
    tangent line ``log(threshold) + |input| / threshold - 1``: never NaN or ``-inf`` (at 0 about -709.4 in
    float64, -88.3 in float32), gradient ``1 / threshold`` there. ``threshold`` defaults to the smallest normal
    number of the dtype computed in (:mod:`mithril.numerics`).

    >>> Log(robust=True).input_keys
    ['input']
    """

    _owner = "Log"
    _formula = staticmethod(robust_log)


class RobustPower(Model):
    """``Power(robust=True)`` with Mithril's formula: ``|base| ** exponent``, except below the threshold
    ``t`` (the smallest normal number of the dtype computed in) where the power would be steeper than the line
    ``|base| / t`` (``|base| < t`` and ``exponent < 1 - log(t) / log|base|``): there ``|base| / t``, so
    ``0 ** (1/3)`` is 0 with a finite gradient. Never NaN (negative bases with fractional exponents). Keys
    ``base``, ``exponent`` (Mithril's names; ``left``/``right`` are deprecated aliases), ``output``.

    >>> Power(robust=True).input_keys
    ['base', 'exponent']
    """

    _deprecated_aliases: Mapping[str, str] = {"left": "base", "right": "exponent"}

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.expose(robust_power(self, IOKey("base"), IOKey("exponent")), "output")
        self._cin = self._keys["base"]


def _robust_variant(base: type[Primitive], robust_cls: type[Model]) -> type[Primitive]:
    def __new__(cls: type, *args: Any, robust: bool = False, **kwargs: Any) -> Any:
        if validation.boolean(base.__name__, "robust", robust):
            allowed = {"name", *(("threshold",) if issubclass(robust_cls, _RobustUnary) else ())}
            if args or set(kwargs) - allowed:
                raise ArgumentError(
                    f"{base.__name__}(robust=True) takes only {sorted(allowed)}, got {args!r} {sorted(kwargs)}"
                )
            return robust_cls(**kwargs)
        if "threshold" in kwargs:
            raise ArgumentError(f"{base.__name__}: threshold= is given only with robust=True")
        return Primitive.__new__(cls)

    def __init__(self: Primitive, *args: Any, robust: bool = False, **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)

    doc = f"{base.__doc__} ``robust=True`` gives {robust_cls.__name__}: {robust_cls.__doc__}"
    return type(
        base.__name__, (base,), {"__new__": __new__, "__init__": __init__, "__doc__": doc, "__module__": __name__}
    )


Power = _robust_variant(_base.Power, RobustPower)  # type: ignore[attr-defined]
Sqrt = _robust_variant(_base.Sqrt, RobustSqrt)  # type: ignore[attr-defined]
Log = _robust_variant(_base.Log, RobustLog)  # type: ignore[attr-defined]


class Size(Model):
    """``input.shape[dim]`` as an int scalar (Mithril's ``Size(dim=1)``), or ``input.size`` (the element count)
    when ``dim`` is ``None``. Read at run time, so it follows the batch and sequence length.

    >>> Size(dim=1).input_keys, Size(dim=1).output_keys
    (['input'], ['output'])
    """

    def __init__(self, dim: int | None = None, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.attributes = {"dim": dim}
        if dim is None:
            self |= Primitive("size")(input=IOKey("input"), output=IOKey("output"))
        else:
            dim = validation.axis("Size", "dim", dim, optional=False, multiple=False)
            shape = op(self, "shape", IOKey("input"))
            self |= Primitive("index", key=dim)(input=shape, output=IOKey("output"))
        self._cin = self._keys["input"]


def _axis_source(stop: Any) -> tuple[Any, int] | None:
    """``(tensor value, axis)`` when ``stop`` is the size of one axis of a tensor: ``Size(dim=d)``'s output,
    ``x.shape[d]`` or ``shape(x)[d]``; else ``None``."""
    if isinstance(stop, DimRef):
        return stop.source.value, stop.index
    if not isinstance(stop, Connection):
        return None
    node = stop.value.producer
    if node is None or node.spec.name != "index" or not isinstance(node.attrs["key"], int):
        return None
    indexed = node.inputs["input"]
    source = None if indexed is None else indexed.find().producer
    shaped = None if source is None or source.spec.name != "shape" else source.inputs["input"]
    if shaped is None:
        return None
    return shaped.find(), node.attrs["key"]


class Arange(Model):
    """``np.arange(start, stop, step)`` (Mithril's ``Arange``). ``stop`` is its canonical input: when not given
    at construction it is given at connect time, or by ``+=`` from the previous model's canonical output, also
    as the length of an axis of another tensor (``Size(dim=1)``'s output or ``x.shape[1]``): with ``start=0,
    step=1`` that is ``0 .. len-1`` read at run time (the ``positions`` primitive), so the model runs for any
    sequence length.

    >>> Arange(stop=4).output_keys
    ['output']
    >>> Arange(start=0, step=1).input_keys  # stop still to be given: `model += Size(dim=1); model += Arange()`
    ['stop']
    """

    def __init__(
        self, start: Any = 0, stop: Any = TBD, step: Any = 1, *, dtype: Any = None, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        if stop is None:
            stop = TBD
        self.attributes: dict[str, Any] = {"start": start, "stop": stop, "step": step, "dtype": dtype}
        self._canonical_attribute = "stop" if stop is TBD else None
        self._source: Any = None
        self._run_time: dict[str, Any] = {}
        if stop is TBD:  # a placeholder input until stop is connected (which rebuilds this model)
            self.apply_iokey(self._graph.new_value(), IOKey("stop"), "Arange.stop")
            self._cin = self._keys["stop"]
            return
        source = _axis_source(stop)
        if source is not None:
            if (start, step) != (0, 1):
                raise ArgumentError(
                    f"Arange(start={start!r}, step={step!r}) with a run-time stop: only start=0, step=1 are supported"
                )
            positions = Primitive("positions", axis=source[1])
            self |= positions(input=IOKey("_axis_of"), output=IOKey("output"))
            self._source = source[0]
            if dtype is not None:
                raise ArgumentError("Arange: dtype= with a run-time stop is not supported (the positions are int)")
            return
        self._source = None
        attrs = {"start": start, "stop": stop, "step": step}
        self._run_time = {k: v for k, v in attrs.items() if _is_run_time_value(v)}
        if self._run_time:  # bounds known only when the model runs (int keys, x.shape[1] + 1): host ints
            keys = {k: IOKey(k) if k in self._run_time else IOKey(k, value=v) for k, v in attrs.items()}
            self |= Primitive("arange_between")(**keys, output=IOKey("output" if dtype is None else "_arange"))
            if dtype is not None:
                self |= Primitive("cast", dtype=dtype)(input="_arange", output=IOKey("output"))
            self._cin = self._keys["stop"]
            return
        if dtype is not None:
            self |= Primitive("arange", **attrs)(output="_arange")
            self |= Primitive("cast", dtype=dtype)(input="_arange", output=IOKey("output"))
        else:
            self |= Primitive("arange", **attrs)(output=IOKey("output"))

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        given: dict[str, Any] = {k: connections.pop(k) for k in ("start", "stop", "step", "dtype") if k in connections}
        if given:
            if self._parent is not None:
                raise ArgumentError("Arange: attributes cannot change once the model is added")
            merged: dict[str, Any] = {**self.attributes, **given}
            Arange.__init__(self, **merged, name=self.name)
        if self._source is not None:
            connections["_axis_of"] = self._source
        for key, value in self._run_time.items():
            if value is not TBD:
                connections.setdefault(key, value)
        return connections


def _is_run_time_value(value: Any) -> bool:
    """Whether an attribute given as a value is known only when the model runs: a key still to be given
    (``TBD``, an ``IOKey``), a connection, or a symbolic dim (``x.shape[1] + 1``)."""
    return value is TBD or isinstance(value, (IOKey, Connection, DimRef, Deferred))


class Reshape(_base.Reshape):  # type: ignore[name-defined,misc]
    """``input.reshape(shape)``; ``shape`` may hold symbolic dims (``x.shape[0]``, see
    :mod:`mithril.framework.symbolic`) and may be given at connect time, as Mithril's published API does:
    ``Reshape().connect(input=x, shape=(shp[0], shp[1], 4, -1))``.
    """

    def __init__(self, shape: Any = None, *, name: str | None = None, **kwargs: Any) -> None:
        self._shape_pending = shape is None
        self._symbolic_shape = shape if has_dim_refs(shape) else None  # resolved once the input is known
        if self._symbolic_shape is not None:
            shape, self._shape_pending = None, True
        super().__init__(shape=(-1,) if shape is None else shape, name=name, **kwargs)

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        if self._symbolic_shape is not None and "shape" not in connections:
            connections["shape"] = self._symbolic_shape
        if has_dim_refs(connections.get("shape")):
            try:
                connections["shape"] = reshape_target(connections["shape"], connections.get("input"))[0]
            except ShapeError:  # dims known only when it runs: reshape_to with the shape computed then
                _run_time_shape(self, "reshape_to", connections)
                return connections
        if self._shape_pending and "shape" not in connections:
            raise ArgumentError("Reshape: give shape=, at construction or in .connect(...)")
        pending, self._shape_pending = self._shape_pending, False
        try:
            connected: dict[str, Any] = super()._connect_attributes(connections)
            return connected
        except Exception:
            self._shape_pending = pending
            raise


def _run_time_shape(model: Primitive, primitive: str, connections: dict[str, Any]) -> None:
    """Rebuild ``model`` as ``primitive`` (``reshape_to``, ``randn_of``), whose ``shape`` key takes the
    symbolic dims given in ``connections`` as one tuple computed when the model runs."""
    if model._parent is not None:
        raise ArgumentError(f"{type(model).__name__}: attributes cannot change once the model is added")

    entries = tuple(connections["shape"])
    if primitive == "reshape_to":  # None keeps the input's dim at that position
        source = connections.get("input")
        if None in entries and not isinstance(source, Connection):
            raise ArgumentError(
                f"{type(model).__name__}: a None entry in shape={entries!r} needs the input given as a connection"
            )
        entries = tuple(DimRef(source, j) if e is None else e for j, e in enumerate(entries))
    attrs = (
        {"inferred": next((j for j, e in enumerate(entries) if isinstance(e, int) and e == -1), None)}
        if primitive == "reshape_to"
        else {}
    )
    Primitive.__init__(model, primitive, name=model.name, **attrs)
    unify_run_time_shape(model, model._keys["output"], entries, f"{type(model).__name__}(shape={entries!r})")
    connections["shape"] = Expr("to_tuple", entries, {"n": len(entries)})


class Cast(_base.Cast):  # type: ignore[name-defined,misc]
    """``input.astype(dtype)``. ``dtype=x.dtype()`` of a key whose type is known only once the model is
    compiled casts to that tensor's dtype when the model runs (``cast_like``), as Mithril's CLIP example casts
    its layer norm back to the input's dtype.

    >>> from mithril.models import IOKey
    >>> Cast().connect(input="input", dtype=IOKey("input").dtype()).model.input_keys
    ['input', 'like']
    """

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        dtype = connections.get("dtype")
        if isinstance(dtype, DtypeOf):
            if dtype.known() is not None:
                connections["dtype"] = dtype.known()
            else:
                if self._parent is not None:
                    raise ArgumentError("Cast: attributes cannot change once the model is added")
                del connections["dtype"]
                Primitive.__init__(self, "cast_like", name=self.name)
                connections["like"] = dtype.source
                return connections
        connected: dict[str, Any] = super()._connect_attributes(connections)
        return connected


class Randn(_base.Randn):  # type: ignore[name-defined,misc]
    """Standard normal samples of ``shape``. Symbolic dims (``x.shape[0]``) known now are taken by their
    value; given at connect time, others are read when the model runs (``Randn().connect(shape=(B, 1, d))``,
    as Mithril's CLIP example draws its class-token noise)."""

    _shape_pending: bool  # no shape given yet (set in ``__init__``)

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        if self._shape_pending and "shape" not in connections:
            raise ArgumentError("Randn: give shape=, at construction or in .connect(...)")
        self._shape_pending = False
        if has_dim_refs(connections.get("shape")):
            try:
                connections["shape"] = static_shape("Randn", connections["shape"])
            except ShapeError:
                _run_time_shape(self, "randn_of", connections)
                return connections
        connected: dict[str, Any] = super()._connect_attributes(connections)
        return connected

    def __init__(self, *args: Any, shape: Any = None, name: str | None = None, **kwargs: Any) -> None:
        self._shape_pending = shape is None and not args
        if has_dim_refs(shape):
            shape = static_shape("Randn", shape)
        if shape is not None:
            kwargs["shape"] = shape
        elif self._shape_pending:
            kwargs["shape"] = ()  # a placeholder until .connect(shape=...) rebuilds the model
        super().__init__(*args, name=name, **kwargs)
