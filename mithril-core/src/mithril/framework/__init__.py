"""The logical layer: :class:`~mithril.framework.model.Model` (composition, naming, connect-time shape
inference) and :class:`~mithril.framework.keys.IOKey` / ``Connection`` (what keys are connected to)."""

from .keys import TBD, Connection, IOKey
from .tensor_types import Tensor

__all__ = ["IOKey", "Connection", "TBD", "Tensor"]  # Mithril's `from mithril.framework import IOKey, Tensor`
