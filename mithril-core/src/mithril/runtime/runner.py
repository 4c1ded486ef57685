"""The runner: a compiled model's calls on its backend (``evaluate``'s outputs and gradients).

It loads the program's functions (the backend's JIT around them on JAX, PyTorch and MLX, the mixed-precision
wrapper of ``precision=``), has every call's inputs checked (:mod:`mithril.runtime.input_checks`), places them
over the device mesh (``parallelism=``), hands buffers to the generated code as run-time inputs and turns a
list given for a list-valued key into its members.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Linear
    >>> pm = ml.compile(Linear(2), ml.NumpyBackend(), shapes={"input": [1, 3]}, jit=False)
    >>> params = pm.randomize_params(seed=0)
    >>> outputs, grads = pm.evaluate(params, {"input": [[1.0, 2.0, 3.0]]}, output_gradients={"output": [[1.0, 1.0]]})
    >>> sorted(grads)
    ['bias', 'weight']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..backends.direct import InputsNeedChecking
from ..compiler.verbose import log_verbose
from ..errors import ArgumentError, MithrilError, ModelKeyError
from ..progress import task
from .input_checks import InputChecks
from .records import ProgramSignature, RunSettings

__all__ = ["Runner", "load_functions"]

Function = Callable[..., Any]


def load_functions(program: Any, backend: Any, settings: RunSettings, filename: str) -> dict[str, Function]:
    """The program's functions by name (``evaluate``, ``evaluate_gradients``, the training step), with the
    mixed-precision wrapper around ``evaluate`` when ``precision=`` asked for one."""
    if settings.jit and backend.supports_autograd:
        # a framework JIT gets this model's own ``evaluate``, not the shared compile-on-first-call trampoline
        functions = dict(program.load(filename, eager=("evaluate",)))
    else:
        functions = dict(program.load(filename))
    if settings.precision is not None:  # the forward computes in the low dtype; parameters stay float32
        functions["evaluate"] = backend.mixed_precision(functions["evaluate"], settings.precision[1])
    return functions


class Runner:
    """Runs one compiled model's ``evaluate`` (outputs, and gradients when cotangents are given)."""

    def __init__(
        self,
        backend: Any,
        functions: Mapping[str, Function],
        signature: ProgramSignature,
        settings: RunSettings,
        checks: InputChecks,
        name: str,
    ) -> None:
        self.backend = backend
        self.checks = checks
        self.plan = settings.plan
        self.buffer_updates = dict(signature.buffer_updates)
        self.input_groups = {key: tuple(members) for key, members in signature.input_groups.items()}
        self._verbose = settings.verbose
        self._name = name
        self._param_keys, self._buffer_keys = checks.param_keys, checks.buffer_keys
        evaluate, autograd, jit = functions["evaluate"], backend.supports_autograd, settings.jit
        options = {"jit_options": dict(settings.jit_options)} if settings.jit_options else {}
        self.forward: Function = backend.prepare_forward(evaluate, jit=jit, **options) if autograd else evaluate
        self.backward: Function | None
        if settings.inference or not signature.params:
            self.backward = None
        elif autograd:
            self.backward = backend.gradient_function(evaluate, jit=jit, **options)
        else:
            self.backward = functions.get("evaluate_gradients")
        self.compiled = {"forward": self.forward, "gradients": self.backward}  # what lower()/lowered_text() read
        if autograd and jit:  # the framework compiles on the first call: say so when it is slow
            self.forward = self._announce_first_call("forward", "forward")
            if self.backward is not None:
                self.backward = self._announce_first_call("backward", "forward+backward")
        # the fast path: an entry point that checks its own inputs takes the calls it accepts
        self.direct = checks.direct_entry(evaluate, allowed=settings.precision is None and settings.plan is None)
        self._direct_sizes = checks.direct_sizes

    def _announce_first_call(self, attribute: str, what: str) -> Function:
        """Wrap ``self.<attribute>`` so its first call (where JAX/PyTorch/MLX trace and compile) runs as a
        :func:`mithril.progress.task`; the wrapper then puts the plain function back (no per-call cost)."""
        fn = getattr(self, attribute)
        description = f"{type(self.backend).__name__}: compiling {self._name} {what} (first call)"

        def first_call(*args: Any) -> Any:
            started = time.perf_counter()
            with task(description):
                result = fn(*args)
            setattr(self, attribute, fn)
            if self._verbose:
                log_verbose(f"{description}: jit {time.perf_counter() - started:.4f} s (trace + compile + run)")
            return result

        return first_call

    # -- evaluate -----------------------------------------------------------------------------------
    def evaluate(self, params: Any, data: Any, output_gradients: Any) -> Any:
        """Outputs, or ``(outputs, gradients)`` when ``output_gradients`` is given (see ``PhysicalModel.evaluate``)."""
        if self.input_groups:  # list-valued keys (Concat's input): one value per member
            params, data = self._expand_groups(params, data)
            if output_gradients is not None:
                outputs, gradients = self._evaluate_ungrouped(params, data, output_gradients)
                return outputs, self._grouped(gradients)
        return self._evaluate_ungrouped(params, data, output_gradients)

    def _evaluate_ungrouped(self, params: Any, data: Any, output_gradients: Any) -> Any:
        direct = self.direct
        if direct is not None and output_gradients is None and type(params) is dict and type(data) is dict:
            if len(params) == self._direct_sizes[0] and len(data) == self._direct_sizes[1]:
                try:
                    return direct(params, data)
                except (InputsNeedChecking, KeyError):
                    pass  # the full checks convert the input or name what is wrong
        params, data = self.checks.evaluate_inputs(params, data)
        if self.plan is not None:
            params, data = self.placed(params), self.placed(data)
        params, data = self.with_buffers(params, data)
        if output_gradients is None:
            return self.forward(params, data)
        if self.plan is None:
            return self._gradients(params, data, output_gradients)
        outputs, gradients = self._gradients(params, data, output_gradients)
        return outputs, self.placed(gradients)  # gradients live where their parameters do

    def with_buffers(
        self, params: Mapping[str, Any], data: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """Buffers reach the generated code as run-time inputs (never differentiated): moved from ``params``
        to ``data``."""
        if not self._buffer_keys:
            return params, data
        return {k: params[k] for k in self._param_keys}, {**data, **{k: params[k] for k in self._buffer_keys}}

    def _gradients(
        self, params: Mapping[str, Any], data: Mapping[str, Any], output_gradients: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        checks = self.checks
        cotangents, given = checks.cotangents(output_gradients, params, data, self.forward)
        if self.backward is None:
            raise MithrilError(
                "evaluate(output_gradients=...): this model was compiled with inference=True or has no parameters; "
                "it has no gradients (compile without inference=True, with trainable parameters)"
            )
        unchecked = [key for key in given if key in checks.unchecked_outputs]
        if not unchecked:
            gradients: tuple[dict[str, Any], dict[str, Any]] = self.backward(params, data, cotangents)
            return gradients
        # some cotangent axes follow no input: compare them with the outputs the gradient pass computes
        # (a wrong shape may have broadcast silently), or diagnose the framework's error with a forward pass
        try:
            result: tuple[dict[str, Any], dict[str, Any]] = self.backward(params, data, cotangents)
        except MithrilError:
            raise
        except Exception:
            checks.check_cotangents_fit(unchecked, cotangents, self.forward(params, data))
            raise
        checks.check_cotangents_fit(unchecked, cotangents, result[0])
        return result

    # -- inputs and outputs -------------------------------------------------------------------------
    def placed(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """``arrays`` placed over the backend's device mesh per the sharding plan (unchanged without one)."""
        if self.plan is None:
            return dict(arrays)
        placed = {}
        for key, array in arrays.items():
            self.plan.check_shape(key, self.backend.shape_of(array))
            placed[key] = self.backend.place(array, self.plan.spec(key))
        return placed

    def update_buffers(self, params: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with every buffer replaced by its new value from ``outputs``."""
        missing = [out for out in self.buffer_updates.values() if out not in outputs]
        if missing:
            raise ModelKeyError(f"update_buffers: outputs {missing} are missing; pass the dict evaluate returned")
        return {**params, **{buffer: outputs[out] for buffer, out in self.buffer_updates.items()}}

    def _expand_groups(self, params: Any, data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """A list given for a list-valued key becomes its members, each where it belongs (a trainable
        member in ``params``, the others in ``data``), whichever of the two held the list."""
        params, data = dict(params or {}), dict(data or {})
        for name, members in self.input_groups.items():
            for source in (params, data):
                if name not in source:
                    continue
                values = source.pop(name)
                if not isinstance(values, (list, tuple)) or len(values) != len(members):
                    raise ArgumentError(
                        f"evaluate: {name!r} is a list of {len(members)} arrays ({', '.join(members)}), got {values!r}"
                    )
                for member, value in zip(members, values, strict=True):
                    (params if member in self.checks.state_keys else data)[member] = value
        return params, data

    def _grouped(self, gradients: Mapping[str, Any]) -> dict[str, Any]:
        """Gradients of a list-valued key's members as one list under the key's name."""
        grouped = dict(gradients)
        for name, members in self.input_groups.items():
            if all(m in grouped for m in members):
                grouped[name] = [grouped.pop(m) for m in members]
        return grouped
