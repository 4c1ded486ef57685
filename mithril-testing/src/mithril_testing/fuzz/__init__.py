"""Differential fuzzing: random models, every backend, one answer.

A Hypothesis strategy (:func:`recipes`) draws random logical models: DAGs of 1-40 primitives from the
registry (elementwise and broadcasting ops, reductions, shape ops, matmul/linear, conv/pool, attention,
losses, the gradient-helper primitives...), with shared inputs, constants, reused intermediates and
repeated subexpressions, random ``data_keys``/``constant_keys``/``discard_keys``, valid by construction
(shapes and values come from running the plain-NumPy references while the model is built). Each model is
compiled on a backend with all passes and with passes disabled (:func:`passes_disabled`), and its outputs
and gradients are compared with the :class:`Oracle` (references in float64, finite differences).

Entry points:

- ``pytest -m fuzz`` (``tests/fuzz``): the quick, derandomised profile on every installed backend;
- ``python -m mithril_testing.fuzz --backend c --examples 10000 --out fuzz-failures``: a campaign that
  writes each new disagreement's minimal reproduction as a standalone pytest file;
  ``--profile lifecycle`` also checks each model the way programs use it (:class:`Lifecycle`: compiled
  again, arrays refilled in place, two compiled models interleaved, threads).

Example:
    >>> from hypothesis import given, settings
    >>> from mithril_testing.fuzz import FuzzProfile, check_recipe, recipes
    >>> @settings(max_examples=5, database=None, derandomize=True, deadline=None)
    ... @given(recipes(FuzzProfile(max_ops=4)))
    ... def test_numpy(recipe):
    ...     found = check_recipe(recipe, "numpy")
    ...     assert found is None, found.report()
    >>> test_numpy()

Requires ``hypothesis`` and ``pytest`` (the reproductions are pytest files), which ``pip install mithril-testing``
installs.
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401
    import pytest  # noqa: F401 - the reproductions are pytest files (mithril_testing.conformance imports it too)
except ImportError as exc:
    raise ImportError(
        f"mithril_testing.fuzz needs {exc.name or 'hypothesis and pytest'}, which the mithril-testing package "
        "declares: pip install mithril-testing"
    ) from exc

from ._campaign import (
    BATCH,
    ISOLATED_BACKENDS,
    NATIVE_BACKENDS,
    QUICK_EXAMPLES,
    QUICK_LIFECYCLE_EXAMPLES,
    CampaignResult,
    batches,
    default_profile,
    run_campaign,
    variant_strategy,
)
from ._check import (
    BatchCheck,
    Disagreement,
    Mismatch,
    backend_dtype,
    check_batch,
    check_recipe,
    make_backend,
    tolerance_for,
)
from ._generate import FAMILIES, GENERATED_PRIMITIVES, NOT_GENERATED, FuzzProfile, checked_call, recipes, valid_recipe
from ._isolation import IsolatedChecker
from ._lifecycle import LIFECYCLE_STEPS, Call, Feed, Lifecycle, refilled
from ._oracle import GradientOracle, Oracle
from ._passes import PASSES, VARIANTS, passes_disabled
from ._recipe import ROLES, Const, Input, Op, Recipe, array_literal, combine, evaluate_reference
from ._reduce import prune, reduce_disagreement, renumber
from ._repro import ReproductionText, compact_literal, reproduction_source, write_reproduction

__all__ = [
    "BATCH",
    "FAMILIES",
    "GENERATED_PRIMITIVES",
    "ISOLATED_BACKENDS",
    "LIFECYCLE_STEPS",
    "NATIVE_BACKENDS",
    "NOT_GENERATED",
    "PASSES",
    "QUICK_EXAMPLES",
    "QUICK_LIFECYCLE_EXAMPLES",
    "ROLES",
    "VARIANTS",
    "BatchCheck",
    "Call",
    "CampaignResult",
    "Const",
    "Disagreement",
    "Feed",
    "FuzzProfile",
    "GradientOracle",
    "Input",
    "IsolatedChecker",
    "Lifecycle",
    "Mismatch",
    "Op",
    "Oracle",
    "Recipe",
    "ReproductionText",
    "array_literal",
    "backend_dtype",
    "batches",
    "check_batch",
    "check_recipe",
    "checked_call",
    "combine",
    "compact_literal",
    "default_profile",
    "evaluate_reference",
    "make_backend",
    "passes_disabled",
    "prune",
    "recipes",
    "reduce_disagreement",
    "refilled",
    "renumber",
    "reproduction_source",
    "run_campaign",
    "tolerance_for",
    "valid_recipe",
    "variant_strategy",
    "write_reproduction",
]
