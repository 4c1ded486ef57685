"""Graph pictures: ``ml.to_dot(model)`` (Graphviz DOT text) and ``model.plot(path)`` (SVG/PNG/PDF via the
``dot`` program).

Blocks down to ``depth`` are drawn as clusters, the blocks at that depth (or primitives) as boxes, and
every edge carries the shape of the tensor it stands for (readable symbols such as ``batch`` where a dim
is not known). Inputs, outputs and parameters are styled apart: data inputs are blue ellipses, outputs
green ellipses, trainable parameters yellow cylinders (frozen ones grey, buffers orange).

The DOT text is built with the ``graphviz`` Python package and rendered by Graphviz's ``dot`` program:
``pip install "mithril-core[viz]"`` and ``apt-get install graphviz`` (``brew install graphviz``,
``conda install graphviz``).

Example:
    >>> from mithril.models import IOKey, Linear, Model, Relu
    >>> model = Model()
    >>> model |= Linear(4)(input=IOKey("x", shape=["N", 3]))
    >>> model += Relu()
    >>> dot = to_dot(model)                         # doctest: +SKIP
    >>> "linear_0" in dot and "[batch, 4]" in dot   # doctest: +SKIP
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import validation
from ..errors import ArgumentError, MithrilError
from ._tree import Block, ModelView, role_of

__all__ = ["GraphvizNotFound", "plot", "render", "to_dot"]

_STYLE = {
    "data": {"shape": "ellipse", "style": "filled", "fillcolor": "#cfe2ff"},
    "output": {"shape": "ellipse", "style": "filled", "fillcolor": "#d1f0d6"},
    "param": {"shape": "cylinder", "style": "filled", "fillcolor": "#fff3bf", "fontsize": "10"},
    "frozen": {"shape": "cylinder", "style": "filled", "fillcolor": "#e9ecef", "fontsize": "10"},
    "buffer": {"shape": "cylinder", "style": "filled", "fillcolor": "#ffd8a8", "fontsize": "10"},
    "block": {"shape": "box", "style": "rounded,filled", "fillcolor": "#ffffff"},
}
_FORMATS = ("svg", "png", "pdf")
_DEFAULT_DEPTH = 3


class GraphvizNotFound(MithrilError, RuntimeError):
    """The ``graphviz`` Python package or Graphviz's ``dot`` program is missing (the message says which
    and how to install it)."""


def _graphviz() -> Any:
    try:
        import graphviz
    except ImportError:
        raise GraphvizNotFound(
            "graph pictures need the 'graphviz' Python package: pip install \"mithril-core[viz]\" (or pip install graphviz)"
        ) from None
    return graphviz


def _is_compiled(model: Any) -> bool:
    return hasattr(model, "evaluate") and hasattr(model, "backend")


def to_dot(model: Any, depth: int | None = None, *, params: bool = True) -> str:
    """Graphviz DOT text of a logical model or a compiled one (then with its final shapes).

    Args:
        model: a ``Model`` or a :class:`~mithril.PhysicalModel`.
        depth: levels of blocks to open (``1``: the top-level blocks as boxes); ``None``: 3.
        params: draw parameters and buffers as their own nodes (``False`` leaves them out).

    Raises:
        GraphvizNotFound: the ``graphviz`` Python package is not installed.

    >>> from mithril.models import Linear
    >>> "digraph" in to_dot(Linear(4))   # doctest: +SKIP
    True
    """
    graphviz = _graphviz()
    depth = validation.positive_int("to_dot", "depth", depth, optional=True, minimum=1) or _DEFAULT_DEPTH
    params = validation.boolean("to_dot", "params", params)
    compiled = model if _is_compiled(model) else None
    view = ModelView(compiled.model if compiled is not None else model, compiled)
    title = view.tree.name + (f" ({type(compiled.backend).__name__}, {compiled.backend.dtype.value})" if compiled is not None else "")
    dot = graphviz.Digraph(name=view.tree.name, graph_attr={"rankdir": "TB", "label": _label(title), "labelloc": "t", "fontname": "Helvetica"},
                           node_attr={"fontname": "Helvetica", "fontsize": "11"}, edge_attr={"fontname": "Helvetica", "fontsize": "9"})
    owner: dict[int, str] = {}  # primitive node id -> id of the drawn box holding it
    counter = iter(range(1 << 30))

    def draw(block: Block, graph: Any) -> None:
        for child in block.children:
            if child.is_leaf or child.depth >= depth:
                box = f"b{next(counter)}"
                graph.node(box, _label(child.name, child.type_name), **_STYLE["block"])
                for node in child.nodes:
                    owner[id(node)] = box
            else:
                with graph.subgraph(name=f"cluster_{next(counter)}") as cluster:
                    cluster.attr(label=_label(f"{child.name} ({child.type_name})"), style="rounded", color="#adb5bd")
                    draw(child, cluster)

    draw(view.tree, dot)
    producers = {id(v.find()): owner[id(node)] for node in view.tree.nodes for v in node.outputs.values()}
    sources: dict[int, str] = {}  # value id -> drawn node of a free input

    def source(value: Any) -> str | None:
        root = value.find()
        if id(root) in producers:
            return producers[id(root)]
        role = role_of(root)
        if role in ("const", "value") or (role != "data" and not params):
            return None
        if id(root) not in sources:
            name = f"i{len(sources)}"
            label = _input_name(view, root) if role == "data" else _input_name(view, root) + "\n" + view.shape_text(root)
            dot.node(name, _label(*label.split("\n")), **_STYLE[role])
            sources[id(root)] = name
        return sources[id(root)]

    edges: set[tuple[str, str, int]] = set()
    for node in view.tree.nodes:
        target = owner[id(node)]
        for value in node.inputs.values():
            if value is None or id(value.find()) in view._optional_only or value.find().const is None:
                continue
            start = source(value)
            key = (start or "", target, id(value.find()))
            if start is None or start == target or key in edges:
                continue
            edges.add(key)
            style = {} if role_of(value) in ("data", "value") else {"style": "dashed", "arrowsize": "0.6"}
            label = view.shape_text(value) if role_of(value) in ("data", "value") else ""
            dot.edge(start, target, label=_label(label) if label else None, **style)
    _, outputs = view.keys(view.tree)
    for key, value in outputs.items():
        if key in getattr(view.model, "_hidden", ()):
            continue
        name = f"o_{len(edges)}_{key}"
        dot.node(name, _label(key), **_STYLE["output"])
        start = source(value)
        if start is not None:
            edges.add((start, name, id(value.find())))
            dot.edge(start, name, label=_label(view.shape_text(value)))
    return dot.source


def _input_name(view: ModelView, value: Any) -> str:
    """The name a free input is known by: the compiled model's name (``weight_1``), else the root model's
    key, else ``<block path>.<key>`` of the first block naming it."""
    flat = view.value(value)
    for key, candidate in view.compiled_keys.items():
        if candidate is flat:
            return key
    for block in [view.tree, *view.tree.walk()]:
        for key, candidate in block.model._interface().items():
            if candidate.find() is value:
                return f"{block.path}.{key}" if block.path else key
    return "input"


def _label(*lines: str) -> str:
    """A DOT label of several lines; user text (block names, keys) is escaped, never interpreted."""
    graphviz = _graphviz()
    return "\n".join(graphviz.escape(line) for line in lines)


def render(dot_source: str, fmt: str = "svg") -> bytes:
    """Run Graphviz's ``dot`` on DOT text and return the picture (``svg``, ``png`` or ``pdf``).

    Raises:
        GraphvizNotFound: the ``dot`` program (or the ``graphviz`` Python package) is not installed.
    """
    graphviz = _graphviz()
    fmt = validation.choice("render", "fmt", fmt, _FORMATS)
    try:
        return graphviz.Source(dot_source).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise GraphvizNotFound(
            "drawing the graph needs Graphviz's 'dot' program, which is not on PATH: install the 'graphviz' "
            "system package (apt-get install graphviz, brew install graphviz or conda install graphviz)"
        ) from None


def plot(model: Any, path: str | Path, depth: int | None = None, *, params: bool = True) -> Path:
    """Draw ``model`` (logical or compiled) to ``path``; the format follows the suffix (``.svg``, ``.png``,
    ``.pdf``). Returns the path written.

    >>> model.plot("model.svg")        # doctest: +SKIP
    PosixPath('model.svg')
    """
    target = Path(path)
    fmt = target.suffix.lstrip(".").lower()
    if fmt not in _FORMATS:
        raise ArgumentError(f"plot({str(path)!r}): expected a file name ending in .svg, .png or .pdf, got {target.suffix or 'no suffix'!r}")
    picture = render(to_dot(model, depth, params=params), fmt)
    try:
        target.write_bytes(picture)
    except OSError as exc:
        raise MithrilError(f"plot({str(path)!r}): cannot write the picture there ({exc})") from None
    return target


def svg(model: Any, depth: int | None = None) -> str | None:
    """The SVG text of ``model``'s picture, or ``None`` when Graphviz is missing (what notebooks show)."""
    try:
        return render(to_dot(model, depth), "svg").decode("utf-8")
    except GraphvizNotFound:
        return None
