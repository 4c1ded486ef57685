"""In-process extension: register a primitive, an implementation or a gradient rule without a package.

Published plugins use the hooks (:mod:`mithril.plugins.hookspecs`); these helpers register into the live
registry for notebooks and tests.

Example:
    >>> import mithril as ml
    >>> from mithril.primitives import rules
    >>> ml.register_primitive("sin_times_x", inputs=("input",), shape_rule=rules.same_shape,
    ...                       type_rule=rules.float_result)                       # doctest: +SKIP
    >>> @ml.register_implementation("numpy", "sin_times_x")                       # doctest: +SKIP
    ... def sin_times_x(input):
    ...     return np.sin(input) * input
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .primitives.spec import PrimitiveSpec

__all__ = ["register_primitive", "register_implementation", "register_gradient"]


def register_primitive(name: str, *, inputs: tuple[str, ...], shape_rule: Any, type_rule: Any, **fields: Any) -> PrimitiveSpec:
    """Add a primitive to the registry and return its spec (see :class:`PrimitiveSpec` for fields)."""
    from .plugins import registry

    spec = PrimitiveSpec(name, inputs, shape_rule, type_rule, **fields)
    registry().add_primitive(spec, plugin="<in-process>")
    return spec


def register_implementation(backend: str, primitive: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``fn`` implements ``primitive`` on the backend named ``backend``."""
    from .plugins import registry

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        registry().add_impl(backend, primitive, fn, plugin="<in-process>")
        return fn

    return decorate


def register_gradient(primitive: str, *, backend: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: a VJP rule ``rule(ctx) -> {input_key: cotangent}`` (see :mod:`mithril.gradients`)."""
    from .plugins import registry

    def decorate(rule: Callable[..., Any]) -> Callable[..., Any]:
        registry().add_gradient(primitive, rule, backend=backend, plugin="<in-process>")
        return rule

    return decorate
