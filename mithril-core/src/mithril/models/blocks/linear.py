"""Dense layers: ``Linear`` (PyTorch weight layout ``[dimension, in_features]``) and ``MLP``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import initializers, validation
from ...errors import ArgumentError
from ...framework.keys import IOKey
from ...framework.model import Model
from ..primitive import Primitive
from ..primitive_models import Relu  # type: ignore[attr-defined]
from ._util import param

__all__ = ["MLP", "ElementWiseAffine", "Layer", "Linear"]


class Linear(Model):
    """``output = input @ weight.T + bias``; ``weight`` is ``[dimension, in_features]``.

    Args:
        dimension: output features; inferred from connections when ``None``.
        use_bias: add a ``bias`` parameter of shape ``[dimension]``.
        in_features: fix the input feature size (otherwise inferred from the input's last dim); also
            given at connect time as ``Linear(dimension=n)(input_size=m)``.
        weight_init, bias_init: how ``randomize_params`` draws them (:mod:`mithril.initializers`; default
            PyTorch's: uniform in ``+-1/sqrt(in_features)``).

    >>> Linear(10).input_keys
    ['input', 'weight', 'bias']
    """

    def __init__(
        self,
        dimension: int | None = None,
        use_bias: bool = True,
        *,
        in_features: int | None = None,
        weight_init: str | None = None,
        bias_init: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        dimension = validation.positive_int("Linear", "dimension", dimension, optional=True)
        in_features = validation.positive_int("Linear", "in_features", in_features, optional=True)
        use_bias = validation.boolean("Linear", "use_bias", use_bias)
        self |= Primitive("linear")(
            input=IOKey("input"),
            weight=param(
                "weight",
                shape=[dimension, in_features],
                init=initializers.check("Linear(weight_init=...)", weight_init) or "fan_in",
            ),
            bias=param(
                "bias", shape=[dimension], init=initializers.check("Linear(bias_init=...)", bias_init) or "fan_in"
            )
            if use_bias
            else None,
            output=IOKey("output"),
        )

    def _connect_attributes(self, connections: dict[str, Any]) -> dict[str, Any]:
        """``Linear(dimension=n)(input_size=m)`` (the manual's spelling) fixes the input features, like
        ``in_features=m``."""
        if "input_size" in connections:
            size = validation.positive_int("Linear", "input_size", connections.pop("input_size"))
            self.set_shapes(weight=[None, size])
        return connections


def _activation(spec: Any) -> Model | None:
    if spec is None:
        return None
    if isinstance(spec, Model):
        return spec
    if isinstance(spec, type) and issubclass(spec, Model):
        return spec()
    raise ArgumentError(
        f"MLP: activations must be Model instances, Model classes or None, got {spec!r} ({type(spec).__name__})"
    )


class MLP(Model):
    """A stack of ``Linear`` layers with activations in between.

    Two forms:
        ``MLP(input_size=784, hidden_sizes=[256, 128], output_size=10)`` - ReLU after every hidden layer
        (``activation=`` picks another class), none after the last.
        ``MLP(activations=[Relu(), Relu(), None], dimensions=[64, 32, 10])`` - one activation per layer.

    >>> MLP(input_size=4, hidden_sizes=[8], output_size=2).input_keys[:1]
    ['input']
    """

    def __init__(
        self,
        input_size: int | None = None,
        hidden_sizes: Sequence[int] | None = None,
        output_size: int | None = None,
        *,
        activations: Sequence[Any] | None = None,
        dimensions: Sequence[int] | None = None,
        activation: type[Model] | None = None,
        use_bias: bool = True,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        if dimensions is not None:
            if hidden_sizes is not None or output_size is not None:
                raise ArgumentError("MLP: give either dimensions/activations or hidden_sizes/output_size, not both")
            acts = list(activations) if activations is not None else [None] * len(dimensions)
            if len(acts) != len(dimensions):
                raise ArgumentError(
                    f"MLP: activations must have one entry per dimension ({len(dimensions)}), got {len(acts)}"
                )
            dims = list(dimensions)
        else:
            if output_size is None:
                raise ArgumentError(
                    "MLP: needs output_size (with optional hidden_sizes) or dimensions=[...], got neither"
                )

            act_cls = activation or Relu
            dims = [*(hidden_sizes or ()), output_size]
            acts = [act_cls for _ in dims[:-1]] + [None]
        for i, (dim, act) in enumerate(zip(dims, acts, strict=True)):
            layer = Linear(dim, use_bias=use_bias, in_features=input_size if i == 0 else None)
            connections: dict[str, Any] = (
                {"weight": IOKey(f"weight{i}"), "bias": IOKey(f"bias{i}")}
                if use_bias
                else {"weight": IOKey(f"weight{i}")}
            )
            if i == 0:
                self |= layer(input=IOKey("input"), **connections)
            else:
                self += layer(**connections)
            act_model = _activation(act)
            if act_model is not None:
                self += act_model
        self._keys["output"] = self._cout  # type: ignore[assignment]


class Layer(Model):
    """Mithril's ``Layer``: ``activation(input @ weight.T + bias)``, a :class:`Linear` of ``dimension`` outputs
    followed by ``activation`` (a model, e.g. ``Sigmoid()``). Keys ``input``, ``weight``, ``bias``, ``output``.

    >>> from mithril.models import Sigmoid
    >>> Layer(Sigmoid(), dimension=4).input_keys
    ['input', 'weight', 'bias']
    """

    def __init__(self, activation: Model, dimension: int | None = None, *, name: str | None = None) -> None:
        super().__init__(name=name)
        if not isinstance(activation, Model):
            raise ArgumentError(f"Layer: activation must be a model (e.g. Sigmoid()), got {activation!r}")
        linear = Linear(dimension)
        self |= linear(input=IOKey("input"), weight=IOKey("weight"), bias=IOKey("bias"))
        self += activation(output=IOKey("output"))
        self._cin = self._keys["input"]


class ElementWiseAffine(Model):
    """Mithril's ``ElementWiseAffine``: ``input * weight + bias``, elementwise with broadcasting.

    >>> ElementWiseAffine().input_keys
    ['input', 'weight', 'bias']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("input", "weight", "bias")
        scaled = Primitive("multiply")
        self |= scaled(left=IOKey("input"), right=IOKey("weight"))
        self |= Primitive("add")(left=scaled.output, right=IOKey("bias"), output=IOKey("output"))
        self._cin = self._keys["input"]
