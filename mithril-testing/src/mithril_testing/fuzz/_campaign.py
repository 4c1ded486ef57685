"""Long fuzz campaigns: many models on one backend, every new disagreement shrunk and written to a file.

A campaign runs Hypothesis in rounds. Each round generates models (at most :data:`ROUND_EXAMPLES`) until
one disagrees with the oracle in a way not seen before; Hypothesis then shrinks that model to a minimal one,
which is written as a standalone pytest file (:func:`~mithril_testing.fuzz.write_reproduction`) and
remembered as *known*: later models that fail with the same signature (backend, category, exception type,
variant) and, for errors, the same message (names and numbers aside) or, for wrong numbers, all the
primitives of a known minimal model, are counted but not shrunk again. The next round continues with a new
seed until ``examples`` models have been tried.

Example:
    >>> result = run_campaign("numpy", examples=3, out_dir=None, seed=0, progress=None)
    >>> result.models
    3
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st
from mithril.extend import available_backends, plugin_registry

from ._check import BatchCheck, Disagreement, check_recipe, make_backend
from ._generate import GENERATED_PRIMITIVES, FuzzProfile, recipes
from ._isolation import IsolatedChecker
from ._passes import VARIANTS
from ._recipe import Recipe
from ._reduce import reduce_disagreement
from ._repro import write_reproduction

__all__ = [
    "BATCH",
    "ISOLATED_BACKENDS",
    "JIT_CHOICES",
    "NATIVE_BACKENDS",
    "QUICK_EXAMPLES",
    "QUICK_LIFECYCLE_EXAMPLES",
    "CampaignResult",
    "batches",
    "default_profile",
    "run_campaign",
    "variant_strategy",
]

QUICK_EXAMPLES: dict[str, int] = {"numpy": 200, "torch": 200, "mlx": 200, "jax": 200, "c": 200, "ggml": 200}
"""Models per backend in the quick profile (``pytest -m fuzz``). JAX, C and GGML check them in batches
(:data:`BATCH`): one XLA computation or shared library per batch."""

QUICK_LIFECYCLE_EXAMPLES: dict[str, int] = {"numpy": 48, "torch": 32, "mlx": 32, "jax": 16, "c": 24, "ggml": 24}
"""Models per backend of the quick profile's lifecycle share: checked like the others, then through the
lifecycle steps (:data:`~mithril_testing.fuzz.LIFECYCLE_STEPS`), 1.3 to 3.5 times the time of a model
(about 60 s of test time in all)."""

BATCH: dict[str, int] = {"numpy": 1, "torch": 1, "mlx": 1, "jax": 8, "c": 8, "ggml": 8}
"""Random models compiled together as one logical model (side by side, nothing shared) per backend: a
backend that builds a program per compiled model (XLA, a C or GGML shared library) pays for it once per
batch. A disagreeing batch is checked part by part (:func:`~mithril_testing.fuzz.check_batch`). The
eager backends gain nothing from it (a batch only makes a pass-disabled variant less often identical)."""

JIT_CHOICES: dict[str, tuple[bool | None, ...]] = {"jax": (*(None,) * 7, False), "mlx": (False, False, False, None)}
"""``ml.compile(jit=...)`` per backend: JAX compiles seven batches in eight with its default (jit: one
XLA computation per batch) and runs the eighth eagerly (every primitive call compiled by XLA on its own:
twice the time of a jitted batch);
MLX compiles one model in four with jit and runs the rest eagerly (cheaper there)."""

NATIVE_BACKENDS = frozenset({"c", "ggml"})
"""Backends whose models run native code that Mithril generates or builds (a C shared library, a GGML
graph) in-process."""

ISOLATED_BACKENDS = NATIVE_BACKENDS | {"jax"}
"""Backends a campaign checks in a child process by default: the native ones, and JAX, whose XLA compiler
aborts the process when one of its internal checks fails (a finding, not the end of the campaign)."""

CHEAP_BACKENDS = frozenset({"numpy"})
"""Backends on which every compilation variant is checked for every model (elsewhere one drawn variant)."""


ROUND_EXAMPLES = 250
"""Most models one Hypothesis run (round) draws: rounds end there, so ``time_limit`` is looked at and a
progress line printed at least that often."""


def default_profile(backend: str, **overrides: Any) -> FuzzProfile:
    """The generator profile used for ``backend``: the primitives it can run neither itself nor as their
    decomposition are excluded."""
    instance = make_backend(backend)
    primitives = plugin_registry().primitives
    unsupported = frozenset(  # a primitive with a decomposition runs everywhere (as that composition)
        p for p in GENERATED_PRIMITIVES if not instance.has_implementation(p) and primitives[p].decomposition is None
    )
    exclude = unsupported | frozenset(overrides.pop("exclude", frozenset()))
    overrides.setdefault("jit_choices", JIT_CHOICES.get(backend, (None,)))
    return FuzzProfile(exclude=exclude, **overrides)


def batches(profile: FuzzProfile, size: int = 1) -> st.SearchStrategy[list[Recipe]]:
    """Strategy of ``size`` random models, checked together as one compiled model
    (:func:`~mithril_testing.fuzz.check_batch`)."""
    return st.lists(recipes(profile), min_size=size, max_size=size)


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
        _CLASSES[signature] = type(
            "Disagreement_" + "".join(c if c.isalnum() else "_" for c in signature), (_Found,), {}
        )
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
    batch: int | None = None,
    lifecycle: Sequence[str] = (),
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
            (:func:`~mithril_testing.fuzz.reduce_disagreement`).
        isolate: check in a child process (:class:`~mithril_testing.fuzz.IsolatedChecker`), so crashes
            and hangs are findings; default: on for :data:`ISOLATED_BACKENDS` (C, GGML, JAX).
        batch: random models compiled together as one (default :data:`BATCH`); each counts as a model
            (the last batch is smaller when ``examples`` is not a multiple of it).
        lifecycle: lifecycle steps checked for every model after the ordinary check (the lifecycle
            profile: :data:`~mithril_testing.fuzz.LIFECYCLE_STEPS`); a disagreement in a step is reduced
            by running that step alone.
        cross_check: check each new minimal model on the other installed backends too; the one
            reproduction file covers every backend where it disagrees in the same way.
    """
    base_seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
    profile = profile or default_profile(backend)
    batch = BATCH.get(backend, 1) if batch is None else batch
    with _private_c_cache(backend), _checking(backend, isolate, lifecycle) as check:
        campaign = _Campaign(backend, examples, out_dir, check, progress, reduce, cross_check)
        for round_number in itertools.count():
            if campaign.result.models >= examples or campaign.out_of_time(time_limit):
                break
            # a smaller last batch: never more models than asked for
            size = min(batch, examples - campaign.result.models)
            strategies = (batches(profile, size), variant_strategy(backend, all_variants))
            if not campaign.run_round(strategies, size, base_seed + round_number):
                break
    campaign.result.seconds = time.perf_counter() - campaign.started
    return campaign.result


@contextlib.contextmanager
def _private_c_cache(backend: str) -> Iterator[None]:
    """A temporary ``MITHRIL_C_CACHE`` while the C or GGML backend is fuzzed (unless the caller set one)."""
    if backend not in NATIVE_BACKENDS or os.environ.get("MITHRIL_C_CACHE"):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="mithril-fuzz-c-") as cache:
        os.environ["MITHRIL_C_CACHE"] = cache
        try:
            yield
        finally:
            os.environ.pop("MITHRIL_C_CACHE", None)


@contextlib.contextmanager
def _checking(
    backend: str, isolate: bool | None, lifecycle: Sequence[str]
) -> Iterator[Callable[..., Disagreement | None]]:
    """The check a campaign runs per model: in a child process when ``isolate`` (default: on for
    :data:`ISOLATED_BACKENDS`), with the ``lifecycle`` steps when any are given."""
    if isolate is None:
        isolate = backend in ISOLATED_BACKENDS
    checker = IsolatedChecker() if isolate else None
    check: Callable[..., Disagreement | None] = checker.check if checker is not None else check_recipe
    if lifecycle:
        check = functools.partial(check, lifecycle=tuple(lifecycle))
    try:
        yield check
    finally:
        if checker is not None:
            checker.close()


@dataclass
class _Round:
    """One Hypothesis run of a campaign: the models it counted and the new disagreement it stopped at."""

    batch: BatchCheck
    known: list[tuple[str, frozenset[str]]]
    result: CampaignResult
    shrinking: bool = False
    failing: Disagreement | None = None
    counted: int = 0

    def is_known(self, found: Disagreement) -> bool:
        """Whether ``found`` has the signature of a disagreement already written (and, for wrong numbers,
        every primitive of its minimal model)."""
        prims = frozenset(found.recipe.primitives())
        return any(key == found.dedupe_key and (found.error or minimal <= prims) for key, minimal in self.known)

    def check(self, parts: list[Recipe], variants: tuple[str, ...]) -> None:
        """The body of the Hypothesis test: check ``parts``, raise for a disagreement not known yet."""
        if not self.shrinking:
            self.counted += len(parts)
        found = self.batch(parts, variants)
        if found is None:
            return
        if not self.shrinking:
            self.result.disagreements += 1
        if self.is_known(found):
            return
        if not self.shrinking:
            self.batch.focus(found, parts)
        self.shrinking = True
        self.failing = found
        raise _found_class(found.signature)(found.report())


@dataclass
class _Campaign:
    """A running campaign: its settings, the check it runs and what it has found so far."""

    backend: str
    examples: int
    out_dir: str | Path | None
    check: Callable[..., Disagreement | None]
    progress: Callable[[str], Any] | None
    reduce: bool
    cross_check: bool
    result: CampaignResult = field(init=False)
    known: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.result = CampaignResult(self.backend)

    def out_of_time(self, time_limit: float | None) -> bool:
        """Whether ``time_limit`` seconds have passed since the campaign started."""
        return time_limit is not None and time.perf_counter() - self.started > time_limit

    def say(self, line: str) -> None:
        """One progress line (nothing when the campaign is silent)."""
        if self.progress:
            self.progress(line)

    def run_round(self, strategies: tuple[st.SearchStrategy[Any], ...], size: int, round_seed: int) -> bool:
        """Run one Hypothesis round of batches of ``size`` models; ``False`` when it could draw none."""
        state = _Round(BatchCheck(self.backend, self.check), self.known, self.result)
        remaining = self.examples - self.result.models

        def body(parts: list[Recipe], variants: tuple[str, ...]) -> None:
            state.check(parts, variants)

        test = settings(
            max_examples=max(1, min(remaining, ROUND_EXAMPLES) // size),
            database=None,
            deadline=None,
            derandomize=False,
            phases=(Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            verbosity=Verbosity.quiet,
            print_blob=False,
        )(given(*strategies)(body))
        try:
            _seeded(test, round_seed)()
        except _Found:
            pass
        except Exception as exc:  # Flaky and friends: keep the last failing model
            if state.failing is None:
                raise
            self.say(f"  (hypothesis: {type(exc).__name__}; keeping the last failing model)")
        self.result.models += state.counted
        if state.failing is not None:
            self.record(state.failing)
        elif state.counted == 0:
            return False
        else:
            elapsed = time.perf_counter() - self.started
            self.say(
                f"[{self.result.models}/{self.examples}] {self.result.disagreements} disagreements, {elapsed:.0f} s"
            )
        return True

    def record(self, found: Disagreement) -> None:
        """Reduce a new disagreement, remember it as known, write its reproduction and report it."""
        if self.reduce:
            found = reduce_disagreement(found, check=self.check)
        self.known.append((found.dedupe_key, frozenset(found.recipe.primitives())))
        self.result.distinct.append(found)
        also = _also_failing(found) if self.cross_check and self.out_dir is not None else []
        path = write_reproduction(found, self.out_dir, also=also) if self.out_dir is not None else None
        if path is not None:
            self.result.files.append(path)
        where = f" -> {path}" if path else ""
        ops = f"{len(found.recipe.ops)} ops {found.recipe.primitives()}"
        self.say(f"[{self.result.models}/{self.examples}] {found.signature}: {ops}{where}")


def _also_failing(found: Disagreement) -> list[str]:
    """The other installed backends on which ``found``'s model disagrees with the same category (those in
    :data:`ISOLATED_BACKENDS` checked in a child process)."""
    also = []
    with IsolatedChecker() as isolated:
        for backend in sorted(b for b in available_backends() if b not in ("*", found.backend)):
            try:
                check = isolated.check if backend in ISOLATED_BACKENDS else check_recipe
                other = found.check_again(check, found.recipe, backend)
            except Exception:
                continue
            if other is not None and other.category == found.category and other.variant == found.variant:
                also.append(backend)
    return also


def _seeded(test: Any, value: int) -> Any:
    return seed(value)(test)
