"""``model.summary()`` and ``pm.summary()``: a Keras-style table of blocks, shapes and parameter counts.

One row per block (path, type, input and output shapes, parameters), totals split into trainable, frozen
and buffers with their bytes, and for a compiled model the backend, dtype, compile time, parameter memory
and the largest activation. Rendered with rich when it is installed (``pip install "mithril-core[viz]"``),
as plain text otherwise; :meth:`Summary.html` is what notebooks show.

Unknown dims are shown by readable names (``batch``, ``seq``, ``height_1``; see :mod:`mithril.display._tree`),
never by internal ids. Names and keys are shown through
:func:`~mithril.compiler.codegen.escape.display_text`: one printable line each, so no escape sequence in a
name reaches the terminal.

``summary()`` prints the table and returns ``None`` (as Keras does); ``summary(print_fn=f)`` hands the text
to ``f`` instead, and ``str(model)`` or :meth:`Summary.text` is the text.

Example:
    >>> from mithril.models import IOKey, Model, Linear, Relu
    >>> model = Model()
    >>> model |= Linear(4)(input=IOKey("x", shape=["N", 3]))
    >>> model += Relu()
    >>> text = summarize(model).text()
    >>> "linear_0" in text and "[batch, 4]" in text
    True
"""

from __future__ import annotations

import html
import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import validation
from ..compiler.codegen.escape import display_text
from ..types import Dtype
from ._tree import ModelView, dtype_bytes, format_bytes, value_label

__all__ = ["Summary", "show_summary", "summarize"]

_COLUMNS = ("Block", "Type", "Input shape", "Output shape", "Params")
_READABLE_ROWS = 40
"""The default depth is the deepest one whose table has at most this many rows."""


@dataclass
class Summary:
    """The data of a summary table; :meth:`text`, :meth:`html` and :meth:`rich` render it."""

    title: str
    rows: list[tuple[str, ...]]
    totals: list[tuple[str, str]]
    details: list[tuple[str, str]] = field(default_factory=list)  # compiled: backend, dtype, ...
    counts: dict[str, int | None] = field(default_factory=dict)  # trainable / frozen / buffers elements

    def rich(self) -> Any:
        """A ``rich`` renderable (a table with the totals as its caption); needs rich."""
        from rich.console import Group  # rich is optional (the viz extra): a plain table without it
        from rich.table import Table  # rich is optional (the viz extra)
        from rich.text import Text  # rich is optional (the viz extra)

        table = Table(title=Text(self.title, style="bold"))
        for column in _COLUMNS:
            table.add_column(column, justify="right" if column == "Params" else "left", overflow="fold")
        for row in self.rows:
            table.add_row(*(Text(cell) for cell in row))  # Text: shapes like [batch, 4] are not markup
        lines = [Text.assemble((f"{k}: ", "bold"), v) for k, v in [*self.details, *self.totals]]
        return Group(table, *lines)

    def text(self) -> str:
        """Plain text (no colours): rich's table when rich is installed, an aligned table otherwise."""
        try:
            from rich.console import Console  # rich is optional (the viz extra): a plain table without it
        except ImportError:
            return self._plain()
        buffer = io.StringIO()
        Console(file=buffer, width=10_000, color_system=None, force_terminal=False, legacy_windows=False).print(
            self.rich()
        )
        return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())

    def _plain(self) -> str:
        widths = [max(len(r[i]) for r in [_COLUMNS, *self.rows]) for i in range(len(_COLUMNS))]

        def line(row: Sequence[str]) -> str:
            cells = enumerate(zip(row, widths, strict=True))
            return "  ".join(c.rjust(w) if i == 4 else c.ljust(w) for i, (c, w) in cells).rstrip()

        rule = "-" * len(line(_COLUMNS))
        body = [self.title, rule, line(_COLUMNS), rule, *map(line, self.rows), rule]
        return "\n".join([*body, *(f"{k}: {v}" for k, v in [*self.details, *self.totals])])

    def html(self) -> str:
        """An HTML table (what Jupyter shows for ``model`` and ``pm``)."""
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in _COLUMNS)
        body = "".join("<tr>" + "".join(f"<td><code>{esc(c)}</code></td>" for c in row) + "</tr>" for row in self.rows)
        foot = "<br>".join(f"<b>{esc(k)}</b>: {esc(v)}" for k, v in [*self.details, *self.totals])
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        return f"<div><p><b>{esc(self.title)}</b></p>{table}<p>{foot}</p></div>"

    def __str__(self) -> str:
        return self.text()


def _auto_depth(view: ModelView) -> int:
    deepest = max(view.tree.max_depth(), 1)
    for depth in range(deepest, 0, -1):
        if sum(1 for _ in view.tree.walk(depth)) <= _READABLE_ROWS:
            return depth
    return 1


def _count(values: dict[int, Any], view: ModelView) -> int | None:
    sizes = [view.elements(v) for v in values.values()]
    return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


def summarize(model: Any, depth: int | None = None) -> Summary:
    """The summary of a logical model or a :class:`~mithril.PhysicalModel`.

    Args:
        model: a ``Model`` (shapes as far as they are known) or a compiled model (its final shapes).
        depth: levels of blocks to show (``1``: the top-level blocks only); ``None`` picks the deepest
            level that keeps the table readable (at most 40 rows).

    >>> from mithril.models import Linear
    >>> summarize(Linear(3), depth=1).counts["trainable"] is None   # the input width is not known yet
    True
    """
    depth = validation.positive_int("summary", "depth", depth, optional=True, minimum=1)
    compiled = model if hasattr(model, "evaluate") and hasattr(model, "backend") else None
    logical = compiled.model if compiled is not None else model
    view = ModelView(logical, compiled)
    depth = depth if depth is not None else _auto_depth(view)
    dtype = compiled.backend.dtype if compiled is not None else Dtype.float32
    rows: list[tuple[str, ...]] = []
    for block in view.tree.walk(depth):
        inputs, outputs = view.keys(block)
        state = view.state(block)
        count = _count({k: v for group in state.values() for k, v in group.items()}, view)
        shown_inputs = {k: v for k, v in inputs.items() if id(v.find()) not in {i for g in state.values() for i in g}}
        indent = "  " * (block.depth - 1)
        rows.append(
            (
                indent + display_text(block.name),
                display_text(block.type_name),
                value_label(shown_inputs, view),
                value_label(outputs, view),
                _number(count) if count else "-" if count == 0 else "?",
            )
        )
    state = view.state(view.tree)
    counts = {
        "trainable": _count(state["param"], view),
        "frozen": _count(state["frozen"], view),
        "buffers": _count(state["buffer"], view),
    }
    width = dtype_bytes(dtype)
    totals = []
    for label, n in counts.items():
        if label != "trainable" and n == 0:
            continue
        totals.append(
            (
                f"{label} parameters" if label != "buffers" else "buffers",
                "unknown until the shapes are known"
                if n is None
                else f"{_number(n)} ({format_bytes(n * width)} as {dtype.value})",
            )
        )
    name = display_text(logical.name or type(logical).__name__)
    title = f"{name} ({display_text(type(logical).__name__)})"
    details: list[tuple[str, str]] = []
    if compiled is not None:
        title = f"{name} compiled for {type(compiled.backend).__name__}"
        details = _compiled_details(compiled, view, counts)
    return Summary(title, rows, totals, details, counts)


def _compiled_details(pm: Any, view: ModelView, counts: dict[str, int | None]) -> list[tuple[str, str]]:
    backend = pm.backend
    details = [
        ("backend", f"{type(backend).__name__} (device {getattr(backend, 'device', '?')})"),
        ("dtype", backend.dtype.value),
        ("compile time", f"{pm.compile_seconds * 1e3:.1f} ms ({pm.primitive_count} primitive calls)"),
    ]
    keys = view.compiled_keys
    for label, names in (
        ("data", pm.data_keys),
        ("outputs", pm.output_keys),
        ("parameters", [*pm.param_keys, *pm.buffer_keys]),
    ):
        shapes = [view.shape_text(keys[k]) if k in keys else str(pm.shapes.get(k)) for k in names]
        listed = [f"{display_text(k)} {display_text(shape)}" for k, shape in zip(names, shapes, strict=True)]
        if len(listed) > 8:  # GPT-2 has ~150 parameters: pm.param_keys lists them all
            listed = [*listed[:6], f"... {len(listed) - 6} more"]
        details.append((label, ", ".join(listed) or "none"))
    state = sum(n or 0 for n in counts.values())
    details.append(("parameter memory", format_bytes(state * dtype_bytes(backend.dtype))))
    largest: tuple[int, str] | None = None
    for node in view.flat_nodes:
        for value in node.outputs.values():
            ints = value.shape.static()
            if ints is None:
                continue
            size = 1
            for d in ints:
                size *= d
            nbytes = size * dtype_bytes(backend.kind_dtype(value.kind or "float"))
            if largest is None or nbytes > largest[0]:
                largest = (
                    nbytes,
                    f"{format_bytes(nbytes)} ({display_text(node.path or node.spec.name)}: {node.spec.name} -> "
                    f"{list(ints)})",
                )
    details.append(("largest activation", largest[1] if largest else "unknown (run-time shapes)"))
    return details


def _number(n: int) -> str:
    return f"{n:,}"


def show_summary(model: Any, depth: int | None = None, print_fn: Callable[[str], Any] = print) -> None:
    """Print the summary (with rich's colours on a terminal when ``print_fn`` is ``print``), or hand its
    plain text to ``print_fn`` (called once); returns ``None``, as Keras' ``summary()`` does.

    >>> from mithril.models import Linear
    >>> lines = []
    >>> show_summary(Linear(4), print_fn=lines.append)
    >>> "trainable parameters" in lines[0]
    True
    """
    if not callable(print_fn):
        accepted = "a callable taking the table's text (str(model) is the text)"
        raise validation.fail("summary", "print_fn", accepted, print_fn)
    summary = summarize(model, depth)
    if print_fn is not print:
        print_fn(summary.text())
    elif sys.stdout is not None and sys.stdout.isatty():
        try:
            from rich.console import Console  # rich is optional (the viz extra): a plain table without it
        except ImportError:
            print(summary.text())
        else:
            Console().print(summary.rich())
    else:
        print(summary.text())  # a pipe or a log: the whole table, never wrapped to 80 columns
