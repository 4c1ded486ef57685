"""The oracle: what every backend must answer for a :class:`~mithril_testing.fuzz.Recipe`.

- Outputs: the plain-NumPy references run in float64 (:func:`~mithril_testing.fuzz.evaluate_reference`).
- A numerical-noise estimate per output: the same references run in float32, compared with float64. It
  measures how much the graph amplifies rounding (cancellation, ill-conditioned chains), so tolerances
  follow the model instead of being one number for every graph.
- Gradients of ``sum_k <cotangent_k, output_k>``: central finite differences in float64 through the
  references, with the spec's stop-gradient semantics at non-differentiable inputs. Small parameters get
  every element; larger ones a few random directional derivatives. The truncation error of a difference
  is estimated on demand (steps ``h`` and ``2h``), so a kink crossed by accident loosens that entry
  instead of reporting a false disagreement.

Example:
    >>> import numpy as np
    >>> from mithril_testing.fuzz import Recipe
    >>> r = Recipe()
    >>> r.exposed += r.add_op("square", {"input": r.add_input(np.array([0.5, 1.0]), role="param")})
    >>> oracle = Oracle.of(r)
    >>> g = oracle.gradients["x0"]
    >>> bool(np.allclose(g.full, 2 * np.array([0.5, 1.0]) * oracle.cotangents["v0"], atol=1e-6))
    True
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..conformance import FD_EPS
from ._recipe import Recipe, evaluate_reference, kind_of_array, plan

__all__ = ["DIRECTIONS", "FULL_FD_ELEMENTS", "GradientOracle", "Oracle"]

FULL_FD_ELEMENTS = 32
"""Parameters with at most this many elements get a finite difference per element."""

DIRECTIONS = 3
"""Random directional derivatives checked for larger parameters."""


@dataclass
class GradientOracle:
    """Finite-difference gradient information for one parameter.

    Either ``full`` (an array like the parameter) or ``directions`` (unit-variance random arrays) with
    ``directional`` (the derivative along each)."""

    name: str
    full: np.ndarray | None = None
    directions: list[np.ndarray] = field(default_factory=list)
    directional: list[float] = field(default_factory=list)
    _errors: dict[tuple[str, int], float] = field(default_factory=dict)


class Oracle:
    """Expected outputs, noise estimates and finite-difference gradients of one recipe (see module doc).

    Build with :meth:`Oracle.of` (cached by the recipe's fingerprint)."""

    _cache: ClassVar[OrderedDict[str, Oracle]] = OrderedDict()
    CACHE_SIZE = 256

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self._steps = plan(recipe)
        arrays = recipe.input_arrays()
        self.values = evaluate_reference(recipe, arrays, steps=self._steps)
        self.outputs = {name: self.values[name] for name in recipe.outputs}
        values32 = evaluate_reference(recipe, arrays, dtype=np.float32, steps=self._steps)
        self.unstable: dict[str, np.ndarray] = {}
        self.noise: dict[str, float] = {}
        for name, expected in self.outputs.items():
            low = values32[name]
            if kind_of_array(expected) == "float":
                with np.errstate(all="ignore"):
                    diff = np.abs(low.astype(np.float64) - expected)
                self.noise[name] = float(np.max(diff)) if diff.size else 0.0
                if not np.all(np.isfinite(diff)):
                    self.noise[name] = math.inf
            elif low.shape == expected.shape:
                self.unstable[name] = low != expected  # discrete results that float32 rounding flips
        depth = recipe.depths()
        self.depth = {name: depth[name] for name in self.outputs}
        rng = np.random.default_rng(recipe.cotangent_seed)
        self.cotangents = {
            name: rng.standard_normal(value.shape).astype(np.float32).astype(np.float64)
            for name, value in self.outputs.items()
            if kind_of_array(value) == "float"
        }
        used = recipe.used_inputs()
        self.params = [n for n in recipe.params() if n in used and not recipe.only_discarded(n)]
        self.gradients: dict[str, GradientOracle] = {}
        if self.cotangents:
            for name in self.params:
                self.gradients[name] = self._finite_differences(name, rng)

    @classmethod
    def of(cls, recipe: Recipe) -> Oracle:
        """The (cached) oracle of ``recipe``."""
        key = recipe.fingerprint()
        oracle = cls._cache.get(key)
        if oracle is None:
            oracle = cls(recipe)
            cls._cache[key] = oracle
            while len(cls._cache) > cls.CACHE_SIZE:
                cls._cache.popitem(last=False)
        else:
            cls._cache.move_to_end(key)
        return oracle

    # -- amplification -----------------------------------------------------------------------------------
    def amplification(self) -> float:
        """How many float32 ulps (of each output's scale) the references lose, at worst over the outputs."""
        worst = 1.0
        eps32 = float(np.finfo(np.float32).eps)
        for name, noise in self.noise.items():
            scale = _scale(self.outputs[name])
            worst = max(worst, noise / (eps32 * scale))
        return worst

    # -- gradients ---------------------------------------------------------------------------------------
    def objective(self, overrides: Mapping[str, np.ndarray]) -> float:
        """``sum_k <cotangent_k, output_k>`` with some inputs replaced (non-differentiable inputs frozen),
        over the outputs that depend on them: the others are constant, and their (large) terms would only
        add rounding to a finite difference."""
        arrays = {**self.recipe.input_arrays(), **overrides}
        values = evaluate_reference(self.recipe, arrays, frozen=self.values, changed=set(overrides), steps=self._steps)
        dirty = self.recipe.dependents(set(overrides))
        return math.fsum(float(np.sum(values[k] * c)) for k, c in self.cotangents.items() if k in dirty)

    def _difference(self, name: str, direction: np.ndarray, h: float) -> float:
        base = self.recipe.inputs[name].array
        plus = self.objective({name: base + h * direction})
        minus = self.objective({name: base - h * direction})
        return (plus - minus) / (2 * h)

    def _finite_differences(self, name: str, rng: np.random.Generator) -> GradientOracle:
        base = self.recipe.inputs[name].array
        result = GradientOracle(name)
        if base.size <= FULL_FD_ELEMENTS:
            full = np.zeros(base.shape)
            for idx in np.ndindex(*base.shape):
                e = np.zeros(base.shape)
                e[idx] = 1.0
                full[idx] = self._difference(name, e, FD_EPS)
            result.full = full
        else:
            for _ in range(DIRECTIONS):
                u = rng.standard_normal(base.shape)
                result.directions.append(u)
                result.directional.append(self._difference(name, u, FD_EPS))
        return result

    def fd_error(self, name: str, index: int) -> float:
        """An estimate of the finite-difference error of one entry (``full``'s flat ``index`` or direction
        number ``index``): the spread of differences with steps ``h``, ``2h`` and ``4h``, which is large
        when the function is not smooth there."""
        g = self.gradients[name]
        key = ("full" if g.full is not None else "dir", index)
        if key not in g._errors:
            base = self.recipe.inputs[name].array
            if g.full is not None:
                direction = np.zeros(base.shape)
                direction.flat[index] = 1.0
            else:
                direction = g.directions[index]
            # all three recomputed (not read from ``full``/``directional``), so the estimate depends on
            # the function alone
            value, *others = [self._difference(name, direction, FD_EPS * k) for k in (1.0, 2.0, 4.0)]
            g._errors[key] = max(abs(o - value) for o in others)
        return g._errors[key]


def _scale(expected: np.ndarray) -> float:
    finite = np.abs(expected[np.isfinite(expected)]) if expected.size else np.zeros(0)
    return max(1.0, float(finite.max())) if finite.size else 1.0
