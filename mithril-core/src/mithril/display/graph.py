"""Graph pictures: ``ml.to_dot(model)`` (Graphviz DOT text) and ``model.plot(path)`` (SVG/PNG/PDF via the
``dot`` program).

Blocks down to ``depth`` are drawn as clusters, the blocks at that depth (or primitives) as boxes, and
every edge carries the shape of the tensor it stands for (readable symbols such as ``batch`` where a dim
is not known). Inputs, outputs and parameters are styled apart: data inputs are blue ellipses, outputs
green ellipses, trainable parameters yellow cylinders (frozen ones grey, buffers orange).

The DOT text is written here, every user string (block names, keys, the model's name, the dim names derived
from keys) as a double-quoted DOT string made by :func:`~mithril.compiler.codegen.escape.dot_id`, so no name
can add a node, a link or an HTML-like label to the picture. Pictures are rendered by Graphviz's ``dot``
program through the ``graphviz`` Python package: ``pip install "mithril-core[viz]"`` and
``apt-get install graphviz`` (``brew install graphviz``, ``conda install graphviz``).

Example:
    >>> from mithril.models import IOKey, Linear, Model, Relu
    >>> model = Model()
    >>> model |= Linear(4)(input=IOKey("x", shape=["N", 3]))
    >>> model += Relu()
    >>> dot = to_dot(model)
    >>> '"linear_0\\nLinear"' in dot and '"[batch, 4]"' in dot
    True
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .. import validation
from ..compiler.codegen.escape import dot_id
from ..errors import ArgumentError, MithrilError
from ..serialization.files import write_file_atomically
from ._tree import Block, ModelView

__all__ = ["GraphvizNotFound", "plot", "render", "to_dot"]

_STYLE = {
    "data": {"shape": "ellipse", "style": "filled", "fillcolor": "#cfe2ff"},
    "output": {"shape": "ellipse", "style": "filled", "fillcolor": "#d1f0d6"},
    "param": {"shape": "cylinder", "style": "filled", "fillcolor": "#fff3bf", "fontsize": "10"},
    "frozen": {"shape": "cylinder", "style": "filled", "fillcolor": "#e9ecef", "fontsize": "10"},
    "buffer": {"shape": "cylinder", "style": "filled", "fillcolor": "#ffd8a8", "fontsize": "10"},
    "block": {"shape": "box", "style": "rounded,filled", "fillcolor": "#ffffff"},
}
_PARAM_EDGE = {"style": "dashed", "arrowsize": "0.6"}
_CLUSTER = {"style": "rounded", "color": "#adb5bd"}
_FORMATS = ("svg", "png", "pdf")
_DEFAULT_DEPTH = 3
_DOT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|-?[0-9]+(\.[0-9]+)?")  # a DOT ID that needs no quotes


class GraphvizNotFound(MithrilError, RuntimeError):
    """The ``graphviz`` Python package or Graphviz's ``dot`` program is missing (the message says which
    and how to install it)."""


def _graphviz() -> Any:
    try:
        import graphviz  # optional (the viz extra): imported when a picture is drawn
    except ImportError:
        raise GraphvizNotFound(
            "graph pictures need the 'graphviz' Python package: pip install \"mithril-core[viz]\" (or pip install "
            "graphviz)"
        ) from None
    return graphviz


def _is_compiled(model: Any) -> bool:
    return hasattr(model, "evaluate") and hasattr(model, "backend")


def _attributes(label: str | None = None, attrs: dict[str, str] | None = None) -> str:
    """`` [label="..." shape=box ...]``: ``label`` is already a DOT ID (:func:`dot_id`); the other values are
    Mithril's own (colours, shapes) and are quoted when they are not plain words."""
    items = [f"label={label}"] if label is not None else []
    for key, value in sorted((attrs or {}).items()):
        items.append(f"{key}={value if _DOT_WORD.fullmatch(value) else dot_id(value)}")
    return f" [{' '.join(items)}]" if items else ""


class _Graph:
    """The DOT statements of a graph, or of one of its clusters (a nested ``subgraph cluster_<n>``)."""

    def __init__(self, name: str, depth: int = 1) -> None:
        self.name = name  # a DOT ID: dot_id(...) of the model's name, or cluster_<n>
        self.depth = depth
        self.body: list[str | _Graph] = []

    def add(self, statement: str) -> None:
        self.body.append("\t" * self.depth + statement)

    def node(self, name: str, label: str, attrs: dict[str, str]) -> None:
        self.add(name + _attributes(label, attrs))

    def edge(self, start: str, end: str, label: str | None = None, attrs: dict[str, str] | None = None) -> None:
        self.add(f"{start} -> {end}{_attributes(label, attrs)}")

    def cluster(self, name: str, label: str) -> _Graph:
        cluster = _Graph(name, self.depth + 1)
        cluster.add("graph" + _attributes(label, _CLUSTER))
        self.body.append(cluster)
        return cluster

    def lines(self) -> list[str]:
        indent = "\t" * (self.depth - 1)
        out = [f"{indent}{'digraph' if self.depth == 1 else 'subgraph'} {self.name} {{"]
        for item in self.body:
            out.extend(item.lines() if isinstance(item, _Graph) else [item])
        return [*out, indent + "}"]


def to_dot(model: Any, depth: int | None = None, *, params: bool = True) -> str:
    """Graphviz DOT text of a logical model or a compiled one (then with its final shapes). Every user
    string in it is a quoted DOT string (:func:`~mithril.compiler.codegen.escape.dot_id`).

    Args:
        model: a ``Model`` or a :class:`~mithril.PhysicalModel`.
        depth: levels of blocks to open (``1``: the top-level blocks as boxes); ``None``: 3.
        params: draw parameters and buffers as their own nodes (``False`` leaves them out).

    >>> from mithril.models import Linear
    >>> to_dot(Linear(4)).startswith('digraph "Linear" {')
    True
    """
    depth = validation.positive_int("to_dot", "depth", depth, optional=True, minimum=1) or _DEFAULT_DEPTH
    params = validation.boolean("to_dot", "params", params)
    compiled = model if _is_compiled(model) else None
    view = ModelView(compiled.model if compiled is not None else model, compiled)
    title = view.tree.name + (
        f" ({type(compiled.backend).__name__}, {compiled.backend.dtype.value})" if compiled is not None else ""
    )
    dot = _Graph(dot_id(view.tree.name))
    dot.add("graph" + _attributes(dot_id(title), {"rankdir": "TB", "labelloc": "t", "fontname": "Helvetica"}))
    dot.add("node" + _attributes(None, {"fontname": "Helvetica", "fontsize": "11"}))
    dot.add("edge" + _attributes(None, {"fontname": "Helvetica", "fontsize": "9"}))
    owner: dict[int, str] = {}  # primitive node id -> id of the drawn box holding it
    counter = iter(range(1 << 30))

    def draw(block: Block, graph: _Graph) -> None:
        for child in block.children:
            if child.is_leaf or child.depth >= depth:
                box = f"b{next(counter)}"
                graph.node(box, dot_id(child.name, child.type_name), _STYLE["block"])
                for node in child.nodes:
                    owner[id(node)] = box
            else:
                draw(child, graph.cluster(f"cluster_{next(counter)}", dot_id(f"{child.name} ({child.type_name})")))

    draw(view.tree, dot)
    producers = {id(v.find()): owner[id(node)] for node in view.tree.nodes for v in node.outputs.values()}
    sources: dict[int, str] = {}  # value id -> drawn node of a free input

    def source(value: Any) -> str | None:
        root = value.find()
        if id(root) in producers:
            return producers[id(root)]
        role = view.role(root)
        if role in ("const", "value") or (role != "data" and not params):
            return None
        if id(root) not in sources:
            name = f"i{len(sources)}"
            lines = [_input_name(view, root)] + ([view.shape_text(root)] if role != "data" else [])
            dot.node(name, dot_id(*lines), _STYLE[role])
            sources[id(root)] = name
        return sources[id(root)]

    edges: set[tuple[str, str, int]] = set()
    for node in view.tree.nodes:
        target = owner[id(node)]
        for value in node.inputs.values():
            if value is None or id(value.find()) in view._optional_only or value.find().const is None:
                continue
            start = source(value)
            edge = (start or "", target, id(value.find()))
            if start is None or start == target or edge in edges:
                continue
            edges.add(edge)
            if view.role(value) in ("data", "value"):
                dot.edge(start, target, dot_id(view.shape_text(value)))
            else:
                dot.edge(start, target, attrs=_PARAM_EDGE)
    _, outputs = view.keys(view.tree)
    for key, value in outputs.items():
        if key in getattr(view.model, "_hidden", ()):
            continue
        name = f"o{next(counter)}"
        dot.node(name, dot_id(key), _STYLE["output"])
        start = source(value)
        if start is not None:
            edges.add((start, name, id(value.find())))
            dot.edge(start, name, dot_id(view.shape_text(value)))
    return "\n".join(dot.lines()) + "\n"


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


def render(dot_source: str, fmt: str = "svg") -> bytes:
    """Run Graphviz's ``dot`` on DOT text and return the picture (``svg``, ``png`` or ``pdf``).

    Raises:
        GraphvizNotFound: the ``dot`` program (or the ``graphviz`` Python package) is not installed.
        MithrilError: ``dot`` failed; the message names the command and what it wrote on stderr.
    """
    graphviz = _graphviz()
    fmt = validation.choice("render", "fmt", fmt, _FORMATS)
    try:  # quiet: a failure's stderr goes into the error, not onto the terminal
        return bytes(graphviz.Source(dot_source).pipe(format=fmt, quiet=True))
    except graphviz.ExecutableNotFound:
        raise GraphvizNotFound(
            "drawing the graph needs Graphviz's 'dot' program, which is not on PATH: install the 'graphviz' "
            "system package (apt-get install graphviz, brew install graphviz or conda install graphviz)"
        ) from None
    except graphviz.CalledProcessError as exc:
        command = " ".join(Path(str(part)).name if i == 0 else str(part) for i, part in enumerate(exc.cmd))
        stderr = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
        raise MithrilError(
            f"render: Graphviz's `{command}` failed (exit status {exc.returncode}): {stderr.strip() or 'no message'}"
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
        raise ArgumentError(
            f"plot({str(path)!r}): expected a file name ending in .svg, .png or .pdf, got "
            f"{target.suffix or 'no suffix'!r}"
        )
    picture = render(to_dot(model, depth, params=params), fmt)
    return write_file_atomically(target, picture, where=f"plot({str(path)!r})", error=ArgumentError)


def svg(model: Any, depth: int | None = None) -> str | None:
    """The SVG text of ``model``'s picture, or ``None`` when Graphviz is missing (what notebooks show)."""
    try:
        return render(to_dot(model, depth), "svg").decode("utf-8")
    except GraphvizNotFound:
        return None
