"""Gradient-helper primitives derived from an autograd backend's own ``vjp``.

The generic VJP rules emit helper primitives (``conv2d_grad_input``, ``max_pool2d_grad``, ...) so that
manual-gradient backends (NumPy, C, GGML) get backward passes; they implement them by hand. Autograd
backends (JAX, PyTorch, MLX) never need them for their own gradients, which come from differentiating
the forward. They still answer a direct call (``backend.conv2d_grad_input(...)``) and run a graph that
contains one: each helper here is the backend's ``vjp`` of the forward primitive it belongs to, so no
autograd backend writes a ``*_grad_*`` function.

Example:
    >>> import mithril as ml                                                   # doctest: +SKIP
    >>> backend = ml.JaxBackend()                                              # doctest: +SKIP
    >>> backend.index_grad(backend.ones(2), backend.zeros(4), key=slice(1, 3)).tolist()  # doctest: +SKIP
    [0.0, 1.0, 1.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ArgumentError
from ...primitives import uses_backend
from ...primitives.catalogue.recurrent import LSTM_INPUTS, LSTM_OUTPUTS
from ._binding import Impl

__all__ = ["GRADIENT_HELPERS", "derived_gradient_helpers", "is_derived", "linear_grad_weight"]

# helper -> (forward primitive, forward inputs as (helper input | "@", ...) with "@" the differentiated
# one, the helper input holding the primal point). The helper's ``output_grad`` is the cotangent.
_DERIVATIONS: dict[str, tuple[str, tuple[str | None, ...], str]] = {
    "conv1d_grad_input": ("conv1d", ("@", "weight", None), "like"),
    "conv2d_grad_input": ("conv2d", ("@", "weight", None), "like"),
    "conv1d_grad_weight": ("conv1d", ("input", "@", None), "like"),
    "conv2d_grad_weight": ("conv2d", ("input", "@", None), "like"),
    "max_pool2d_grad": ("max_pool2d", ("@",), "input"),
    "avg_pool2d_grad": ("avg_pool2d", ("@",), "input"),
    "embedding_grad": ("embedding", ("input", "@"), "like"),
    "index_grad": ("index", ("@",), "like"),
    "gather_grad": ("gather", ("@", "index"), "like"),
    "cross_entropy_grad": ("cross_entropy", ("@", "target"), "input"),
    "matmul_grad_left": ("matmul", ("@", "right"), "left"),
    "matmul_grad_right": ("matmul", ("left", "@"), "right"),
    "cholesky_grad": ("cholesky", ("@",), "input"),
    "eigvalsh_grad": ("eigvalsh", ("@",), "input"),
}  # fmt: skip

# helper -> (forward primitive, its inputs, its outputs) for helpers that are a forward's whole VJP: inputs
# (one cotangent per forward output, the forward inputs, any forward outputs), one gradient per forward input.
_WHOLE_VJPS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "lstm_recurrence_grad": ("lstm_recurrence", LSTM_INPUTS, LSTM_OUTPUTS),
}

GRADIENT_HELPERS: frozenset[str] = frozenset(_DERIVATIONS) | frozenset(_WHOLE_VJPS)
"""Helper primitives only backward graphs need: autograd backends derive them, they never write them."""


def _derive(name: str, forward: Impl) -> Impl:
    _, wiring, primal = _DERIVATIONS[name]

    @uses_backend
    def helper(backend: Any, output_grad: Any, *inputs: Any, **attrs: Any) -> Any:
        expected = _INPUTS[name]
        if len(inputs) != len(expected):
            raise ArgumentError(
                f"{name}: expected inputs (output_grad, {', '.join(expected)}), given {1 + len(inputs)}; "
                f"missing {', '.join(repr(k) for k in expected[len(inputs) :]) or 'none'}"
            )
        given = dict(zip(expected, inputs, strict=True))

        def run(params: Mapping[str, Any]) -> dict[str, Any]:
            args = [params["x"] if k == "@" else None if k is None else given[k] for k in wiring]
            return {"output": _call(backend, forward, args, attrs)}

        _, grads = backend.vjp(run, {"x": given[primal]}, {"output": output_grad})
        return grads["x"]

    helper._mithril_derived = True  # type: ignore[attr-defined]
    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = f"``{name}``: the backend's vjp of ``{_DERIVATIONS[name][0]}`` applied to ``output_grad``."
    return helper


_INPUTS: dict[str, tuple[str, ...]] = {
    "conv1d_grad_input": ("weight", "like"), "conv2d_grad_input": ("weight", "like"),
    "conv1d_grad_weight": ("input", "like"), "conv2d_grad_weight": ("input", "like"),
    "max_pool2d_grad": ("input",), "avg_pool2d_grad": ("input",), "embedding_grad": ("input", "like"),
    "index_grad": ("like",), "gather_grad": ("index", "like"), "cross_entropy_grad": ("input", "target"),
    "cholesky_grad": ("input",), "eigvalsh_grad": ("input",),
    "matmul_grad_left": ("left", "right"), "matmul_grad_right": ("left", "right"),
}  # fmt: skip
"""The helper's inputs after ``output_grad``, in its spec's order."""


def _call(backend: Any, forward: Impl, args: list[Any], attrs: dict[str, Any]) -> Any:
    if getattr(forward, "_mithril_uses_backend", False):
        return forward(backend, *args, **attrs)
    return forward(*args, **attrs)


def is_derived(implementation: Callable[..., Any]) -> bool:
    """Whether ``implementation`` (an op-table entry) is a helper derived here, not one a backend wrote.

    >>> is_derived(linear_grad_weight)
    False
    """
    return bool(getattr(implementation, "_mithril_derived", False))


def linear_grad_weight(output_grad: Any, input: Any) -> Any:
    """``output_grad[..., d]^T @ input[..., k]`` summed over all leading axes -> ``[d, k]`` (array methods
    only, so one function serves every namespace)."""
    d, k = output_grad.shape[-1], input.shape[-1]
    return output_grad.reshape(-1, d).T @ input.reshape(-1, k)


def _derive_whole(name: str, forward: Impl) -> Impl:
    """A whole-VJP helper (:data:`_WHOLE_VJPS`): the backend's ``vjp`` of ``forward`` at the given inputs."""
    primitive, inputs, outputs = _WHOLE_VJPS[name]

    @uses_backend
    def helper(backend: Any, *given: Any) -> tuple[Any, ...]:
        if len(given) < len(outputs) + len(inputs):
            raise ArgumentError(
                f"{name}: expected the cotangents of {', '.join(outputs)} and the inputs {', '.join(inputs)} of "
                f"{primitive}, given {len(given)} arrays"
            )
        # arrays after the inputs (lstm_recurrence_grad's forward output, which a backend's own helper reads)
        # are not needed here: the vjp recomputes the forward
        cotangents = dict(zip(outputs, given, strict=False))
        primals = dict(zip(inputs, given[len(outputs) :], strict=False))

        def run(params: Mapping[str, Any]) -> dict[str, Any]:
            return dict(zip(outputs, _call(backend, forward, [params[k] for k in inputs], {}), strict=True))

        _, grads = backend.vjp(run, primals, cotangents)
        return tuple(grads[k] for k in inputs)

    helper._mithril_derived = True  # type: ignore[attr-defined]
    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = f"``{name}``: the backend's vjp of ``{primitive}`` for the cotangents of all its outputs."
    return helper


def derived_gradient_helpers(forwards: Mapping[str, Callable[..., Any]]) -> dict[str, Impl]:
    """``{helper: implementation}`` for every helper whose forward primitive is in ``forwards``."""
    single = {name: _derive(name, forwards[spec[0]]) for name, spec in _DERIVATIONS.items() if spec[0] in forwards}
    return single | {
        name: _derive_whole(name, forwards[spec[0]]) for name, spec in _WHOLE_VJPS.items() if spec[0] in forwards
    }
