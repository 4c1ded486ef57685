"""Optimizers from the frameworks, accepted by ``ml.compile(..., optimizer=...)`` next to :mod:`mithril.optim`:
an ``optax.GradientTransformation`` on JAX, a ``torch.optim`` optimizer class (or a ``functools.partial`` of
one with its arguments) on PyTorch.

The backend's autograd gives the gradients of the loss; the framework's optimizer updates the parameters:
on JAX ``tx.update`` and ``optax.apply_updates`` run inside the same ``jax.jit`` as the forward and backward
passes (the state donated); on PyTorch the optimizer's ``step()`` updates the state's parameter tensors in
place, as a PyTorch loop does, so ``TrainState.opt_state`` is the ``torch.optim.Optimizer`` itself (a
``torch.optim.lr_scheduler`` can drive it).

Example:
    >>> import optax                                                                 # doctest: +SKIP
    >>> pm = ml.compile(train, ml.JaxBackend(), shapes=..., optimizer=optax.adamw(3e-4))   # doctest: +SKIP
    >>> pm = ml.compile(train, ml.TorchBackend(), shapes=...,
    ...                 optimizer=functools.partial(torch.optim.AdamW, lr=3e-4))            # doctest: +SKIP
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ..backends.backend import within
from ..errors import ArgumentError, CheckpointError
from ..lazy_numpy import np

__all__ = ["ExternalOptimizer", "external_optimizer"]


class ExternalOptimizer:
    """What the training step needs of a framework's optimizer."""

    kind = ""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer

    def init(self, params: dict[str, Any], backend: Any) -> Any:
        """The optimizer state for these parameters."""
        raise NotImplementedError

    def step_function(
        self, backend: Any, gradients: Callable[..., Any], *, jit: bool, jit_options: Mapping[str, Any]
    ) -> Callable[..., Any]:
        """``step(params, opt_state, data) -> (params, opt_state, outputs)``; ``gradients(params, data)``
        returns ``(outputs, grads)`` of the loss."""
        raise NotImplementedError

    def to_arrays(self, opt_state: Any) -> tuple[dict[str, np.ndarray], Any]:
        """The state as named NumPy arrays plus JSON (what ``save_state`` writes)."""
        raise NotImplementedError

    def check_state(self, opt_state: Any, params: Mapping[str, Any], where: str) -> None:
        """Refuse a state this optimizer did not make (another optimizer's, another kind's)."""
        raise NotImplementedError

    def from_arrays(self, template: Any, arrays: Mapping[str, np.ndarray], meta: Any, where: str, backend: Any) -> Any:
        """The state ``to_arrays`` described, rebuilt on ``template`` (a fresh :meth:`init`)."""
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.kind} {self.optimizer!r}"


class OptaxOptimizer(ExternalOptimizer):
    kind = "optax"

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer)
        self.structure: Any = None  # the pytree structure of this optimizer's state (checked every step)

    def init(self, params: dict[str, Any], backend: Any) -> Any:
        with backend.scope():  # JaxBackend's precision (x64) and settings
            return self.optimizer.init(params)

    def step_function(
        self, backend: Any, gradients: Callable[..., Any], *, jit: bool, jit_options: Mapping[str, Any]
    ) -> Callable[..., Any]:
        import optax  # optional: only an optax optimizer brings it

        tx = self.optimizer

        def step(params: dict[str, Any], opt_state: Any, data: dict[str, Any]) -> Any:
            outputs, grads = gradients(params, data)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, outputs

        if not jit:
            return within(backend.scope, step)
        options = {"donate_argnums": (0, 1), **dict(jit_options)}
        return backend.jit(step, **options)  # type: ignore[no-any-return]

    def check_state(self, opt_state: Any, params: Mapping[str, Any], where: str) -> None:
        import jax  # optional: the optimizer's framework, installed with its backend

        if self.structure is None:
            self.structure = jax.tree_util.tree_structure(jax.eval_shape(self.optimizer.init, dict(params)))
        found = jax.tree_util.tree_structure(opt_state)
        if found != self.structure:
            raise ArgumentError(
                f"{where}: the optimizer state does not have the structure {self.optimizer!r} keeps (an optax state of "
                "another optimizer, or Mithril's slots?)"
            )

    def to_arrays(self, opt_state: Any) -> tuple[dict[str, np.ndarray], Any]:
        import jax  # optional: the optimizer's framework, installed with its backend

        leaves = jax.tree_util.tree_leaves(opt_state)
        return {f"o{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)}, {"leaves": len(leaves)}

    def from_arrays(self, template: Any, arrays: Mapping[str, np.ndarray], meta: Any, where: str, backend: Any) -> Any:
        import jax  # optional: the optimizer's framework, installed with its backend
        import jax.numpy as jnp  # optional: the optimizer's framework, installed with its backend

        leaves, treedef = jax.tree_util.tree_flatten(template)
        if not isinstance(meta, Mapping) or meta.get("leaves") != len(leaves):
            raise CheckpointError(
                f"{where}: the optax state holds {meta.get('leaves') if isinstance(meta, Mapping) else meta!r} arrays; "
                f"this optimizer keeps {len(leaves)}"
            )
        restored = []
        for i, leaf in enumerate(leaves):
            array = arrays[f"o{i}"]
            if tuple(array.shape) != tuple(np.shape(leaf)):
                raise CheckpointError(
                    f"{where}: optax state array {i} has shape {list(array.shape)}, this optimizer's has "
                    f"{list(np.shape(leaf))}"
                )
            with backend.scope():  # float64 stays float64 on a float64 JaxBackend
                restored.append(jnp.asarray(array, dtype=jnp.asarray(leaf).dtype))
        return jax.tree_util.tree_unflatten(treedef, restored)


class TorchOptimizer(ExternalOptimizer):
    kind = "torch.optim"

    def init(self, params: dict[str, Any], backend: Any) -> Any:
        return self.optimizer(list(params.values()))

    def step_function(
        self, backend: Any, gradients: Callable[..., Any], *, jit: bool, jit_options: Mapping[str, Any]
    ) -> Callable[..., Any]:
        def step(params: dict[str, Any], opt_state: Any, data: dict[str, Any]) -> Any:
            outputs, grads = gradients(params, data)
            return *self.apply(params, grads, opt_state), outputs

        return step

    def check_state(self, opt_state: Any, params: Mapping[str, Any], where: str) -> None:
        import torch  # optional: the optimizer's framework, installed with its backend

        if not isinstance(opt_state, torch.optim.Optimizer):
            raise ArgumentError(
                f"{where}: the optimizer state is a {type(opt_state).__name__}; this model trains with a torch.optim "
                "optimizer (start from pm.init_state)"
            )
        held = {id(t) for group in opt_state.param_groups for t in group["params"]}
        if held != {id(t) for t in params.values()}:
            raise ArgumentError(
                f"{where}: the torch.optim optimizer does not hold this state's parameter tensors (it updates them in "
                "place); start from pm.init_state or ml.load_state, and keep the state train_step returns"
            )

    def apply(self, params: dict[str, Any], grads: Mapping[str, Any], opt_state: Any) -> tuple[dict[str, Any], Any]:
        """The optimizer's ``step()`` with ``grads`` as the parameters' gradients (updated in place)."""
        import torch  # optional: the optimizer's framework, installed with its backend

        with torch.no_grad():
            for key, tensor in params.items():
                tensor.grad = grads[key]
            opt_state.step()
            for tensor in params.values():
                tensor.grad = None
        return params, opt_state

    def to_arrays(self, opt_state: Any) -> tuple[dict[str, np.ndarray], Any]:
        state = opt_state.state_dict()
        arrays: dict[str, np.ndarray] = {}
        entries: dict[str, dict[str, Any]] = {}
        for index, values in state["state"].items():
            entries[str(index)] = {}
            for name, value in values.items():
                if hasattr(value, "detach"):
                    whole = value.full_tensor() if hasattr(value, "full_tensor") else value  # a DTensor: all of it
                    arrays[f"o{index}.{name}"] = whole.detach().cpu().numpy()
                    entries[str(index)][name] = {"tensor": f"o{index}.{name}"}
                else:
                    entries[str(index)][name] = {"value": value}
        groups = [{k: _jsonable(v) for k, v in group.items()} for group in state["param_groups"]]
        return arrays, {"state": entries, "param_groups": groups}

    def from_arrays(self, template: Any, arrays: Mapping[str, np.ndarray], meta: Any, where: str, backend: Any) -> Any:
        import torch  # optional: the optimizer's framework, installed with its backend

        if (
            not isinstance(meta, Mapping)
            or not isinstance(meta.get("state"), Mapping)
            or not isinstance(meta.get("param_groups"), list)
        ):
            raise CheckpointError(f"{where}: the torch.optim state is malformed")
        params = [t for group in template.param_groups for t in group["params"]]
        state: dict[int, dict[str, Any]] = {}
        for index, values in meta["state"].items():
            position = int(index)
            if not 0 <= position < len(params) or not isinstance(values, Mapping):
                raise CheckpointError(
                    f"{where}: the torch.optim state names parameter {index!r}; the optimizer has {len(params)}"
                )
            state[position] = {}
            for name, spec in values.items():
                if not isinstance(spec, Mapping) or not ({"tensor"} == set(spec) or {"value"} == set(spec)):
                    raise CheckpointError(
                        f"{where}: torch.optim state entry {index}.{name} is {spec!r}, expected {{'tensor': name}} or "
                        "{'value': number}"
                    )
                if "value" in spec:
                    state[position][name] = spec["value"]
                    continue
                array = np.array(arrays[spec["tensor"]])
                param = params[position]
                if array.ndim and tuple(array.shape) != tuple(param.shape):
                    raise CheckpointError(
                        f"{where}: torch.optim state {index}.{name} has shape {list(array.shape)}, its parameter "
                        f"{list(param.shape)}"
                    )
                state[position][name] = torch.from_numpy(array)
        try:
            template.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{where}: the torch.optim state does not fit this optimizer: {exc}") from None
        for param in params:  # on a device mesh the state is placed as its parameter
            if hasattr(param, "device_mesh"):
                from torch.distributed.tensor import distribute_tensor  # optional: PyTorch, only with a device mesh

                slots = template.state[param]
                for name, value in slots.items():
                    if isinstance(value, torch.Tensor) and value.ndim and not hasattr(value, "device_mesh"):
                        slots[name] = distribute_tensor(value, param.device_mesh, param.placements)
        return template


def _jsonable(value: Any) -> Any:
    """A param-group setting as JSON: tuples as lists, 0-d tensors (a tensor ``lr``) as numbers."""
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def _torch_optimizer_class(optimizer: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    target = optimizer.func if isinstance(optimizer, functools.partial) else optimizer
    if isinstance(target, type) and issubclass(target, torch.optim.Optimizer):
        return target
    return None


def external_optimizer(optimizer: Any, backend: Any) -> ExternalOptimizer | None:
    """The adapter for a framework optimizer, ``None`` for anything else; refuses one on the wrong backend."""
    name = type(backend).__name__
    if (
        type(optimizer).__module__.startswith("optax")
        and callable(getattr(optimizer, "init", None))
        and callable(getattr(optimizer, "update", None))
    ):
        if backend.backend_type != "jax":
            raise ArgumentError(
                f"ml.compile(optimizer=...): an optax GradientTransformation runs on JaxBackend, not {name}; use the "
                "mithril.optim equivalent (optim.AdamW, ...), which runs everywhere"
            )
        return OptaxOptimizer(optimizer)
    if _torch_optimizer_class(optimizer) is not None:
        if backend.backend_type != "torch":
            raise ArgumentError(
                f"ml.compile(optimizer=...): a torch.optim optimizer runs on TorchBackend, not {name}; use the "
                "mithril.optim equivalent (optim.AdamW, ...), which runs everywhere"
            )
        step = inspect.signature(_torch_optimizer_class(optimizer).step).parameters.get("closure")
        if step is not None and step.default is inspect.Parameter.empty:
            raise ArgumentError(
                f"ml.compile(optimizer=...): {_torch_optimizer_class(optimizer).__name__} needs a closure that "
                "re-evaluates the loss (step(closure)); train_step calls step() once per batch: use another "
                "torch.optim optimizer"
            )
        return TorchOptimizer(optimizer)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(optimizer, torch.optim.Optimizer):
        raise ArgumentError(
            "ml.compile(optimizer=...): pass the torch.optim class (or functools.partial(torch.optim.AdamW, lr=...)), "
            "not an optimizer already holding parameters: Mithril creates it for the compiled model's parameters"
        )
    return None
