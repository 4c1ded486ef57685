"""Differential fuzzing, quick profile: random models on every installed backend against the NumPy
references (``mithril.testing.fuzz``). Run with ``pytest -m fuzz``; it is part of the default run too.

Per backend seeded Hypothesis runs draw ``QUICK_EXAMPLES[backend]`` models (times
``$MITHRIL_FUZZ_SCALE``, default 1; split into ``SHARDS[backend]`` tests with their own seeds, so that
``pytest -n`` spreads the slow backends over its workers) of up to ``QUICK_MAX_OPS`` calls (campaigns: 40),
compile each with all passes and with passes disabled, and compares
outputs and gradients with the oracle. A failure shrinks to a minimal model; the message holds its
Mithril source and the path of a standalone reproduction file. Disagreements explained by a known,
reported bug (``known_bugs.py``, each pinned by an xfail test in ``regressions/``) are not failures.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from known_bugs import KNOWN_BUGS, known_bug
from mithril.plugins.lookup import available_backends
from mithril.testing.fuzz import (
    BATCH,
    GENERATED_PRIMITIVES,
    NATIVE_BACKENDS,
    NOT_GENERATED,
    QUICK_EXAMPLES,
    BatchCheck,
    Const,
    Disagreement,
    FuzzProfile,
    IsolatedChecker,
    Recipe,
    batches,
    check_batch,
    check_recipe,
    default_profile,
    passes_disabled,
    recipes,
    reduce_disagreement,
    valid_recipe,
    variant_strategy,
    write_reproduction,
)

pytestmark = pytest.mark.fuzz

BACKENDS = sorted(b for b in available_backends() if b != "*")
SCALE = float(os.environ.get("MITHRIL_FUZZ_SCALE", "1"))
REGRESSIONS = Path(__file__).parent / "regressions"
SHARDS = {"jax": 4, "ggml": 4, "c": 2}
"""Tests the quick profile of a slow backend is split into (each a quarter or half of its models)."""
QUICK_MAX_OPS = 20
"""Most primitive calls per quick-profile model: compile time (XLA, the C compiler) grows with the calls,
and the quick profile must stay under 5 minutes; the long campaigns draw up to 40."""


COST_ORDER = ("jax", "ggml", "c", "mlx", "numpy", "torch")
"""Slowest first: ``pytest -n`` hands tests out in order, so the long ones do not end the run alone."""
QUICK = sorted(BACKENDS, key=lambda b: COST_ORDER.index(b) if b in COST_ORDER else -1)


@pytest.mark.parametrize(("backend", "shard"), [(b, s) for b in QUICK for s in range(SHARDS.get(b, 1))])
def test_backend_agrees_with_references(backend: str, shard: int, tmp_path: Path) -> None:
    batch, shards = BATCH.get(backend, 1), SHARDS.get(backend, 1)
    examples = max(1, round(QUICK_EXAMPLES.get(backend, 40) * SCALE / batch / shards))  # batches of `batch` models
    profile = default_profile(backend, max_ops=QUICK_MAX_OPS)
    checker = IsolatedChecker() if backend in NATIVE_BACKENDS else None  # JAX in-process: xdist outlives a crashed worker
    check = checker.check if checker is not None else check_recipe
    seen = {"models": 0, "known": 0}
    failing: list[Disagreement] = []
    batch_check = BatchCheck(backend, check)  # once a batch fails, shrinking checks only its failing part

    @seed(shard)
    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(batches(profile, batch), variant_strategy(backend))
    def run(parts: list[Recipe], variants: tuple[str, ...]) -> None:
        seen["models"] += len(parts)
        found = batch_check(parts, variants)
        if found is None:
            return
        bug = known_bug(found)
        if bug is not None:
            seen["known"] += 1
            return
        if not failing:
            batch_check.focus(found, parts)
        failing.append(found)
        raise AssertionError(f"{found.report()}\n\nmodel:\n{found.recipe.model_source()}\ncompile options: {found.recipe.compile_kwargs_source()}")

    try:
        run()
    except AssertionError as exc:  # the shrunk model (Hypothesis replays it last) as a standalone file
        if not failing:
            raise
        raise AssertionError(f"{exc}\nreproduction: {write_reproduction(failing[-1], tmp_path)}") from exc
    finally:
        if checker is not None:
            checker.close()
    assert seen["models"] >= examples * batch, f"only {seen['models']} models were checked"


# -- the machinery itself ------------------------------------------------------------------------------
def test_every_registered_primitive_is_generated_or_excluded_with_a_reason() -> None:
    from mithril.plugins import registry

    registered = set(registry().primitives)
    missing = sorted(registered - GENERATED_PRIMITIVES - set(NOT_GENERATED))
    assert not missing, f"primitives the fuzzer never generates: {missing}; add a family or a reason in NOT_GENERATED"
    stale = sorted((GENERATED_PRIMITIVES | set(NOT_GENERATED)) - registered)
    assert not stale, f"the fuzzer names unregistered primitives: {stale}"


@settings(max_examples=60, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(recipes(FuzzProfile(max_ops=12)))
def test_generated_models_are_valid_and_build(recipe: Recipe) -> None:
    assert 1 <= len(recipe.ops) <= 12
    assert valid_recipe(recipe), "a generated call is invalid, non-finite or too close to a kink"
    assert recipe.outputs, "every model has an output"
    assert set(recipe.discard) < set(recipe.exposed)
    model = recipe.build_model()
    assert set(model.output_keys) == set(recipe.exposed)
    kwargs = recipe.compile_kwargs()
    keys = [set(kwargs.get(k, ())) for k in ("data_keys", "trainable_keys", "constant_keys")]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2]), kwargs


def test_generator_reaches_every_family_and_most_primitives() -> None:
    seen: set[str] = set()

    @settings(max_examples=150, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck), phases=(Phase.generate,))
    @given(recipes())
    def collect(recipe: Recipe) -> None:
        seen.update(recipe.primitives())

    collect()
    unseen = sorted(GENERATED_PRIMITIVES - seen)
    assert len(unseen) <= len(GENERATED_PRIMITIVES) // 10, f"rarely generated: {unseen}"


def _twins() -> Recipe:
    r = Recipe()
    x = r.add_input(np.array([0.5, 1.5]), role="param")
    (a,) = r.add_op("exp", {"input": x})
    (b,) = r.add_op("exp", {"input": x})
    (c,) = r.add_op("multiply", {"left": a, "right": b})
    (d,) = r.add_op("neg", {"input": c})  # dead: not exposed
    c2 = r.add_input(np.array(2.0), role="constant_key")
    (e,) = r.add_op("square", {"input": c2})
    (f,) = r.add_op("add", {"left": c, "right": e})
    r.exposed.append(f)
    del d
    return r


@pytest.mark.parametrize(("disabled", "more_calls"), [((), False), (("cse",), True), (("fold",), True), (("prune",), True)])
def test_passes_disabled_changes_the_compiled_graph(disabled: tuple[str, ...], more_calls: bool) -> None:
    import mithril as ml

    recipe = _twins()
    baseline = ml.compile(recipe.build_model(), ml.NumpyBackend(dtype=ml.float64), inference=True, **recipe.compile_kwargs())
    with passes_disabled(*disabled):
        pm = ml.compile(recipe.build_model(), ml.NumpyBackend(dtype=ml.float64), inference=True, **recipe.compile_kwargs())
    assert (pm.primitive_count > baseline.primitive_count) is more_calls
    assert check_recipe(recipe, "numpy", ("default", "no-fold", "no-cse", "no-prune", "no-passes")) is None
    with pytest.raises(ValueError, match="unknown pass"):
        with passes_disabled("vectorise"):
            pass


def test_checker_reports_a_wrong_answer() -> None:
    """The oracle is sensitive: the same model with a perturbed expected value is a disagreement."""
    from mithril.testing.fuzz import Oracle

    recipe = _twins()
    assert check_recipe(recipe, "numpy") is None
    oracle = Oracle.of(recipe)
    name = recipe.outputs[0]
    saved = oracle.outputs[name]
    oracle.outputs[name] = saved * (1 + 1e-6)
    try:
        found = check_recipe(recipe, "numpy")
    finally:
        oracle.outputs[name] = saved
    assert found is not None and found.category == "forward", found
    g = oracle.gradients["x0"]
    assert g.full is not None
    saved_grad = g.full.copy()
    g.full[0] += 1e-3
    try:
        found = check_recipe(recipe, "numpy")
    finally:
        g.full[:] = saved_grad
    assert found is not None and found.category == "gradient", found


def test_finite_differences_ignore_outputs_that_do_not_depend_on_the_input() -> None:
    """A large unrelated output must not add rounding to a small input's finite difference (a campaign
    saw neg's exact gradient -c reported as off by 6e-6 next to outputs of size 1e4)."""
    from mithril.testing.fuzz import Oracle

    r = Recipe()
    (a,) = r.add_op("neg", {"input": r.add_input(np.array(0.1257302165031433), role="param")})
    (b,) = r.add_op("square", {"input": r.add_input(np.array([775.6, 7806.9, 5461.6, 2998.7]), role="param")})
    r.exposed += [a, b]
    oracle = Oracle.of(r)
    assert oracle.gradients["x0"].full is not None
    assert abs(float(oracle.gradients["x0"].full) + oracle.cotangents[a]) < 1e-9


def test_combined_models_are_checked_together_and_blamed_alone() -> None:
    from mithril.testing.fuzz import combine

    good, bad = _twins(), _twins()
    (s,) = bad.add_op("sin", {"input": "x0"})
    bad.exposed.append(s)
    both = combine([good, bad])
    assert len(both.ops) == 2 * len(good.ops) + 1 and len(both.outputs) == 3 and both.params() == ["x0", "x2"]
    assert check_batch([good, bad], "numpy") is None

    def fails_on_square(r: Recipe, backend: str, variants: tuple[str, ...]) -> Disagreement | None:
        if any(op.primitive == "sin" for op in r.ops) or sum(op.primitive == "square" for op in r.ops) >= 3:
            return Disagreement(r, backend, __import__("mithril").float64, "default", "forward")
        return None

    assert check_batch([good, bad], "numpy", check=fails_on_square).recipe is bad  # the part that fails alone
    assert check_batch([good, good, good], "numpy", check=fails_on_square).recipe.ops == combine([good] * 3).ops
    shrinking = BatchCheck("numpy", fails_on_square)
    found = shrinking([good, bad])
    assert found is not None
    shrinking.focus(found, [good, bad])
    assert shrinking.part == 1 and shrinking([bad, good]) is None  # now only the second model is checked


def test_reducer_keeps_the_failure_and_drops_the_rest() -> None:
    recipe = _twins()
    extra = recipe.add_input(np.array([1.0, 2.0, 3.0]), role="data")
    (s,) = recipe.add_op("sin", {"input": extra})
    recipe.exposed.append(s)

    def has_square(r: Recipe, backend: str, variants: tuple[str, ...]) -> Disagreement | None:
        if any(op.primitive == "square" for op in r.ops):
            return Disagreement(r, backend, __import__("mithril").float64, "default", "forward", variants=variants)
        return None

    start = has_square(recipe, "numpy", ("default",))
    assert start is not None
    reduced = reduce_disagreement(start, check=has_square)
    assert [op.primitive for op in reduced.recipe.ops] == ["square"]
    assert list(reduced.recipe.inputs) == ["x0"]


def _reproductions(path: Path) -> list:
    import runpy

    return [v.reproduction for k, v in runpy.run_path(str(path)).items() if k.startswith("test_") and hasattr(v, "reproduction")]


def test_reproduction_file_runs_and_detects(tmp_path: Path) -> None:
    from mithril.testing.fuzz import Oracle

    recipe = _twins()
    found = Disagreement(recipe, "numpy", __import__("mithril").float64, "no-cse", "forward", variants=("default", "no-cse"))
    path = write_reproduction(found, tmp_path, also=["numpy", "torch"])
    assert path.name.startswith("test_numpy_torch_forward_")
    text = path.read_text()
    assert "def build_model" in text and 'variant="no-cse"' in text and 'backend=["numpy", "torch"]' in text
    assert "np.array" not in text and "shapes=" not in text, text  # compact lists; shapes implied by the values
    (reproduction,) = _reproductions(path)
    output = recipe.outputs[0]
    np.testing.assert_array_equal(reproduction.expected[output], Oracle.of(recipe).outputs[output])
    assert reproduction.backends == ("numpy", "torch") and reproduction.variant == "no-cse"
    reproduction.run("numpy")  # the model is right, so the reproduction passes
    reproduction.expected[output] = reproduction.expected[output] + 1e-6
    with pytest.raises(AssertionError, match=f"output {output}"):
        reproduction.run("numpy")


def test_reproduction_values_round_trip() -> None:
    from mithril.testing.fuzz import compact_literal

    for value in (np.array(0.1 + 0.2), np.array([[1, -2]]), np.array([True, False]), np.array([1e-300, -np.inf, 2.0]), np.zeros((0,), np.int64), np.zeros((2, 0))):
        back = np.asarray(eval(compact_literal(value), {"np": np}))  # noqa: S307 - our own text
        assert back.dtype == value.dtype.newbyteorder("=") and back.shape == value.shape, (value, back)
        np.testing.assert_array_equal(back, value)


def test_known_bugs_name_existing_regression_tests() -> None:
    """Each known bug names its regression files; ``test_<backend>_<name>.py`` may also name the
    ``<backend>`` case of a reproduction covering several backends, ``test_<name>.py``."""
    for bug in KNOWN_BUGS:
        for name in bug.regressions:
            path, backends = REGRESSIONS / name, set(bug.backends)
            if not path.exists():
                backend, _, rest = name.removeprefix("test_").partition("_")
                path, backends = REGRESSIONS / f"test_{rest}", {backend}
            assert path.exists(), f"{bug.name}: no regression file {name}"
            covered = {b for r in _reproductions(path) for b in r.backends if r.xfail_reason(b)}
            assert covered & backends, f"{path.name} is not marked xfail (strict) on {sorted(backends)}"


def test_cli_prints_the_summary(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "mithril.testing.fuzz", "--backend", "numpy", "--examples", "5", "--seed", "3", "--out", str(tmp_path), "--quiet", "--exclude", "split"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "numpy: 5 models, " in result.stdout, result.stdout + result.stderr
    assert result.returncode in (0, 1)


def test_inline_constants_and_roles_reach_the_source() -> None:
    r = Recipe()
    x = r.add_input(np.array([1.0, 2.0]), role="iokey_value")
    y = r.add_input(np.array([3.0, 4.0]), role="set_values")
    z = r.add_input(np.array([1, 0]), role="data", shape_via="iokey")
    (a,) = r.add_op("add", {"left": x, "right": Const(0.5)})
    (b,) = r.add_op("multiply", {"left": a, "right": y})
    (c,) = r.add_op("gather", {"input": b, "index": z}, {"axis": 0})
    r.exposed.append(c)
    source = r.model_source()
    assert 'IOKey("x0", value=np.array([1.0, 2.0]' in source
    assert "model.set_values(x1=" in source
    assert 'IOKey("x2", shape=[2], type="int")' in source
    assert "right=0.5" in source
    assert check_recipe(r, "numpy", ("default", "no-fold")) is None


@pytest.mark.parametrize("busy", [True, False])
def test_isolated_checker_tells_a_busy_or_stuck_worker_from_a_starved_one(busy: bool) -> None:
    """A worker spinning counts as hung after ``timeout`` CPU seconds; one that uses no CPU (blocked, or
    starved by other processes) only after ``STALL_FACTOR * timeout`` wall seconds."""
    import multiprocessing
    import subprocess
    import sys
    import time

    from mithril.testing.fuzz._isolation import STALL_FACTOR

    code = "while True: pass" if busy else "import time; time.sleep(60)"
    worker = subprocess.Popen([sys.executable, "-c", code])
    receiver, _sender = multiprocessing.Pipe(duplex=False)  # nothing is ever sent
    checker = IsolatedChecker(timeout=0.5)
    checker._process, checker._conn = worker, receiver
    try:
        start = time.monotonic()
        why = checker._wait()
        waited = time.monotonic() - start
    finally:
        worker.kill()
        worker.wait()
    assert why is not None
    if busy:
        assert "of CPU time" in why and waited < STALL_FACTOR * 0.5, (why, waited)
    else:
        assert "having used 0 s of CPU" in why and waited >= STALL_FACTOR * 0.5, (why, waited)


def test_isolated_checker_says_why_its_worker_cannot_start() -> None:
    """A script read from stdin cannot be re-imported by a *spawn* worker: that is an error naming the fix,
    not a "crash" finding against the model."""
    import subprocess
    import sys

    script = (
        "import numpy as np\n"
        "from mithril.testing.fuzz import IsolatedChecker, Recipe\n"
        "r = Recipe()\n"
        "x = r.add_input(np.array([1.0]), role='param')\n"
        "(y,) = r.add_op('exp', {'input': x})\n"
        "r.exposed.append(y)\n"
        "try:\n"
        "    print('RESULT', IsolatedChecker(timeout=60).check(r, 'numpy'))\n"
        "except RuntimeError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=240)
    assert "ERROR the fuzz worker process exited (code 1) before it was ready" in done.stdout, done.stdout + done.stderr
    assert "if __name__" in done.stdout
