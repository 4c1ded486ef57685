"""``summary()``, ``plot()``, ``print``/``str`` and the notebook views, shared by the logical ``Model`` and the
compiled ``PhysicalModel`` (both delegate to :mod:`mithril.display`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .graph import plot as plot_graph
from .graph import svg
from .summary import show_summary, summarize

__all__ = ["Displayable"]


class Displayable:
    """Mixin: the ways to see a model. ``str(model)`` is its summary table; notebooks show the table
    (``_repr_html_``) and the graph picture (``_repr_svg_``, when Graphviz is installed)."""

    __slots__ = ()

    def summary(self, depth: int | None = None, print_fn: Callable[[str], Any] = print) -> None:
        """Print a table of the blocks with their input/output shapes and parameter counts; a compiled model
        adds its backend, dtype, compile time, parameter memory and largest activation (see
        :mod:`mithril.display.summary`). ``depth=1``: top-level blocks only; ``None``: a readable depth.
        Returns ``None``, as Keras does: ``print_fn`` receives the table's text instead of ``print``, and
        ``str(model)`` is the text (``mithril.display.summarize(model, depth).text()`` at another depth).

        >>> from mithril.models import Linear
        >>> lines = []
        >>> Linear(4).summary(print_fn=lines.append)
        >>> "trainable parameters" in lines[0]
        True
        """
        show_summary(self, depth, print_fn)

    def plot(self, path: Any, depth: int | None = None, *, params: bool = True) -> Any:
        """Draw the graph to ``path`` (``.svg``, ``.png`` or ``.pdf``) with Graphviz; see
        :func:`mithril.display.plot`. Returns the path written.

        >>> model.plot("model.svg", depth=2)   # doctest: +SKIP
        """
        return plot_graph(self, path, depth, params=params)

    def __str__(self) -> str:
        return summarize(self).text()

    def _repr_html_(self) -> str:
        return summarize(self).html()

    def _repr_svg_(self) -> str | None:
        return svg(self)
