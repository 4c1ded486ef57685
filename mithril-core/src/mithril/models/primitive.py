"""A logical model wrapping one registered primitive; its keys are the primitive's input/output keys.

Example:
    >>> from mithril.models import Primitive
    >>> Primitive("sum", axis=1).input_keys
    ['input']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError
from ..extension import register_primitive, registered_function
from ..framework.keys import Connection, IOKey
from ..framework.model import Model, snake_case
from ..lazy_plugins import registry

if TYPE_CHECKING:
    from ..primitives.spec import PrimitiveSpec

__all__ = ["Primitive"]


def _spec(name: str) -> PrimitiveSpec:
    reg = registry(entry_points=False)
    if name not in reg.primitives:  # may come from a third-party plugin
        reg = registry()
    return reg.primitive(name)


class Primitive(Model):
    """One primitive call as a model. ``Primitive("conv2d", stride=2)``.

    Optional inputs (``bias``, ``mask``) are keys like the others; left unconnected and not mentioned
    when compiling, they are treated as absent. Connect ``None`` to leave one out explicitly.

    A subclass may instead define the computation, as Mithril's published API writes custom operators:
    ``compute(self, inputs) -> {"output": ...}`` in backend ops on ``inputs["input"]`` (and, for
    backends without autograd such as NumPy, ``compute_grad(self, inputs, grad)``: the input's
    cotangent). The subclass becomes the primitive named after it (``SinTimeX`` -> ``sin_time_x``),
    runnable on every Python backend (see :func:`mithril.register_primitive`).

    >>> class Cube(Primitive):
    ...     def compute(self, inputs):
    ...         return {"output": inputs["input"] ** 3}
    >>> Cube().primitive_name
    'cube'
    """

    _constants: dict[str, Any]  # the primitive classes' keys given values at construction (primitive_models)

    def __init__(self, primitive: str | None = None, *, name: str | None = None, **attrs: Any) -> None:
        super().__init__(name=name)
        if primitive is None:
            primitive = type(self)._defined_primitive()
        spec = _spec(primitive)
        self.primitive_name = primitive
        resolved = spec.resolve_attributes(attrs, f"{type(self).__name__}({primitive!r})")
        inputs = {key: self._graph.new_value() for key in spec.input_keys(resolved)}
        node = self._graph.add_node(spec, resolved, dict(inputs))
        self._keys = {**inputs, **node.outputs}
        self._cin = next(iter(inputs.values()), None)
        self._cout = next(iter(node.outputs.values()))
        self.attributes = resolved

    @property
    def spec(self) -> PrimitiveSpec:
        return _spec(self.primitive_name)

    @classmethod
    def _defined_primitive(cls) -> str:
        """The primitive a subclass with ``compute`` defines (registered on first use)."""
        if "compute" not in _defining_attributes(cls):
            raise ArgumentError(
                f"{cls.__name__}() needs a primitive name ({cls.__name__}('relu')), or a subclass that defines "
                "compute(self, inputs) returning {'output': ...}"
            )

        name = snake_case(cls.__name__)
        if name in registry().primitives:
            owner = getattr(registered_function(name), "operator_class", None)
            if owner is cls:
                return name
            raise ArgumentError(
                f"{cls.__name__}: the primitive {name!r} its name gives is already defined "
                f"({'by ' + owner.__qualname__ if owner is not None else 'by the registry'}); rename the class"
            )
        blank: Any = object.__new__(cls)  # compute/compute_grad read their arguments, not the model

        def forward(backend: Any, input: Any) -> Any:
            return blank.compute({"input": input})["output"]

        forward.operator_class = cls  # type: ignore[attr-defined]
        register_primitive(name)(forward)
        if "compute_grad" in _defining_attributes(cls):

            def backward(backend: Any, input: Any, grad: Any) -> Any:
                return blank.compute_grad({"input": input}, grad)

            register_primitive(f"{name}_grad")(backward)
        return name

    def _rebuild(self, attrs: dict[str, Any]) -> None:
        """Build this model again in place with ``attrs`` changed (it is not connected to anything yet)."""
        Primitive.__init__(self, self.primitive_name, name=self.name, **{**self.attributes, **attrs})

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        """Static attributes given at connect time, as Mithril's published API passes them
        (``Sum().connect(x, axis=1)``, ``Cast().connect(x, dtype=ml.float16)``): the model is rebuilt with
        them before it is added. A key of the same name wins over an attribute."""
        attrs = {k: connections.pop(k) for k in list(connections) if k in self.attributes and k not in self._keys}
        for key, value in attrs.items():
            if isinstance(value, (Connection, IOKey)):
                raise ArgumentError(
                    f"{type(self).__name__}: {key!r} is a static attribute of {self.primitive_name!r}; it takes a "
                    f"value (a number, tuple, string or dtype), got {value!r}"
                )
        changed = {k: v for k, v in attrs.items() if not _same(self.attributes[k], v)}
        if changed:
            if self._parent is not None:
                raise ArgumentError(f"{type(self).__name__}: attributes cannot change once the model is added")
            self._rebuild(changed)
        return connections


def _defining_attributes(cls: type) -> set[str]:
    """Attributes defined by ``cls`` or its bases below :class:`Primitive`."""
    return {
        name for klass in cls.__mro__ if klass is not Primitive and issubclass(klass, Primitive) for name in vars(klass)
    }


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return a is b
