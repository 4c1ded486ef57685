"""Where the logical layer is defined: :class:`~mithril.framework.model.Model` (composition, naming, connect-time
shape inference) and :class:`~mithril.framework.keys.IOKey` / ``Connection`` (what keys are connected to).

Users import them from :mod:`mithril.models` (``from mithril.models import Model``, or ``ml.Model``), which
publishes them with the blocks built on them; they are defined here, the layer below ``models``, so that the
blocks can build on them without importing the package that publishes them."""

from .keys import TBD, Connection, IOKey
from .tensor_types import Tensor

__all__ = ["TBD", "Connection", "IOKey", "Tensor"]  # Mithril's `from mithril.framework import IOKey, Tensor`
