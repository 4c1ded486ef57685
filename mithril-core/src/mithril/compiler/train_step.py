"""The training step in the graph: ``ml.compile(..., optimizer=...)`` adds the optimizer's update, written in
primitives (:mod:`mithril.optim`), to the compiled graph.

Manual-gradient backends (NumPy, C, GGML) get one generated function ``train_step``: forward, the symbolic
backward of the loss (cotangent 1) and the update. Autograd backends (JAX, PyTorch, MLX) get
``apply_updates`` (parameters, gradients and optimizer state in, new ones out); the backend's autograd
supplies the gradients and its JIT compiles both into one call (:mod:`mithril.runtime.training`).

Example:
    >>> layout = TrainLayout.names(["weight"], ("m",), autograd=False, taken=set(), loss="loss", optimizer=None)
    >>> layout.slot_inputs["m"]["weight"], layout.param_outputs["weight"]
    ('__opt_m__weight', '__new__weight')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentError, ModelKeyError
from ..optim import Optimizer, ParamInfo
from ..optim._math import GraphMath
from ..optim.external import external_optimizer
from .backward import build_backward
from .graph import Graph, Value

__all__ = ["TrainLayout", "build_train_step", "check_optimizer"]


@dataclass
class TrainLayout:
    """The names the generated training function reads and returns (none can clash with the model's)."""

    loss: str
    optimizer: Any
    slot_inputs: dict[str, dict[str, str]]  # slot -> parameter -> input name
    step_input: str
    grad_inputs: dict[str, str]  # autograd backends: parameter -> gradient input name
    param_outputs: dict[str, str]  # parameter -> output name of its new value
    slot_outputs: dict[str, dict[str, str]]
    step_output: str
    function: str  # "train_step" (whole step) or "apply_updates" (the update only); "" for an external optimizer
    external: Any = None  # a framework's optimizer (mithril.optim.external), updating outside the graph
    in_place: bool = False  # the update writes into the state's arrays: train_step consumes the state it is given

    @classmethod
    def for_external(cls, loss: str, adapter: Any) -> TrainLayout:
        """The layout of a framework optimizer's step: nothing of it is in the graph."""
        return cls(loss, adapter.optimizer, {}, "", {}, {}, {}, "", "", external=adapter)

    @classmethod
    def names(
        cls, params: Iterable[str], slots: Iterable[str], *, autograd: bool, taken: set[str], loss: str, optimizer: Any
    ) -> TrainLayout:
        params, slots = list(params), list(slots)

        def name(text: str) -> str:
            while text in taken:
                text = "_" + text
            taken.add(text)
            return text

        return cls(
            loss=loss,
            optimizer=optimizer,
            slot_inputs={s: {p: name(f"__opt_{s}__{p}") for p in params} for s in slots},
            step_input=name("__opt_step__"),
            grad_inputs={p: name(f"__grad__{p}") for p in params} if autograd else {},
            param_outputs={p: name(f"__new__{p}") for p in params},
            slot_outputs={s: {p: name(f"__new_{s}__{p}") for p in params} for s in slots},
            step_output=name("__new_step__"),
            function="apply_updates" if autograd else "train_step",
        )


def check_optimizer(
    optimizer: Any, loss: Any, outputs: Mapping[str, Value], params: Iterable[str], inference: bool, backend: Any
) -> tuple[str, Any]:
    """The loss key ``ml.compile(optimizer=..., loss=...)`` minimises and the adapter of a framework's
    optimizer (``None`` for :mod:`mithril.optim`'s), after checking the arguments."""
    adapter = external_optimizer(optimizer, backend)
    if adapter is None and not isinstance(optimizer, Optimizer):
        hint = ""
        module = type(optimizer).__module__.split(".")[0]
        if module in ("optax", "torch"):
            hint = "; from optax a GradientTransformation (optax.adamw(...)), from torch.optim an optimizer class"
        raise ArgumentError(
            "ml.compile(optimizer=...) takes a mithril.optim optimizer (optim.SGD, optim.Adam, optim.AdamW, "
            "optim.RMSprop, optim.Lion), an optax GradientTransformation (JAX) or a torch.optim class (PyTorch), got "
            f"{optimizer!r}{hint}"
        )
    if inference:
        raise ArgumentError(
            "ml.compile(optimizer=...) with inference=True: a training step needs the backward pass; drop "
            "inference=True"
        )
    if not list(params):
        raise ArgumentError("ml.compile(optimizer=...): the model has no trainable parameters to update")
    if backend.dtype.value not in ("float32", "float64"):
        raise ArgumentError(
            f"ml.compile(optimizer=...) trains float32 or float64 parameters; {type(backend).__name__} computes in "
            f"{backend.dtype.value} (its step count and updates would lose precision): create it with dtype=ml.float32 "
            "and compute in low precision with precision='bf16-mixed'"
        )
    if loss is None:
        if "final_cost" not in outputs:
            raise ArgumentError(
                "ml.compile(optimizer=...): name the scalar output to minimise with loss='...' (outputs: "
                f"{sorted(outputs)}), or compile a TrainModel (its 'final_cost' is minimised)"
            )
        loss = "final_cost"
    if not isinstance(loss, str) or loss not in outputs:
        raise ModelKeyError(f"ml.compile(loss={loss!r}): not an output of the model; its outputs are {sorted(outputs)}")
    if outputs[loss].kind not in (None, "float"):
        raise ArgumentError(f"ml.compile(loss={loss!r}): the loss must be a float output, got {outputs[loss].kind}")
    return loss, adapter


def check_loss_shape(layout: TrainLayout, outputs: Mapping[str, Value]) -> tuple[int, ...]:
    """The loss must be one number (after shapes are solved)."""
    shape = outputs[layout.loss].shape.static()
    if shape is None or any(size != 1 for size in shape):
        shown = list(shape) if shape is not None else repr(outputs[layout.loss].shape)
        raise ArgumentError(
            f"ml.compile(loss={layout.loss!r}): the loss must be a scalar, got shape {shown}; reduce it "
            "(TrainModel.add_loss(loss, reduce_steps=[Mean()]) or a Mean() block)"
        )
    return tuple(shape)


def build_train_step(
    graph: Graph,
    optimizer: Optimizer,
    loss: str,
    outputs: Mapping[str, Value],
    wrt: Mapping[str, Value],
    paths: Mapping[str, str],
    *,
    autograd: bool,
    backend_type: str | None,
    taken: set[str],
    in_place: bool = False,
) -> tuple[TrainLayout, dict[str, Value], dict[str, Value]]:
    """Emit the training step into ``graph``: returns the layout, the new inputs (optimizer state, step;
    gradients on autograd backends) and the new outputs (updated parameters, state and step). With
    ``in_place`` the update may write into the parameters and slots it reads (the state is consumed)."""
    layout = TrainLayout.names(wrt, optimizer.slots, autograd=autograd, taken=taken, loss=loss, optimizer=optimizer)
    layout.in_place = in_place
    inputs: dict[str, Value] = {}

    def new_input(name: str, like: Value | None) -> Value:
        value = graph.new_value(like.shape if like is not None else [], "float", name=name)
        inputs[name] = value
        return value

    if autograd:
        grads = {p: new_input(layout.grad_inputs[p], wrt[p]) for p in wrt}
    else:
        seed = graph.emit("ones_like", outputs[loss], path="train")
        grads = build_backward(graph, wrt, {loss: (outputs[loss], seed)}, backend_type)  # type: ignore[dict-item]
    state = {s: {p: new_input(layout.slot_inputs[s][p], wrt[p]) for p in wrt} for s in optimizer.slots}
    step = new_input(layout.step_input, None)
    infos = {p: ParamInfo(p, paths.get(p, p), v.shape.rank) for p, v in wrt.items()}
    new_params, new_state, new_step = optimizer.apply(
        GraphMath(graph, in_place=in_place), wrt, grads, state, step, infos
    )
    returns = {layout.param_outputs[p]: v for p, v in new_params.items()}
    for slot, values in new_state.items():
        returns.update({layout.slot_outputs[slot][p]: v for p, v in values.items()})
    returns[layout.step_output] = new_step
    graph.solve()
    return layout, inputs, returns
