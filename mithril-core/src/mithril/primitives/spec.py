"""What a primitive *is*: a name, its input/output keys, static attributes and its shape and type rules.

A primitive's implementation on each backend and its gradient rule live in their own registries
(:mod:`mithril.primitives.registry`), keyed by the same name. Everything about a primitive is found by
its name; nothing is spread over if/elif chains.

Example (a third-party primitive, registered through the ``mithril_register_primitives`` hook):
    >>> from mithril.extend import PrimitiveSpec, rules
    >>> spec = PrimitiveSpec(
    ...     name="sin_times_x",
    ...     inputs=("input",),
    ...     shape_rule=rules.same_shape,
    ...     type_rule=rules.float_result,
    ... )
    >>> spec.input_keys({})
    ('input',)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError
from ..shapes import Shape
from ..types import Kind
from ..validation import check_attributes

__all__ = ["REQUIRED", "PrimitiveSpec", "ShapeIO", "ShapeRule", "TypeRule"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default for an attribute the user must give (``Reshape(shape=...)``)."""


class ShapeIO(dict[str, Shape]):
    """Key -> :class:`Shape` for one primitive call, inputs and outputs alike.

    ``io["left"]``; ``io.out`` is the shape of the single output ``"output"``. Keys of absent optional
    inputs are missing (``"bias" in io`` is ``False``).
    """

    @property
    def out(self) -> Shape:
        return self["output"]


ShapeRule = Callable[[ShapeIO, Mapping[str, Any]], bool]
"""``rule(io, attrs) -> done``: refine shapes via :func:`~mithril.shapes.unify`; return ``True`` once the
rule can learn nothing more (it is then dropped), ``False`` to be re-run when shapes are refined.
Raise :class:`~mithril.shapes.ShapeMismatch` on a conflict."""

TypeRule = Callable[[Mapping[str, Kind | None], Mapping[str, Any]], Mapping[str, Kind] | None]
"""``rule(kinds, attrs) -> {output_key: kind}`` given the input kinds (``None`` = unknown), or ``None``
when it cannot tell yet."""

Keys = tuple[str, ...] | Callable[[Mapping[str, Any]], tuple[str, ...]]


@dataclass(frozen=True)
class PrimitiveSpec:
    """Registry entry describing one primitive.

    Attributes:
        name: registry name, snake_case (``"conv2d"``).
        inputs: input keys, or a function of the attributes (``concat`` takes ``n`` inputs).
        shape_rule: see :data:`ShapeRule`.
        type_rule: see :data:`TypeRule`.
        attributes: static attributes and their defaults (:data:`REQUIRED` when mandatory).
        outputs: output keys (``("output",)``), or a function of the attributes (``split``).
        optional_inputs: inputs that may be left out (``bias``); the backend receives ``None``.
        differentiable: inputs gradients flow through; ``None`` means all float inputs.
        outputs_without_gradient: outputs no gradient flows back from (``batch_norm2d``'s statistics).
        input_kinds: accepted kinds per input, e.g. ``{"index": ("int",)}``.
        random: draws random numbers (never folded or deduplicated).
        doc: one line saying what it computes, in NumPy terms.
        check_attributes: raises :class:`~mithril.errors.ArgumentError` (or ``ValueError``) naming the attribute
            when resolved attributes are invalid; run whenever attributes are resolved, after the checks every
            attribute of a common name gets (:data:`mithril.validation.ATTRIBUTE_CHECKS`: ``stride=0``,
            ``axis="x"``), so every use of the primitive is checked.
        decomposition: the primitive written with other primitives, for backends that do not implement it
            (C, GGML): a function ``(attrs, shapes) -> logical model`` (or its ``"module:function"`` path,
            imported on first use so core never imports the layer that defines it). ``shapes`` maps each
            input key to its dims (``None`` where unknown); the model has the primitive's input and output
            keys. ``ml.compile`` splices it in place of the call (:mod:`mithril.compiler.passes.decompose`).
        host_inputs: inputs read on the host as Python values (ints and tuples computed from ``x.shape``),
            never as arrays: under a JIT they stay static (:mod:`mithril.compiler.passes.host_values`).
        variant_of: the primitive this one *is*, with its ``host_inputs`` passed as that primitive's
            attributes at run time (``reshape_to`` is ``reshape`` with a shape computed from other tensors'
            shapes). Backends implement only the base; when the host inputs fold to constants ``ml.compile``
            calls the base primitive itself.
    """

    name: str
    inputs: Keys
    shape_rule: ShapeRule
    type_rule: TypeRule
    attributes: Mapping[str, Any] = field(default_factory=dict)
    outputs: Keys = ("output",)
    optional_inputs: frozenset[str] = frozenset()
    differentiable: tuple[str, ...] | None = None
    outputs_without_gradient: frozenset[str] = frozenset()
    input_kinds: Mapping[str, tuple[Kind, ...]] = field(default_factory=dict)
    random: bool = False
    doc: str = ""
    check_attributes: Callable[[Mapping[str, Any]], None] | None = None
    decomposition: str | Callable[..., Any] | None = None
    host_inputs: frozenset[str] = frozenset()
    variant_of: str | None = None

    def input_keys(self, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        return self.inputs(attrs) if callable(self.inputs) else self.inputs

    def output_keys(self, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        return self.outputs(attrs) if callable(self.outputs) else self.outputs

    @property
    def returns_tuple(self) -> bool:
        """Whether implementations return a tuple of outputs: with several output keys, or keys that depend
        on the attributes (``split`` with one section returns a 1-tuple).

        >>> from mithril.plugins import registry
        >>> registry().primitive("split").returns_tuple, registry().primitive("exp").returns_tuple
        (True, False)
        """
        return callable(self.outputs) or len(self.outputs) > 1

    def differentiable_keys(self, attrs: Mapping[str, Any]) -> tuple[str, ...]:
        keys = self.input_keys(attrs)
        if self.differentiable is None:
            return keys
        return tuple(k for k in keys if k in self.differentiable)

    def resolve_attributes(self, given: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """Defaults filled in, every attribute checked (:data:`mithril.validation.ATTRIBUTE_CHECKS` by name,
        then the spec's own ``check_attributes``) and normalised (NumPy ints -> ``int``). Unknown, missing
        or invalid attributes raise :class:`~mithril.errors.ArgumentError` naming the accepted ones.

        >>> from mithril.plugins import registry
        >>> registry().primitive("sum").resolve_attributes({"axis": 1})
        {'axis': 1, 'keepdim': False}
        """
        where = where or self.name
        unknown = set(given) - set(self.attributes)
        if unknown:
            accepted = ", ".join(self.attributes) or "none"
            raise ArgumentError(
                f"{where}: unknown attribute(s) {sorted(unknown)} for primitive {self.name!r}; accepted: {accepted}"
            )
        attrs = {**self.attributes, **given}
        missing = [k for k, v in attrs.items() if v is REQUIRED]
        if missing:
            raise ArgumentError(f"{where}: primitive {self.name!r} needs attribute(s) {missing}")
        check_attributes(where, attrs)
        if self.check_attributes is not None:
            try:
                self.check_attributes(attrs)
            except ArgumentError:
                raise
            except (ValueError, TypeError) as exc:  # third-party checks may raise the builtin errors
                raise ArgumentError(f"{where}: {exc}") from None
        return attrs
