"""Bugs the fuzzer found that are not fixed yet, so the quick profile (``test_fuzz.py``) stays green.

Each entry names its regression test in ``regressions/`` (marked ``xfail(strict=True)``: when the bug is
fixed that test XPASSes and fails, and both it and this entry should be updated). ``matches`` recognises a
disagreement caused by the bug as narrowly as possible: the kind of failure *and* the model structure
that triggers it, so other bugs in the same models are still reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mithril.testing.fuzz import Disagreement, Oracle, Recipe

AUTOGRAD_BACKENDS = frozenset({"jax", "torch", "mlx"})


@dataclass(frozen=True)
class KnownBug:
    """A reported bug: where it shows, which regression test pins it, and how to recognise it."""

    name: str
    backends: frozenset[str]
    regressions: tuple[str, ...]
    diagnosis: str
    matches: Callable[[Disagreement], bool]

    def applies(self, found: Disagreement) -> bool:
        return found.backend in self.backends and self.matches(found)


def _kind(found: Disagreement) -> str:
    return found.category.split(":")[-1]


def _notes(found: Disagreement) -> str:
    return found.error + "\n" + "\n".join(m.note for m in found.mismatches)


def _nondifferentiable_param_input(recipe: Recipe) -> bool:
    """Some call gets a float value that depends on a parameter at an input its spec declares
    non-differentiable (a loss target, a gradient helper's operand, ``floor_divide``...)."""
    from mithril.testing.cases import spec_for

    dependent = recipe.dependents(set(recipe.params()))
    values = Oracle.of(recipe).values
    for op in recipe.ops:
        spec = spec_for(op.primitive)
        attrs = spec.resolve_attributes(dict(op.attrs))
        differentiable = set(spec.differentiable_keys(attrs))
        for key, ref in op.inputs.items():
            if isinstance(ref, str) and key not in differentiable and ref in dependent and values[ref].dtype.kind == "f":
                return True
    return False


KNOWN_BUGS: tuple[KnownBug, ...] = (
    KnownBug(
        "autograd-ignores-nondifferentiable",
        AUTOGRAD_BACKENDS,
        ("test_jax_nondifferentiable_target.py", "test_torch_nondifferentiable_target.py", "test_mlx_nondifferentiable_target.py", "test_torch_floor_divide_gradient.py"),
        "mithril-backend-{jax,torch,mlx}: autograd differentiates through inputs the spec declares non-differentiable (loss targets, gradient-helper operands, floor_divide) where NumPy/C/GGML give zero; PyTorch raises for float floor_divide",
        lambda f: _kind(f) in ("gradient", "evaluate-error") and _nondifferentiable_param_input(f.recipe),
    ),
)


def known_bug(found: Disagreement) -> KnownBug | None:
    """The known bug that explains ``found``, if any."""
    for bug in KNOWN_BUGS:
        if bug.applies(found):
            return bug
    return None
