"""Optimizers and learning-rate schedules compiled into one training step.

``ml.compile(train_model, backend, optimizer=optim.AdamW(lr=3e-4))`` builds forward, backward and the
update as one compiled call: ``state = pm.init_state(params)``, then ``state, outputs =
pm.train_step(state, data)``. The updates are written in Mithril's own primitives, so the same optimizer
runs on NumPy, JAX, PyTorch, MLX, C and GGML.

Example:
    >>> from mithril import optim
    >>> optim.SGD(lr=0.1, momentum=0.9)
    SGD(lr=Constant(lr=0.1), weight_decay=0.0, momentum=0.9, nesterov=False)
"""

from __future__ import annotations

from . import schedules
from .optimizers import SGD, Adam, AdamW, Lion, Optimizer, ParamInfo, RMSprop
from .schedules import Schedule, constant, cosine_decay, join, linear_warmup, step_decay, warmup_cosine

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "Lion",
    "Optimizer",
    "ParamInfo",
    "RMSprop",
    "Schedule",
    "constant",
    "cosine_decay",
    "join",
    "linear_warmup",
    "schedules",
    "step_decay",
    "warmup_cosine",
]  # fmt: skip
