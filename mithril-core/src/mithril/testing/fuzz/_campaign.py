"""Long fuzz campaigns: many models on one backend, every new disagreement shrunk and written to a file.

A campaign runs Hypothesis in rounds. Each round generates models until one disagrees with the oracle in
a way not seen before; Hypothesis then shrinks that model to a minimal one, which is written as a
standalone pytest file (:func:`~mithril.testing.fuzz.write_reproduction`) and remembered as *known*:
later models that fail with the same signature (backend, category, exception type, variant) and, for
errors, the same message (names and numbers aside) or, for wrong numbers, all the primitives of a known
minimal model, are counted but not shrunk again. The next round continues
with a new seed until ``examples`` models have been tried.

Example:
    >>> result = run_campaign("numpy", examples=3, out_dir=None, seed=0, progress=None)
    >>> result.models
    3
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st

from ._check import Disagreement, check_recipe
from ._generate import FuzzProfile, recipes
from ._isolation import IsolatedChecker
from ._passes import VARIANTS
from ._reduce import reduce_disagreement
from ._repro import write_reproduction

__all__ = ["CampaignResult", "run_campaign", "default_profile", "variant_strategy", "QUICK_EXAMPLES", "JIT_CHOICES"]

QUICK_EXAMPLES: dict[str, int] = {"numpy": 300, "torch": 200, "mlx": 200, "jax": 50, "c": 60, "ggml": 60}
"""Models per backend in the quick profile (``pytest -m fuzz``). JAX compiles every primitive call with
XLA (each new shape anew) and C/GGML build a shared library per compiled model, so they get fewer."""

JIT_CHOICES: dict[str, tuple[bool | None, ...]] = {"jax": (False, False, False, None), "mlx": (False, False, False, None)}
"""``ml.compile(jit=...)`` per backend: JAX and MLX compile one model in four with their default (jit);
the others run eagerly, which checks the same implementations at a fraction of the compile time."""

NATIVE_BACKENDS = frozenset({"c", "ggml"})
"""Backends whose models run native code in-process: checked in a child process by default."""

CHEAP_BACKENDS = frozenset({"numpy"})
"""Backends on which every compilation variant is checked for every model (elsewhere one drawn variant)."""


def default_profile(backend: str, **overrides: Any) -> FuzzProfile:
    """The generator profile used for ``backend`` (the primitives it declares unsupported excluded)."""
    from ._check import make_backend
    from ._generate import GENERATED_PRIMITIVES

    instance = make_backend(backend)
    unsupported = frozenset(p for p in GENERATED_PRIMITIVES if not instance.has_implementation(p))
    exclude = unsupported | frozenset(overrides.pop("exclude", frozenset()))
    overrides.setdefault("jit_choices", JIT_CHOICES.get(backend, (None,)))
    return FuzzProfile(exclude=exclude, **overrides)


def variant_strategy(backend: str, all_variants: bool | None = None) -> st.SearchStrategy[tuple[str, ...]]:
    """Which compilation variants to check per model: all of them on cheap backends, else the default
    plus one drawn variant (shrinking toward the default alone)."""
    if all_variants is None:
        all_variants = backend in CHEAP_BACKENDS
    if all_variants:
        return st.just(tuple(VARIANTS))
    others = [v for v in VARIANTS if v != "default"]
    return st.sampled_from([("default",), *[("default", v) for v in others]])


@dataclass
class CampaignResult:
    """What a campaign found. ``models``: models tried; ``disagreements``: models that disagreed (new and
    known); ``distinct``: the shrunk new ones, with the files written for them."""

    backend: str
    models: int = 0
    disagreements: int = 0
    distinct: list[Disagreement] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return f"{self.models} models, {self.disagreements} disagreements"


class _Found(AssertionError):
    """Raised inside the Hypothesis test for a new disagreement (one subclass per signature, so shrinking
    keeps to the same kind of failure)."""


_CLASSES: dict[str, type[_Found]] = {}


def _found_class(signature: str) -> type[_Found]:
    if signature not in _CLASSES:
        _CLASSES[signature] = type("Disagreement_" + "".join(c if c.isalnum() else "_" for c in signature), (_Found,), {})
    return _CLASSES[signature]


def run_campaign(
    backend: str,
    examples: int,
    out_dir: str | Path | None = "fuzz-failures",
    *,
    seed: int | None = None,
    profile: FuzzProfile | None = None,
    all_variants: bool | None = None,
    time_limit: float | None = None,
    progress: Callable[[str], Any] | None = print,
    reduce: bool = True,
    isolate: bool | None = None,
    cross_check: bool = True,
) -> CampaignResult:
    """Fuzz ``backend`` with ``examples`` models; write each new disagreement's minimal reproduction.

    Args:
        out_dir: where reproductions go (``None``: write nothing).
        seed: base seed of the rounds (``None``: random).
        profile: generator limits (default: :func:`default_profile`).
        all_variants: check every compilation variant per model (default: on cheap backends).
        time_limit: stop starting new rounds after this many seconds.
        progress: called with a line per event (``None``: silent).
        reduce: after Hypothesis's shrinking, reduce each new disagreement further at the model level
            (:func:`~mithril.testing.fuzz.reduce_disagreement`).
        isolate: check in a child process (:class:`~mithril.testing.fuzz.IsolatedChecker`), so crashes
            and hangs are findings; default: on for the native backends (C, GGML).
        cross_check: check each new minimal model on the other installed backends too; the one
            reproduction file covers every backend where it disagrees in the same way.
    """
    started = time.perf_counter()
    profile = profile or default_profile(backend)
    result = CampaignResult(backend)
    known: list[tuple[str, frozenset[str]]] = []
    base_seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    state: dict[str, Any] = {}
    c_cache = None
    if backend in ("c", "ggml") and not os.environ.get("MITHRIL_C_CACHE"):
        c_cache = tempfile.TemporaryDirectory(prefix="mithril-fuzz-c-")
        os.environ["MITHRIL_C_CACHE"] = c_cache.name
    if isolate is None:
        isolate = backend in NATIVE_BACKENDS
    checker = IsolatedChecker() if isolate else None
    check = checker.check if checker is not None else check_recipe
    round_number = 0
    try:
        while result.models < examples:
            if time_limit is not None and time.perf_counter() - started > time_limit:
                break
            state.update(shrinking=False, failing=None, counted=0)
            remaining = examples - result.models

            def body(recipe: Any, variants: tuple[str, ...]) -> None:
                if not state["shrinking"]:
                    state["counted"] += 1
                found = check(recipe, backend, variants)
                if found is None:
                    return
                prims = frozenset(recipe.primitives())
                if any(key == found.dedupe_key and (found.error or minimal <= prims) for key, minimal in known):
                    if not state["shrinking"]:
                        result.disagreements += 1
                    return
                if not state["shrinking"]:
                    result.disagreements += 1
                state["shrinking"] = True
                state["failing"] = found
                raise _found_class(found.signature)(found.report())

            test = given(recipes(profile), variant_strategy(backend, all_variants))(body)
            test = settings(
                max_examples=remaining,
                database=None,
                deadline=None,
                derandomize=False,
                phases=(Phase.generate, Phase.shrink),
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
                verbosity=Verbosity.quiet,
                print_blob=False,
            )(test)
            test = _seeded(test, base_seed + round_number)
            round_number += 1
            try:
                test()
            except _Found:
                pass
            except Exception as exc:  # Flaky and friends: keep the last failing model
                if state["failing"] is None:
                    raise
                if progress:
                    progress(f"  (hypothesis: {type(exc).__name__}; keeping the last failing model)")
            result.models += state["counted"]
            found = state["failing"]
            if found is None:
                if state["counted"] == 0:
                    break
                continue
            if reduce:
                found = reduce_disagreement(found, check=check)
            known.append((found.dedupe_key, frozenset(found.recipe.primitives())))
            result.distinct.append(found)
            also = _also_failing(found) if cross_check and out_dir is not None else []
            path = write_reproduction(found, out_dir, also=also) if out_dir is not None else None
            if path is not None:
                result.files.append(path)
            if progress:
                where = f" -> {path}" if path else ""
                progress(f"[{result.models}/{examples}] {found.signature}: {len(found.recipe.ops)} ops {found.recipe.primitives()}{where}")
    finally:
        if checker is not None:
            checker.close()
        if c_cache is not None:
            os.environ.pop("MITHRIL_C_CACHE", None)
            c_cache.cleanup()
    result.seconds = time.perf_counter() - started
    return result


def _also_failing(found: Disagreement) -> list[str]:
    """The other installed backends on which ``found``'s model disagrees with the same category (native
    ones checked in a child process)."""
    from ...plugins.lookup import available_backends

    also = []
    with IsolatedChecker() as isolated:
        for backend in sorted(b for b in available_backends() if b not in ("*", found.backend)):
            try:
                check = isolated.check if backend in NATIVE_BACKENDS else check_recipe
                other = check(found.recipe, backend, found.variants)
            except Exception:  # noqa: BLE001 - a backend that cannot even be loaded says nothing here
                continue
            if other is not None and other.category == found.category and other.variant == found.variant:
                also.append(backend)
    return also


def _seeded(test: Any, value: int) -> Any:
    return seed(value)(test)
