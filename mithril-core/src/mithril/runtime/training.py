"""Running the compiled training step: :meth:`PhysicalModel.init_state` and :meth:`PhysicalModel.train_step`.

On NumPy, C and GGML the generated ``train_step`` function is the whole step. On JAX, PyTorch and MLX the
step is the backend's autograd over the generated ``evaluate`` followed by the generated
``apply_updates``, compiled together by the backend's JIT (one ``jax.jit`` whose state argument is
donated, one ``mx.compile``, one function ``torch.compile`` can take).

Example:
    >>> import mithril as ml
    >>> from mithril import optim
    >>> from mithril.models import Linear, Mean, Model, SquaredError, TrainModel
    >>> model = Model()
    >>> model |= Linear(1)(input="input", output="output")
    >>> train = TrainModel(model)
    >>> train.add_loss(SquaredError(), reduce_steps=[Mean()], input="output", target="target")
    >>> pm = ml.compile(train, ml.NumpyBackend(), shapes={"input": [4, 2], "target": [4, 1]},
    ...                 optimizer=optim.SGD(lr=0.1))                                  # doctest: +SKIP
    >>> state = pm.init_state(pm.randomize_params())                                 # doctest: +SKIP
    >>> state, outputs = pm.train_step(state, {"input": x, "target": y})             # doctest: +SKIP
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..compiler.train_step import TrainLayout
from ..errors import ArgumentError, MithrilError, ModelKeyError
from ..lazy_numpy import np
from ..optim.state import TrainState
from .runner import Runner

__all__ = ["TrainingProgram"]


class TrainingProgram:
    """The training half of a :class:`~mithril.runtime.PhysicalModel` compiled with ``optimizer=``: its inputs
    are checked, placed and handed over as :class:`~mithril.runtime.runner.Runner` does for ``evaluate``."""

    def __init__(
        self,
        runner: Runner,
        layout: TrainLayout,
        loss_shape: tuple[int, ...],
        functions: Mapping[str, Callable[..., Any]],
        *,
        jit: bool,
        jit_options: Mapping[str, Any],
        loss_scaling: bool = False,
    ) -> None:
        self.runner, self.layout, self.loss_shape = runner, layout, loss_shape
        self.checks = runner.checks
        self._consuming = threading.Lock()  # taking an in-place step's state: one caller only
        self.backend = backend = runner.backend
        self.param_keys = sorted(self.checks.param_keys)
        self.slots = tuple(layout.slot_inputs)
        self.external = layout.external
        self.loss_scaling = loss_scaling
        if loss_scaling or self.external is not None:  # the step runs in Python around the backend's autograd
            forward = backend.prepare_forward(functions["evaluate"], jit=False)
            self._gradients = _loss_gradients(backend, forward, layout.loss, loss_shape)
            self._update = None if self.external is not None else functions[layout.function]
        if self.external is not None:
            self.call = self.external.step_function(backend, self._gradients, jit=jit, jit_options=jit_options)
            return
        if not backend.supports_autograd:
            self.call = functions[layout.function]
            return
        gradients = _loss_gradients(backend, functions["evaluate"], layout.loss, loss_shape)  # traced with the step
        update, param_keys, grad_inputs = functions[layout.function], self.param_keys, layout.grad_inputs
        in_place = layout.in_place

        def step(state: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
            params = {k: state[k] for k in param_keys}
            outputs, grads = gradients(params, data)
            if in_place:  # an output viewing a parameter keeps this step's value
                outputs = backend.unaliased(outputs, params.values())
            updated = update({**state, **{grad_inputs[k]: g for k, g in grads.items()}}, {})
            return {**outputs, **updated}

        options = dict(jit_options)
        if jit and "donate_argnums" in backend.jit_option_names():
            options.setdefault("donate_argnums", (0,))  # the old state's buffers become the new state's
        self.call = backend.prepare_forward(step, jit=jit, jit_options=options)

    def init_state(self, params: Mapping[str, Any]) -> TrainState:
        """The state to start from: copies of ``params``, the optimizer's slots at zero, step 0."""
        checks, backend = self.checks, self.backend
        if not isinstance(params, Mapping):
            raise ArgumentError(
                f"init_state(params=...): expected a dict of name -> array, got {type(params).__name__}"
            )
        if params.keys() != checks.state_keys:
            checks.check_group(params, checks.state_keys, "params", where="init_state")
        checks.check_arrays(params, {}, params_only=True, where="init_state")
        # copies: the step may donate (JAX) or update the state's buffers, never the caller's arrays
        copied = self.place({k: backend.array(np.array(backend.to_numpy(v))) for k, v in params.items()})
        step, loss_scale = backend.array(np.asarray(0.0)), self.initial_loss_scale()
        if self.external is not None:
            opt_state = self.external.init({k: copied[k] for k in self.param_keys}, backend)
            rng = _rng_state(backend)
            return TrainState(copied, opt_state, step, rng=rng, external=self.external, loss_scale=loss_scale)
        opt_state = {slot: {k: backend.zeros_like(copied[k]) for k in self.param_keys} for slot in self.slots}
        return self.placed(TrainState(copied, opt_state, step, rng=_rng_state(backend), loss_scale=loss_scale))

    def initial_loss_scale(self) -> dict[str, Any] | None:
        """fp16-mixed: ``torch.amp.GradScaler``'s start (scale 2**16)."""
        return {"scale": INITIAL_SCALE, "good_steps": 0} if self.loss_scaling else None

    def place(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """``arrays`` (parameters, data) placed over the device mesh as ``evaluate`` places them."""
        return self.runner.placed(arrays)

    def placed(self, state: TrainState) -> TrainState:
        """With ``parallelism=``: every optimizer slot placed as its parameter is, the step replicated."""
        plan, backend = self.runner.plan, self.backend
        if plan is None:
            return state
        opt_state = {
            slot: {k: backend.place(v, plan.spec(k)) for k, v in values.items()}
            for slot, values in state.opt_state.items()
        }
        step = backend.place(state.step, None)
        return TrainState(self.place(state.params), opt_state, step, rng=state.rng, loss_scale=state.loss_scale)

    def check_state(self, state: Any) -> None:
        """``state`` is a :class:`TrainState` this step can take: its parameters, step and optimizer slots."""
        checks = self.checks
        if not isinstance(state, TrainState):
            raise ArgumentError(
                "train_step(state=...): expected an ml.TrainState (from pm.init_state(params) or ml.load_state), "
                f"got {type(state).__name__}"
            )
        if not isinstance(state.params, Mapping) or state.params.keys() != checks.state_keys:
            given = dict(state.params) if isinstance(state.params, Mapping) else {}
            checks.check_group(given, checks.state_keys, "params", where="train_step")
        backend = self.backend
        if state.consumed:
            raise _consumed_error()
        for key in self.param_keys:
            deleted = getattr(state.params[key], "is_deleted", None)
            if callable(deleted) and deleted():
                raise ArgumentError(
                    f"train_step(state): parameter {key!r} was donated to an earlier train_step (JAX reuses its "
                    "buffer); keep using the state each train_step returns"
                )
        step = state.step
        if not backend.is_array(step) or tuple(step.shape) != () or step.dtype != backend.native_dtype("float"):
            shown = f"shape {tuple(step.shape)}, dtype {step.dtype}" if backend.is_array(step) else type(step).__name__
            raise ArgumentError(
                f"train_step(state): step is {shown}; expected a 0-d {backend.native_dtype('float')} backend array "
                "(as pm.init_state makes)"
            )
        if self.external is not None:
            params = {k: state.params[k] for k in self.param_keys}
            self.external.check_state(state.opt_state, params, "train_step(state)")
            return
        self._check_slots(state)

    def _check_slots(self, state: TrainState) -> None:
        """The state's optimizer slots: one backend array like each parameter per slot of the optimizer."""
        backend = self.backend
        opt_state = state.opt_state
        if not isinstance(opt_state, Mapping) or not all(isinstance(v, Mapping) for v in opt_state.values()):
            raise ArgumentError(
                f"train_step(state): the optimizer state is a {type(opt_state).__name__}; this model was compiled "
                f"with {type(self.layout.optimizer).__name__}, whose state maps slots {list(self.slots)} to "
                "parameter arrays"
            )
        if set(state.opt_state) != set(self.slots):
            raise ModelKeyError(
                f"train_step(state): the optimizer state has slots {sorted(state.opt_state)}, "
                f"{type(self.layout.optimizer).__name__} keeps {list(self.slots)}"
            )
        for slot, values in state.opt_state.items():
            if set(values) != set(self.param_keys):
                raise ModelKeyError(
                    f"train_step(state): optimizer slot {slot!r} holds {sorted(values)}, expected the parameters "
                    f"{self.param_keys}"
                )
            for key, value in values.items():
                param = state.params[key]
                is_array = backend.is_array(value)
                if not is_array or tuple(value.shape) != tuple(param.shape) or value.dtype != param.dtype:
                    shown = f"shape {tuple(value.shape)}, dtype {value.dtype}" if is_array else type(value).__name__
                    raise ArgumentError(
                        f"train_step(state): optimizer slot {slot!r} of {key!r} is {shown}; expected a backend array "
                        f"like its parameter (shape {tuple(param.shape)}, dtype {param.dtype})"
                    )

    def step(self, state: TrainState, data: Mapping[str, Any]) -> tuple[TrainState, dict[str, Any]]:
        """One step from ``state`` on ``data``: the new state and the outputs before the update."""
        checks, backend = self.checks, self.backend
        self.check_state(state)
        data = {} if data is None else data
        if not isinstance(data, Mapping):
            raise ArgumentError(f"train_step(data=...): expected a dict of name -> array, got {type(data).__name__}")
        if data.keys() != checks.data_keys:
            checks.check_group(data, checks.data_keys, "data", where="train_step")
        params = state.params
        data = checks.checked_inputs(params, data, where="train_step")
        if self.runner.plan is not None:
            data = self.place(data)
            if self.external is None:  # a framework optimizer holds the state's (already placed) arrays themselves
                params = self.place(params)
        if checks.buffer_keys:  # buffers reach the generated code as runtime inputs, as in evaluate
            data = {**data, **{k: params[k] for k in checks.buffer_keys}}
        if self.loss_scaling:
            return self._scaled_step(state, params, data)
        if self.external is not None:
            new, opt_state, outputs = self.call({k: params[k] for k in self.param_keys}, state.opt_state, data)
            new_params = {**params, **new, **self.new_buffers(params, outputs)}
            next_state = TrainState(
                new_params, opt_state, self._next_step(state), rng=_rng_state(backend), external=self.external
            )
            return next_state, dict(outputs)
        if self.layout.in_place:
            self._consume(state)
        result = self.call(self._update_inputs(params, state), data)
        outputs = {k: result[k] for k in checks.outputs}
        updated, opt_state, step = self._updated(result)
        merged = {**updated, **self.new_buffers(params, outputs)}
        new_params = {k: merged[k] for k in params}
        return TrainState(new_params, opt_state, step, rng=_rng_state(backend)), outputs

    def _consume(self, state: TrainState) -> None:
        """Take ``state`` for an update that writes into its arrays: checked and marked in one step, so of
        two threads given the same state one updates it and the other gets the error."""
        with self._consuming:
            if state.consumed:
                raise _consumed_error()
            state.mark_consumed()

    def _update_inputs(
        self, params: Mapping[str, Any], state: TrainState, grads: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """What the generated update reads: parameters, optimizer slots and step (and, for ``apply_updates``,
        the gradients) under the layout's names."""
        layout = self.layout
        inputs = {k: params[k] for k in self.param_keys}
        for slot in self.slots:
            inputs.update({layout.slot_inputs[slot][k]: v for k, v in state.opt_state[slot].items()})
        inputs[layout.step_input] = state.step
        inputs.update({layout.grad_inputs[k]: g for k, g in (grads or {}).items()})
        return inputs

    def _updated(self, result: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]], Any]:
        """New parameters, optimizer slots and step from the generated update's results."""
        layout = self.layout
        params = {k: result[layout.param_outputs[k]] for k in self.param_keys}
        opt_state = {slot: {k: result[layout.slot_outputs[slot][k]] for k in self.param_keys} for slot in self.slots}
        return params, opt_state, result[layout.step_output]

    def _next_step(self, state: TrainState) -> Any:
        """A framework optimizer counts its own steps; the state's count follows."""
        return self.backend.array(np.asarray(state.step_count + 1.0))

    def new_buffers(self, params: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        """The buffers' next values (BatchNorm's running statistics) from a step's outputs; only the buffers:
        the parameters are the update's."""
        buffers = self.checks.buffer_keys
        if not buffers:
            return {}
        updated = self.runner.update_buffers(params, outputs)
        return {k: updated[k] for k in buffers}

    def _scaled_step(
        self, state: TrainState, params: Mapping[str, Any], data: Mapping[str, Any]
    ) -> tuple[TrainState, dict[str, Any]]:
        """fp16-mixed: backward of ``loss * scale``, gradients unscaled; a step whose gradients are not all
        finite is skipped and halves the scale, ``GROWTH_INTERVAL`` finite steps in a row double it
        (``torch.amp.GradScaler``'s rule)."""
        backend = self.backend
        if not isinstance(state.loss_scale, Mapping) or not {"scale", "good_steps"} <= set(state.loss_scale):
            raise ArgumentError(
                "train_step(state): precision='fp16-mixed' needs the state's loss_scale (start from pm.init_state or "
                "ml.load_state)"
            )
        scale, good = float(state.loss_scale["scale"]), int(state.loss_scale["good_steps"])
        only = {k: params[k] for k in self.param_keys}
        outputs, grads = self._gradients(only, data, scale)
        if self.layout.in_place:
            outputs = backend.unaliased(outputs, only.values())
        grads = {k: g * (1.0 / scale) for k, g in grads.items()}
        finite = all(bool(np.isfinite(backend.to_numpy(g)).all()) for g in grads.values())
        new_params, opt_state, step = dict(params), state.opt_state, state.step
        if finite:
            if self.external is not None:
                updated, opt_state = self.external.apply(only, grads, state.opt_state)
                new_params.update(updated)
                step = self._next_step(state)
            else:
                assert self._update is not None
                if self.layout.in_place:
                    self._consume(state)
                updated, opt_state, step = self._updated(self._update(self._update_inputs(params, state, grads), {}))
                new_params.update(updated)
            good += 1
            if good >= GROWTH_INTERVAL:
                scale, good = scale * 2.0, 0
        else:
            scale, good = scale * 0.5, 0
        new_params.update(self.new_buffers(params, outputs))
        loss_scale = {"scale": scale, "good_steps": good}
        rng = _rng_state(backend)
        next_state = TrainState(new_params, opt_state, step, rng=rng, external=self.external, loss_scale=loss_scale)
        return next_state, dict(outputs)


INITIAL_SCALE = 2.0**16
GROWTH_INTERVAL = 2000
"""fp16 loss scaling as ``torch.amp.GradScaler``'s defaults: start at 2**16, double after 2000 finite steps,
halve (and skip the step) on a non-finite gradient."""


def _loss_gradients(
    backend: Any, forward: Callable[..., Any], loss: str, loss_shape: tuple[int, ...]
) -> Callable[..., Any]:
    """``gradients(params, data, scale=1.0) -> (outputs, grads)``: the backend's autograd of ``scale * loss``."""

    def gradients(params: dict[str, Any], data: dict[str, Any], scale: float = 1.0) -> Any:
        seed = backend.ones(loss_shape) if scale == 1.0 else backend.ones(loss_shape) * scale
        return backend.vjp(lambda p: forward(p, data), params, {loss: seed})

    return gradients


def _rng_state(backend: Any) -> Any:
    """The backend generator's state as JSON (NumPy's bit generator state), or ``None``."""
    rng = getattr(backend, "_rng", None)
    if isinstance(rng, np.random.Generator):
        return _jsonable(rng.bit_generator.state)
    return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.integer):
        return int(value)
    return value


def _consumed_error() -> ArgumentError:
    return ArgumentError(
        "train_step(state): this state was consumed by an earlier train_step, which wrote the next "
        "parameters and optimizer slots into its arrays (as torch.optim updates in place); keep using "
        "the state each train_step returns"
    )


def not_compiled_for_training(where: str) -> MithrilError:
    return MithrilError(
        f"{where}: this model was compiled without an optimizer; compile with "
        "ml.compile(model, backend, ..., optimizer=mithril.optim.AdamW(lr=...)) to get a training step"
    )
