"""``TrainState``: what a training step reads and returns.

Example:
    >>> state = TrainState(params={"w": 1.0}, opt_state={"m": {"w": 0.0}}, step=0.0)
    >>> state.step_count
    0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TrainState"]


@dataclass(frozen=True)
class TrainState:
    """Parameters (and buffers), optimizer state and step count, all backend arrays.

    Attributes:
        params: parameter (and buffer) name -> array, what ``pm.evaluate`` takes as ``params``.
        opt_state: optimizer slot (``"m"``, ``"v"``, ``"momentum"``...) -> parameter name -> array; with a
            framework's optimizer its own state (an optax state, the ``torch.optim.Optimizer``).
        step: how many updates were applied (a 0-d float array of the model's dtype).
        rng: the backend generator's state when the state was saved or loaded (JSON), or ``None``.
        loss_scale: with ``precision="fp16-mixed"``, the dynamic loss scale (``{"scale", "good_steps"}``,
            ``torch.amp.GradScaler``'s rule), else ``None``.

    ``pm.train_step(state, data)`` returns a new ``TrainState``; on JAX the arrays of the state passed in
    are donated to the step (as ``optax`` loops do), so keep using the returned one.
    """

    params: Mapping[str, Any]
    opt_state: Mapping[str, Mapping[str, Any]]
    step: Any
    rng: Any = field(default=None, compare=False)
    external: Any = field(default=None, compare=False, repr=False)  # the framework optimizer's adapter
    loss_scale: Any = field(default=None, compare=False)  # fp16-mixed: {"scale": float, "good_steps": int}

    @property
    def step_count(self) -> int:
        """The step count as a Python int."""
        value = self.step
        if hasattr(value, "item"):
            value = value.item()
        return int(round(float(value)))
