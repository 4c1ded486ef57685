"""Training around a compiled step: :func:`fit` (progress, history, callbacks, checkpoints) and
:func:`save_state` / :func:`load_state`.

Example:
    >>> import mithril as ml
    >>> ml.fit is fit and ml.save_state is save_state
    True
"""

from __future__ import annotations

from .checkpoint import load_state, save_state
from .fit import Callback, EarlyStopping, History, LambdaCallback, fit, latest_checkpoint

__all__ = [
    "Callback",
    "EarlyStopping",
    "History",
    "LambdaCallback",
    "fit",
    "latest_checkpoint",
    "load_state",
    "save_state",
]
