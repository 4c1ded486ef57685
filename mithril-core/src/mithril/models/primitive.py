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
