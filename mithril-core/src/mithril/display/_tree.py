"""What the summary table and the graph picture both show: the block tree of a model, the shape of every
value (symbolic for a logical model, concrete for a compiled one) and readable names for unknown dims.

Readable names: unknown dims are never shown by their internal ids (``d130``). The canonical input's dims
get conventional names by rank (``[batch, seq]`` for tokens, ``[batch, channels, height, width]`` for
images), other keys' dims ``<key>_<axis>``, and a dim a block derives from one of its input's named dims
(a convolution's output height) that name with a counter (``height_1``).

Example:
    >>> from mithril.models import IOKey, Model, Linear
    >>> model = Model()
    >>> model |= Linear(4)(input=IOKey("x", shape=["N", "T", 3]))
    >>> view = ModelView(model)
    >>> view.shape_text(model._interface()["x"]), view.shape_text(model._interface()["output"])
    ('[batch, seq, 3]', '[batch, seq, 4]')
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..compiler.codegen.escape import display_text
from ..compiler.flatten import _topological, flatten
from ..compiler.graph import NOTHING, Node, Value
from ..lazy_plugins import registry
from ..shapes import Dim, Shape, ShapeMismatch, ShapeUndetermined, shape_from_template, unify
from ..types import Dtype

__all__ = ["Block", "ModelView", "dtype_bytes", "format_bytes", "role_of"]

_CONVENTIONAL = {  # canonical input rank -> names of its axes (None: key-derived)
    2: ("batch", None),
    3: ("batch", "seq", "features"),
    4: ("batch", "channels", "height", "width"),
    5: ("batch", "channels", "depth", "height", "width"),
}


def dtype_bytes(dtype: Dtype) -> int:
    """Bytes per element of ``dtype``.

    >>> dtype_bytes(Dtype.bfloat16)
    2
    """
    if dtype is Dtype.bool_:
        return 1
    return int(re.sub(r"\D", "", dtype.value)) // 8


def format_bytes(n: int) -> str:
    """``1536`` -> ``'1.5 KiB'``.

    >>> format_bytes(3 * 2**20)
    '3.0 MiB'
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover - the loop always returns


def role_of(value: Value) -> str:
    """``"param"`` (trainable), ``"frozen"`` (a weight made non-trainable), ``"buffer"``, ``"const"``,
    ``"data"`` (a free input) or ``"value"`` (computed)."""
    root = value.find()
    if root.producer is not None:
        return "value"
    if root.const is not NOTHING:
        return "const"
    if root.buffer:
        return "buffer"
    if root.differentiable is True:
        return "param"
    if root.init is not None:
        return "frozen"
    return "data"


@dataclass
class Block:
    """One model in the tree: its path from the root (``transformer.h.0.attn``), the model, and every
    primitive node inside it (its children's included)."""

    name: str
    path: str
    model: Any
    depth: int
    children: list[Block] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)

    @property
    def type_name(self) -> str:
        """``Linear``, ``Model``, or a primitive's registry name (``add``)."""
        if type(self.model).__name__ == "Primitive":
            return str(self.model.primitive_name)
        return type(self.model).__name__

    @property
    def is_leaf(self) -> bool:
        """A primitive, or a block wrapping exactly one primitive (``Conv2d``): nothing to expand."""
        return not self.children or (len(self.children) == 1 and not self.children[0].children and len(self.nodes) == 1)

    def walk(self, depth: int | None = None) -> Iterator[Block]:
        """This block's descendants, depth first, down to ``depth`` levels below the root (``None``: all)."""
        for child in self.children:
            yield child
            if not child.is_leaf and (depth is None or child.depth < depth):
                yield from child.walk(depth)

    def max_depth(self) -> int:
        return max([self.depth, *(c.max_depth() for c in self.children if not c.is_leaf)])


def _build_tree(model: Any) -> Block:
    """The block tree of ``model`` with each primitive node placed in the deepest block holding it."""
    prefix: list[str] = []
    root, current = model, model
    while current._parent is not None:  # a child's nodes live in its root's graph, under its path
        parent = current._parent
        prefix.append(next(name for name, child in parent._children if child is current))
        root, current = parent, parent
    base = ".".join(reversed(prefix))

    def build(name: str, path: str, m: Any, depth: int) -> Block:
        block = Block(name, path, m, depth)
        block.children = [build(n, f"{path}.{n}" if path else n, c, depth + 1) for n, c in m._children]
        return block

    tree = build(model.name or type(model).__name__, "", model, 0)
    for node in root._graph.nodes:
        path = node.path
        if base:
            if path != base and not path.startswith(base + "."):
                continue
            path = path[len(base) + 1 :]
        block = tree
        block.nodes.append(node)
        while path:
            matches = [c for c in block.children if path == c.name or path.startswith(c.name + ".")]
            if not matches:
                break
            block = max(matches, key=lambda c: len(c.name))
            block.nodes.append(node)
            path = path[len(block.name) + 1 :]
    return tree


class ModelView:
    """Shapes and roles of a model's values, for display.

    Args:
        model: a logical model.
        compiled: a :class:`~mithril.PhysicalModel` of ``model``: shapes are then the compiled ones
            (the model is flattened again and given the compiled input shapes; it is never changed).
    """

    def __init__(self, model: Any, compiled: Any = None) -> None:
        self.model = model
        self.compiled = compiled
        self.tree = _build_tree(model)
        self._optional_only = _optional_only(self.tree.nodes)
        self._flat: dict[int, Value] = {}
        self.compiled_keys: dict[str, Value] = {}  # the compiled model's input/output names -> values
        self._compiled_roles: dict[int, str] = {}  # flat value id -> "param", "buffer" or "data" as compiled
        self.flat_nodes: list[Node] = []
        if compiled is not None:
            self._settle_compiled_shapes(compiled)
        self._names: dict[int, str] = {}
        self._used: set[str] = set()
        self._counters: dict[str, int] = {}
        self._name_dims()

    # -- shapes ----------------------------------------------------------------------------------
    def _settle_compiled_shapes(self, pm: Any) -> None:
        """Flatten the model again (the compiler's own step), give the inputs their compiled shapes and run
        shape inference, so every intermediate value has its concrete shape. Maps logical -> flat values."""
        flat = flatten(self.model, registry(), short_names=False)
        for name, shape in pm.shapes.items():
            value = flat.inputs.get(pm.input_paths.get(name, name)) or flat.outputs.get(name)
            if value is None:
                continue
            self.compiled_keys[name] = value
            if shape is None:
                continue
            try:
                unify(value.shape, shape_from_template(list(shape), {}))
            except (ShapeMismatch, ShapeUndetermined):
                continue
        for role, names in (("param", pm.param_keys), ("buffer", pm.buffer_keys), ("data", pm.data_keys)):
            for name in names:
                if name in self.compiled_keys:
                    self._compiled_roles[id(self.compiled_keys[name].find())] = role
        flat.graph.solve()
        for logical, copy in zip(_topological(list(self.tree.nodes)), flat.graph.nodes, strict=True):
            for group, copies in ((logical.inputs, copy.inputs), (logical.outputs, copy.outputs)):
                for key, value in group.items():
                    copied = copies.get(key)
                    if value is not None and copied is not None:
                        self._flat[id(value.find())] = copied
        self.flat_nodes = flat.graph.nodes

    def value(self, value: Value) -> Value:
        """The value whose shape is shown: the compiled copy when there is one."""
        root = value.find()
        return self._flat.get(id(root), root)

    def role(self, value: Value) -> str:
        """:func:`role_of` ``value``, or for a compiled model what it compiled the input as: ``trainable_keys=``
        makes a key a parameter, ``data_keys=`` a weight runtime data (a frozen weight stays ``"frozen"``)."""
        own = role_of(value)
        compiled = self._compiled_roles.get(id(self.value(value).find()))
        return own if compiled is None or (compiled == "data" and own == "frozen") else compiled

    def dims(self, value: Value) -> list[Any]:
        """Ints, :class:`Dim` roots for unknown dims, ``"..."`` for a variadic part."""
        return _dims(self.value(value).shape)

    def named_shape(self, value: Value) -> list[Any]:
        """``[batch, 16, "height_1"]``: ints, the readable names of unknown dims, ``"..."`` for a variadic part."""
        return [self.dim_text(d) if isinstance(d, Dim) else d for d in self.dims(value)]

    def shape_text(self, value: Value) -> str:
        """``[batch, 16, height_1, width_1]``."""
        return "[" + ", ".join(str(d) for d in self.named_shape(value)) + "]"

    def interface_shapes(self) -> dict[str, list[Any]]:
        """Every key of the model with :meth:`named_shape` (what ``model.shapes`` returns); dims of keys the
        summary does not show are named ``<key>_<axis>``."""
        shapes = {}
        for key, value in self.model._interface().items():
            for axis, dim in enumerate(self.dims(value)):
                self._name(dim, f"{key}_{axis}")
            shapes[key] = self.named_shape(value)
        return shapes

    def dim_text(self, dim: Any) -> str:
        if isinstance(dim, Dim):
            return self._names.get(id(dim), "?")
        return str(dim)

    def elements(self, value: Value) -> int | None:
        dims = self.dims(value)
        return math.prod(dims) if all(isinstance(d, int) for d in dims) else None

    # -- keys ------------------------------------------------------------------------------------
    def keys(self, block: Block) -> tuple[dict[str, Value], dict[str, Value]]:
        """(inputs, outputs) of a block, by key; inputs include its parameters."""
        inputs: dict[str, Value] = {}
        outputs: dict[str, Value] = {}
        for key, value in block.model._interface().items():
            (outputs if block.model._is_output(key, value) else inputs)[key] = value
        inputs = {
            k: v for k, v in inputs.items() if id(v.find()) not in self._optional_only and v.find().const is not None
        }
        return inputs, outputs

    def state(self, block: Block) -> dict[str, dict[int, Value]]:
        """The block's parameters, frozen weights and buffers (unique values by id), by role."""
        found: dict[str, dict[int, Value]] = {"param": {}, "frozen": {}, "buffer": {}}
        for node in block.nodes:
            for value in node.inputs.values():
                if value is not None and (role := self.role(value)) in found:
                    found[role][id(value.find())] = value.find()
        return found

    # -- readable names for unknown dims ---------------------------------------------------------
    def _name_dims(self) -> None:
        root = self.model
        inputs, outputs = self.keys(self.tree)
        canonical = root._cin.find() if root._cin is not None else None
        ordered = sorted(inputs.items(), key=lambda kv: kv[1].find() is not canonical)
        for key, value in ordered:
            dims = self.dims(value)
            names = _CONVENTIONAL.get(len(dims), ()) if value.find() is canonical else ()
            if value.find() is canonical and len(dims) == 2 and value.find().kind == "int":
                names = ("batch", "seq")
            for axis, dim in enumerate(dims):
                given = names[axis] if axis < len(names) else None
                self._name(dim, given or f"{key}_{axis}")
        for block in [self.tree, *self.tree.walk()]:
            block_inputs, block_outputs = self.keys(block)
            reference = next((v for v in block_inputs.values() if role_of(v) in ("data", "value")), None)
            ref_dims = self.dims(reference) if reference is not None else []
            for key, value in [*block_inputs.items(), *block_outputs.items()]:
                dims = self.dims(value)
                for axis, dim in enumerate(dims):
                    if not isinstance(dim, Dim) or id(dim) in self._names:
                        continue
                    base = None
                    if len(dims) == len(ref_dims) and isinstance(ref_dims[axis], Dim):
                        base = re.sub(r"_\d+$", "", self._names.get(id(ref_dims[axis]), "")) or None
                    self._name(dim, base, derived=True) if base else self._name(dim, f"{key}_{axis}")
        for key, value in outputs.items():
            for axis, dim in enumerate(self.dims(value)):
                self._name(dim, f"{key}_{axis}")

    def _name(self, dim: Any, name: str, *, derived: bool = False) -> None:
        if not isinstance(dim, Dim) or id(dim) in self._names:
            return
        if derived or name in self._used:
            base = name
            while name in self._used or (derived and name == base):
                self._counters[base] = self._counters.get(base, 0) + 1
                name = f"{base}_{self._counters[base]}"
        self._names[id(dim)] = name
        self._used.add(name)


def _optional_only(nodes: list[Node]) -> set[int]:
    """Free data inputs used only in optional slots (a bias nobody connected): absent when compiled."""
    optional: dict[int, bool] = {}
    for node in nodes:
        for key, value in node.inputs.items():
            if value is not None and role_of(value) == "data" and value.find().differentiable is None:
                root = id(value.find())
                optional[root] = optional.get(root, True) and key in node.spec.optional_inputs
    return {root for root, only in optional.items() if only}


def _dims(shape: Shape) -> list[Any]:
    prefix, var, suffix = shape.parts()
    items: list[Any] = [d.value if d.value is not None else d.find() for d in prefix]
    if var is not None:
        items.append("...")
    items.extend(d.value if d.value is not None else d.find() for d in suffix)
    return items


def value_label(values: Mapping[str, Value], view: ModelView) -> str:
    """``[batch, 8]`` for one value, ``left: [..], right: [..]`` for several, ``-`` for none (keys and dim
    names are user text: shown through :func:`display_text`)."""
    if not values:
        return "-"
    if len(values) == 1:
        return display_text(view.shape_text(next(iter(values.values()))))
    return ", ".join(f"{display_text(k)}: {display_text(view.shape_text(v))}" for k, v in values.items())
