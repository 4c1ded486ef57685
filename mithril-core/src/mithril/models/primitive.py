"""A logical model wrapping one registered primitive; its keys are the primitive's input/output keys.

Example:
    >>> from mithril.models import Primitive
    >>> Primitive("sum", axis=1).input_keys
    ['input']
"""

from __future__ import annotations

from typing import Any

from ..framework.model import Model

__all__ = ["Primitive"]


def _spec(name: str):
    from ..plugins import registry

    reg = registry(entry_points=False)
    if name not in reg.primitives:  # may come from a third-party plugin
        reg = registry()
    return reg.primitive(name)


class Primitive(Model):
    """One primitive call as a model. ``Primitive("conv2d", stride=2)``.

    Optional inputs (``bias``, ``mask``) are keys like the others; left unconnected and not mentioned
    when compiling, they are treated as absent. Connect ``None`` to leave one out explicitly.
    """

    def __init__(self, primitive: str, *, name: str | None = None, **attrs: Any) -> None:
        super().__init__(name=name)
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
    def spec(self):
        return _spec(self.primitive_name)

    def _rebuild(self, attrs: dict[str, Any]) -> None:
        """Build this model again in place with ``attrs`` changed (it is not connected to anything yet)."""
        Primitive.__init__(self, self.primitive_name, name=self.name, **{**self.attributes, **attrs})

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        """Static attributes given at connect time, as Mithril's published API passes them
        (``Sum().connect(x, axis=1)``, ``Cast().connect(x, dtype=ml.float16)``): the model is rebuilt with
        them before it is added. A key of the same name wins over an attribute."""
        from ..errors import ArgumentError
        from ..framework.keys import Connection, IOKey

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


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return a is b
