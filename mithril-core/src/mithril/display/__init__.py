"""Seeing a model: the summary table (:func:`summarize`) and the graph picture (:func:`to_dot`,
:func:`plot`). ``model.summary()``, ``model.plot(path)``, ``ml.to_dot(model)`` and their
:class:`~mithril.PhysicalModel` counterparts call these.

Example:
    >>> from mithril.models import Model, Linear
    >>> model = Model()
    >>> model |= Linear(4)(input="x")
    >>> print(summarize(model, depth=1).rows[0][:2])
    ('linear_0', 'Linear')
"""

from __future__ import annotations

from .graph import GraphvizNotFound, plot, render, svg, to_dot
from .summary import Summary, show_summary, summarize

__all__ = ["GraphvizNotFound", "Summary", "plot", "render", "show_summary", "summarize", "svg", "to_dot"]
