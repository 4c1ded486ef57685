"""What ``ml.compile`` hands the runtime: three typed records, read by :class:`~mithril.runtime.PhysicalModel`.

- :class:`ProgramSignature`: what the compiled program takes and returns (inputs by role, outputs, the checks
  its inputs get, the names users and checkpoints see).
- :class:`RunSettings`: how its functions run (JIT, mixed precision, sharding, the training step).
- :class:`CompileReport`: where it came from (the logical model, its size, the compile time).

Example:
    >>> signature = ProgramSignature(params={}, buffers={}, data={}, outputs={}, differentiable_outputs=())
    >>> signature.state_keys, signature.data_keys
    (frozenset(), frozenset())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..compiler.graph import Value
from ..compiler.index_checks import IndexCheck
from ..compiler.train_step import TrainLayout
from ..parallel.plan import ShardingPlan
from ..types import Dtype

__all__ = ["CompileReport", "ProgramSignature", "RunSettings"]

# NamedTuples rather than dataclasses: immutable and typed alike, and far cheaper to define at ``import mithril``
# (the records are never mutated, so the shared empty defaults are safe).


class ProgramSignature(NamedTuple):
    """The compiled program's inputs and outputs.

    ``params`` are the trainable inputs (gradients are returned for them), ``buffers`` the non-trainable state
    passed with them in ``evaluate``'s ``params`` (BatchNorm's running statistics), ``data`` the run-time
    inputs; each maps a name to its value in the compiled graph (shape, kind, initialiser).
    """

    params: Mapping[str, Value]
    buffers: Mapping[str, Value]
    data: Mapping[str, Value]
    outputs: Mapping[str, Value]
    differentiable_outputs: Sequence[str]
    """The outputs a cotangent may be given for, in order."""
    buffer_updates: Mapping[str, str] = {}
    """Buffer -> the output holding its next value."""
    paths: Mapping[str, str] = {}
    """Input name -> its logical path (``h_0.attn.c_attn.weight``)."""
    index_checks: Sequence[IndexCheck] = ()
    """Range checks of integer indices given as run-time data (:mod:`mithril.compiler.index_checks`)."""
    fan_in: Mapping[str, int] = {}
    """Bias -> the fan-in of the weight it is added to (how ``randomize_params`` bounds it)."""
    discarded_keys: frozenset[str] = frozenset()
    """What ``discard_keys`` removed: the discarded outputs and the inputs that only fed them."""
    input_groups: Mapping[str, Sequence[str]] = {}
    """A list-valued key (``Concat``'s ``input``) -> its member inputs."""

    @property
    def state_keys(self) -> frozenset[str]:
        """What ``evaluate``'s ``params`` holds: parameters and buffers."""
        return frozenset(self.params) | frozenset(self.buffers)

    @property
    def data_keys(self) -> frozenset[str]:
        return frozenset(self.data)

    def inputs(self) -> dict[str, Value]:
        """Every input, in ``input_keys`` order: parameters, buffers, data."""
        return {**self.params, **self.buffers, **self.data}


class RunSettings(NamedTuple):
    """How the compiled functions run."""

    jit: bool
    """Wrap them in the backend's JIT (autograd backends)."""
    inference: bool = False
    """No gradient function (``ml.compile(inference=True)``)."""
    jit_options: Mapping[str, Any] = {}
    verbose: bool = False
    """Log the JIT's first call with its time."""
    precision: tuple[str, Dtype] | None = None
    """``(name, compute dtype)`` of ``ml.compile(precision=...)``'s mixed precision, or ``None``."""
    plan: ShardingPlan | None = None
    """How inputs are placed over the backend's device mesh (``parallelism=``), or ``None``."""
    train: tuple[TrainLayout, tuple[int, ...]] | None = None
    """The training step's layout and the loss's shape (``optimizer=``), or ``None``."""


class CompileReport(NamedTuple):
    """Where a compiled model came from."""

    model: Any
    """The logical model compiled."""
    primitive_count: int
    compile_seconds: float
    file_path: str | None = None
    """Where the generated source was also written (``ml.compile(file_path=...)``)."""
