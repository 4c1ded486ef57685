"""One model class per primitive, with the upstream key names.

Binary ops take ``left``/``right`` (Mithril's names where it has others: ``Power`` ``base``/``exponent``,
``Divide``/``FloorDivide`` ``numerator``/``denominator``, ``Where`` ``cond``/``input1``/``input2``), unary ops
``input``, every op gives ``output``. Positional arguments fill the primitive's attributes in order
(``Sum(1, True)`` is ``Sum(axis=1, keepdim=True)``); keyword arguments that name an input give it a constant
(``Power(exponent=2.0)``).

Example:
    >>> from mithril.models import Add, Sum
    >>> Add().input_keys, Sum(axis=0).output_keys
    (['left', 'right'], ['output'])
    >>> Divide().input_keys
    ['numerator', 'denominator']
"""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError
from .primitive import Primitive, _spec

# (class name, primitive name); order of the table is the order in the docs.
_TABLE: tuple[tuple[str, str], ...] = (
    # elementwise unary
    ("Negate", "neg"),
    ("Absolute", "abs"),
    ("Sign", "sign"),
    ("Exponential", "exp"),
    ("Log", "log"),
    ("Sqrt", "sqrt"),
    ("Rsqrt", "rsqrt"),
    ("Square", "square"),
    ("Sine", "sin"),
    ("Cosine", "cos"),
    ("Tanh", "tanh"),
    ("Sigmoid", "sigmoid"),
    ("Relu", "relu"),
    ("LeakyRelu", "leaky_relu"),
    ("Gelu", "gelu"),
    ("Softplus", "softplus"),
    ("Erf", "erf"),
    ("Floor", "floor"),
    ("IsNan", "isnan"),
    ("StopGradient", "stop_gradient"),
    ("NanToNum", "nan_to_num"),
    ("LogicalNot", "logical_not"),
    ("Cast", "cast"),
    # binary
    ("Add", "add"),
    ("Subtract", "subtract"),
    ("Multiply", "multiply"),
    ("Divide", "divide"),
    ("FloorDivide", "floor_divide"),
    ("Power", "power"),
    ("Minimum", "minimum"),
    ("Maximum", "maximum"),
    ("Equal", "equal"),
    ("NotEqual", "not_equal"),
    ("Less", "less"),
    ("LessEqual", "less_equal"),
    ("Greater", "greater"),
    ("GreaterEqual", "greater_equal"),
    ("LogicalAnd", "logical_and"),
    ("LogicalOr", "logical_or"),
    ("LogicalXOr", "logical_xor"),
    ("Where", "where"),
    # linear algebra
    ("MatrixMultiply", "matmul"),
    ("Cholesky", "cholesky"),
    ("Eigvalsh", "eigvalsh"),
    # reductions
    ("Sum", "sum"),
    ("Mean", "mean"),
    ("Max", "max"),
    ("Min", "min"),
    ("Prod", "prod"),
    ("ArgMax", "argmax"),
    ("ArgMin", "argmin"),
    ("Variance", "var"),
    ("Softmax", "softmax"),
    ("LogSoftmax", "log_softmax"),
    # shape
    ("Reshape", "reshape"),
    ("Transpose", "transpose"),
    ("SwapAxes", "swapaxes"),
    ("Squeeze", "squeeze"),
    ("Unsqueeze", "unsqueeze"),
    ("BroadcastTo", "broadcast_to"),
    ("Concat", "concat"),
    ("Split", "split"),
    ("Pad", "pad"),
    ("Indexer", "index"),
    ("Gather", "gather"),
    ("Arange", "arange"),
    ("Ones", "ones"),
    ("Zeros", "zeros"),
    ("Full", "full"),
    ("ZerosLike", "zeros_like"),
    ("OnesLike", "ones_like"),
    ("Positions", "positions"),
    ("Shape", "shape"),
    ("Size", "size"),
    ("AtLeast1D", "at_least_1d"),
    ("Unique", "unique"),
    ("Item", "item"),
    ("ToList", "to_list"),
    ("ToTuple", "to_tuple"),
    # neural network
    ("ScaledDotProduct", "scaled_dot_product_attention"),
    ("Randn", "randn"),
    ("Randint", "randint"),
    ("DropoutMask", "dropout_mask"),
)

# Mithril's key names where they differ from the primitive's: these are the models' keys (and the compiled
# model's); the primitive's names stay accepted as deprecated aliases (``Power(left=)`` warns, means ``base``).
KEY_NAMES: dict[str, dict[str, str]] = {
    "Power": {"left": "base", "right": "exponent"},
    "Divide": {"left": "numerator", "right": "denominator"},
    "FloorDivide": {"left": "numerator", "right": "denominator"},
    "Where": {"condition": "cond", "left": "input1", "right": "input2"},
}
"""Class name -> {primitive key: Mithril's key}. ``ToList``/``ToTuple`` number their inputs from 1 as Mithril
does (``input1``, ``input2``...; the primitive's ``input_0``... are deprecated aliases)."""

_NUMBERED = ("ToList", "ToTuple")


def _key_names(class_name: str, primitive_keys: list[str]) -> dict[str, str]:
    if class_name in _NUMBERED:
        return {key: f"input{int(key.rsplit('_', 1)[1]) + 1}" for key in primitive_keys if key.startswith("input_")}
    return KEY_NAMES.get(class_name, {})


EXAMPLES: dict[str, str] = {
    "StopGradient": """``x * StopGradient(x)`` has the value ``x**2`` and the gradient ``x``:

    >>> from mithril.models import IOKey, Model, Multiply, StopGradient
    >>> model = Model()
    >>> model |= StopGradient()(input="x", output="held")
    >>> model |= Multiply()(left="x", right="held", output=IOKey("output"))""",
    "Cholesky": """The lower-triangular ``L`` with ``L @ L.T == input`` (batched; gradients symmetric):

    >>> from mithril.models import Cholesky
    >>> Cholesky().input_keys, Cholesky().output_keys
    (['input'], ['output'])""",
    "Eigvalsh": """Eigenvalues of a symmetric matrix, ascending (``[..., n, n] -> [..., n]``):

    >>> from mithril.models import Eigvalsh
    >>> Eigvalsh().input_keys
    ['input']""",
    "AtLeast1D": """A scalar becomes shape ``[1]``; other inputs pass unchanged:

    >>> from mithril.models import AtLeast1D
    >>> AtLeast1D().output_keys
    ['output']""",
    "Unique": """The sorted distinct values (a length known only at run time: C/GGML and jitted JAX/MLX refuse it):

    >>> from mithril.models import Unique
    >>> Unique().input_keys
    ['input']""",
    "Item": """The one element of ``input`` as a Python number (not differentiable):

    >>> from mithril.models import Item
    >>> Item().input_keys
    ['input']""",
    "ToList": """``n`` scalars as a Python list (a model output; not differentiable):

    >>> from mithril.models import ToList
    >>> ToList(3).input_keys
    ['input1', 'input2', 'input3']""",
    "ToTuple": """``n`` scalars as a Python tuple (a model output; not differentiable):

    >>> from mithril.models import ToTuple
    >>> ToTuple(n=2).input_keys
    ['input1', 'input2']""",
}
"""Class name -> the short example its docstring ends with."""


def _make(class_name: str, primitive: str) -> type[Primitive]:
    def __init__(self: Primitive, *args: Any, name: str | None = None, **kwargs: Any) -> None:
        spec = _spec(primitive)
        attr_names = list(spec.attributes)
        if len(args) > len(attr_names):
            raise ArgumentError(
                f"{class_name} takes at most {len(attr_names)} positional attributes {attr_names}, got {len(args)}: "
                f"{args!r}"
            )
        attrs = dict(zip(attr_names, args, strict=False))
        constants = {}
        for key, value in kwargs.items():
            if key in spec.attributes:
                attrs[key] = value
            else:
                constants[key] = value
        Primitive.__init__(self, primitive, name=name, **attrs)
        renames = _key_names(class_name, list(self._keys))
        if renames:  # Mithril's key names; the primitive's become deprecated aliases
            self._keys = {renames.get(key, key): value for key, value in self._keys.items()}
            self._deprecated_aliases = {old: new for old, new in renames.items()}
        constants = {self._alias(key): value for key, value in constants.items()}
        self._constants = constants
        for key, value in constants.items():
            if key not in self._keys:
                raise ArgumentError(
                    f"{class_name} has no attribute or key {key!r}; attributes {attr_names}, keys {sorted(self._keys)}"
                )
            self._connect(self._keys[key], value, f"{class_name}.{key}")

    def _rebuild(self: Primitive, attrs: dict[str, Any]) -> None:
        type(self).__init__(self, name=self.name, **{**self.attributes, **attrs, **self._constants})

    doc = f"The ``{primitive}`` primitive as a model (see ``mithril.plugins.registry().primitive({primitive!r}).doc``)."
    if class_name in EXAMPLES:
        doc = f"{EXAMPLES[class_name]}\n\n    {doc}"
    if class_name in KEY_NAMES:
        names = KEY_NAMES[class_name]
        doc += (
            " Keys (Mithril's names): " + ", ".join(f"``{k}``" for k in names.values())
            + "; the deprecated " + ", ".join(f"``{old}``" for old in names) + " still work, with a DeprecationWarning."
        )
    namespace = {"__init__": __init__, "_rebuild": _rebuild, "__doc__": doc, "__module__": __name__}
    return type(class_name, (Primitive,), namespace)


_CLASSES = {class_name: _make(class_name, primitive) for class_name, primitive in _TABLE}
globals().update(_CLASSES)

__all__ = sorted(_CLASSES)
