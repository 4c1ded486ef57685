"""Liveness: for every value a unit stores, the index of the last unit that reads its memory, so the
allocator (:mod:`~mithril_backend_c.allocation`) can reuse the workspace after it.

Views (reshape-like primitives, :data:`~mithril_backend_c.context.ALIAS_PRIMITIVES`) share their source's
memory: a read of the view is a read of the source. Returned values live to the end (``math.inf``).

Example (``y = relu(x)``, then ``z = exp(y)`` returned: ``y`` is read last by unit 1)::

    last_uses([Unit([relu]), Unit([exp])], returned={z.id})   # {x.id: 0, y.id: 1, z.id: inf}
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .context import ALIAS_PRIMITIVES
from .emitters.fused import Unit

__all__ = ["last_uses"]


def last_uses(units: Sequence[Unit], returned: set[int]) -> dict[int, float]:
    """Storage root (a value id) -> the index of the last unit reading it (``math.inf`` when returned);
    a value no unit reads is last used by the unit computing it."""
    root: dict[int, int] = {}  # value id -> the value whose memory it views
    last_use: dict[int, float] = {}
    for index, unit in enumerate(units):
        for value in unit.inputs:
            r = root.get(value.id, value.id)
            last_use[r] = max(last_use.get(r, -1), index)
        node = unit.nodes[0]
        if not unit.fused and node.spec.name in ALIAS_PRIMITIVES:
            (source_value,) = [v for v in node.inputs.values() if v is not None][:1]
            root[node.output.id] = root.get(source_value.id, source_value.id)
        outputs = unit.stored if unit.fused else list(node.outputs.values())
        for value in outputs:
            r = root.get(value.id, value.id)
            if value.id in returned:
                last_use[r] = math.inf
            last_use.setdefault(r, index)
    return last_use
