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

    ``pm.train_step(state, data)`` returns a new ``TrainState``; the state passed in is consumed: on JAX
    its arrays are donated to the step (as ``optax`` loops do), and PyTorch's eager step writes the new
    parameters and optimizer slots into its tensors (as ``torch.optim`` does). Keep using the returned
    one; passing a consumed state again raises (:attr:`consumed`).
    """

    params: Mapping[str, Any]
    opt_state: Mapping[str, Mapping[str, Any]]
    step: Any
    rng: Any = field(default=None, compare=False)
    external: Any = field(default=None, compare=False, repr=False)  # the framework optimizer's adapter
    loss_scale: Any = field(default=None, compare=False)  # fp16-mixed: {"scale": float, "good_steps": int}
    consumed: bool = field(default=False, compare=False, repr=False)
    """Whether a ``train_step`` that updates in place has taken this state (its arrays now hold the next
    state's values)."""

    def mark_consumed(self) -> None:
        """Record that a ``train_step`` wrote the next state into this one's arrays."""
        object.__setattr__(self, "consumed", True)  # the one mutable mark of the frozen record

    @property
    def step_count(self) -> int:
        """The step count as a Python int."""
        value = self.step
        if hasattr(value, "item"):
            value = value.item()
        return round(float(value))
