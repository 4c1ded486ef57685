"""Core's own plugin: registers the primitive set and the generic gradient rules through the same hooks
third-party plugins use."""

from __future__ import annotations

from collections.abc import Callable

from ..gradients.vjp_rules import ALL_RULES
from ..primitives.catalogue import ALL_SPECS
from ..primitives.catalogue.custom import apply_lambda
from .hookspecs import hookimpl


@hookimpl
def mithril_register_primitives(register: Callable[..., None]) -> None:
    for spec in ALL_SPECS:
        register(spec)


@hookimpl
def mithril_register_gradients(register: Callable[..., None]) -> None:
    for name, rule in ALL_RULES.items():
        register(name, rule)


@hookimpl
def mithril_register_impls(register: Callable[..., None]) -> None:
    register("*", "lambda", apply_lambda)  # "*": every backend whose generated code is Python
