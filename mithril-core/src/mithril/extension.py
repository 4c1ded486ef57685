"""In-process extension: register a primitive, an implementation or a gradient rule without a package.

Published plugins use the hooks (:mod:`mithril.plugins.hookspecs`); these helpers register into the live
registry for notebooks and tests.

Example:
    >>> import mithril as ml
    >>> from mithril.extend import rules
    >>> ml.register_primitive("sin_times_x", inputs=("input",), shape_rule=rules.same_shape,
    ...                       type_rule=rules.float_result)                       # doctest: +SKIP
    >>> @ml.register_implementation("numpy", "sin_times_x")                       # doctest: +SKIP
    ... def sin_times_x(input):
    ...     return np.sin(input) * input
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .errors import ArgumentError
from .lazy_plugins import registry
from .primitives import shape_rules
from .primitives.registry import uses_backend
from .primitives.spec import PrimitiveSpec

__all__ = ["register_gradient", "register_implementation", "register_primitive"]


def register_primitive(
    name: str, *, inputs: tuple[str, ...] | None = None, shape_rule: Any = None, type_rule: Any = None, **fields: Any
) -> Any:
    """Add a primitive to the registry and return its spec (see :class:`PrimitiveSpec` for fields).

    Decorator form (the manual's): ``@ml.register_primitive("sin_times_x")`` over ``fn(backend, x, ...)``
    written in backend ops (``backend.sin(x) * x``) registers the primitive with the function's
    arguments after ``backend`` as inputs (the first is ``input`` when there is one, as in Mithril's
    blocks; several broadcast together), a float result, and ``fn`` as its implementation on every Python
    backend (NumPy, JAX, PyTorch, MLX). Autograd backends differentiate through ``fn``; a companion
    ``@ml.register_primitive("sin_times_x_grad")`` over ``grad_fn(backend, x, grad)`` (d/dx times the
    output cotangent) is the gradient rule the symbolic backends (NumPy) use. Use it in a model as
    ``ml.Primitive("sin_times_x")()`` (keys ``input``/``output``).

    >>> @ml.register_primitive("sin_times_x")                                    # doctest: +SKIP
    ... def sin_times_x(backend, x):
    ...     return backend.sin(x) * x
    """
    if inputs is None and shape_rule is None and type_rule is None and not fields:
        return lambda fn: _register_function(name, fn)
    if inputs is None or shape_rule is None or type_rule is None:
        raise ArgumentError(
            f"register_primitive({name!r}): give inputs=, shape_rule= and type_rule= together, or none of them "
            "(decorator form)"
        )
    spec = PrimitiveSpec(name, inputs, shape_rule, type_rule, **fields)
    registry().add_primitive(spec, plugin="<in-process>")
    return spec


def _register_function(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The decorator form of :func:`register_primitive`."""
    reg = registry()
    arguments = list(inspect.signature(fn).parameters)[1:]  # after ``backend``
    base = name.removesuffix("_grad")
    companion = name.endswith("_grad") and base in _FUNCTIONS
    if not arguments:
        raise ArgumentError(
            f"@register_primitive({name!r}): {fn.__name__} must take the backend and at least one array"
        )
    if companion:
        base_inputs = reg.primitives[base].input_keys({})
        if len(base_inputs) != 1 or len(arguments) != 2:
            raise ArgumentError(
                f"@register_primitive({name!r}): a gradient companion takes (backend, x, grad) for a one-input "
                f"primitive; {base!r} has inputs {base_inputs} and {fn.__name__} takes {arguments}"
            )
        keys: tuple[str, ...] = (*base_inputs, "output_grad")
    else:
        keys = ("input", *arguments[1:])
    shape_rule = shape_rules.same_shape if len(keys) == 1 or companion else shape_rules.broadcast
    spec = PrimitiveSpec(
        name, keys, shape_rule, shape_rules.float_result, doc=(fn.__doc__ or f"{fn.__name__} (in-process)").strip()
    )
    reg.add_primitive(spec, plugin="<in-process>")

    @functools.wraps(fn)
    def implementation(backend: Any, *arrays: Any) -> Any:
        return fn(backend, *arrays)

    reg.add_impl("*", name, uses_backend(implementation), plugin="<in-process>")
    _FUNCTIONS[name] = fn
    if companion:
        key = keys[0]
        reg.add_gradient(
            base, lambda ctx: {key: ctx.ops.__getattr__(name)(ctx[key], ctx.cotangent)}, plugin="<in-process>"
        )
    return fn


_FUNCTIONS: dict[str, Callable[..., Any]] = {}
"""Primitives registered with the decorator form (a ``name_grad`` companion attaches to one of these)."""


def registered_function(name: str) -> Callable[..., Any] | None:
    """The function the decorator form of :func:`register_primitive` registered as ``name``, if any.

    >>> registered_function("no_such_primitive") is None
    True
    """
    return _FUNCTIONS.get(name)


def register_implementation(backend: str, primitive: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``fn`` implements ``primitive`` on the backend named ``backend``."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        registry().add_impl(backend, primitive, fn, plugin="<in-process>")
        return fn

    return decorate


def register_gradient(
    primitive: str, *, backend: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: a VJP rule ``rule(ctx) -> {input_key: cotangent}`` (see :mod:`mithril.gradients`)."""

    def decorate(rule: Callable[..., Any]) -> Callable[..., Any]:
        registry().add_gradient(primitive, rule, backend=backend, plugin="<in-process>")
        return rule

    return decorate
