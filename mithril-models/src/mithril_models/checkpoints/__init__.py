"""Checkpoint reading and loading: sources (:mod:`.source`, on core's :mod:`mithril.serialization`), name maps
(:mod:`.layout`) and :func:`load_hf` (:mod:`.loader`).

Example:
    >>> from mithril_models.checkpoints import Layout, Target, transpose
    >>> Layout("mine", {"fc.weight": [Target("head.weight", transpose)]}).name
    'mine'
"""

from mithril.extend import SafetensorsFile, save_safetensors

from .errors import CheckpointError
from .export import to_checkpoint
from .layout import Layout, Target, merge_layouts, take, transpose
from .loader import LoadReport, load_hf
from .source import TensorSource, open_checkpoint, to_numpy

__all__ = [
    "CheckpointError",
    "Layout",
    "LoadReport",
    "SafetensorsFile",
    "Target",
    "TensorSource",
    "load_hf",
    "merge_layouts",
    "open_checkpoint",
    "save_safetensors",
    "take",
    "to_checkpoint",
    "to_numpy",
    "transpose",
]
