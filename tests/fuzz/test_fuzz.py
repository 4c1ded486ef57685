"""Differential fuzzing, quick profile: random models on every installed backend against the NumPy
references (``mithril_testing.fuzz``). Run with ``pytest -m fuzz``; it is part of the default run too.

Per backend seeded Hypothesis runs draw ``QUICK_EXAMPLES[backend]`` models (times
``$MITHRIL_FUZZ_SCALE``, default 1; split into ``SHARDS[backend]`` tests with their own seeds, so that
``pytest -n`` spreads the slow backends over its workers) of up to ``QUICK_MAX_OPS`` calls (campaigns: 40),
compile each with all passes and with passes disabled, and compares
outputs and gradients with the oracle; ``QUICK_LIFECYCLE_EXAMPLES[backend]`` more models are also checked
through the lifecycle steps (compiled again, arrays refilled in place, interleaved, threads). A failure shrinks
to a minimal model; the message holds its Mithril source and the path of a standalone reproduction file.
Disagreements explained by a known, reported bug (``known_bugs.py``, each pinned by an xfail test in
``regressions/``) are not failures.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from known_bugs import KNOWN_BUGS, known_bug
from mithril.plugins.lookup import available_backends
from mithril_testing.fuzz import (
    BATCH,
    GENERATED_PRIMITIVES,
    LIFECYCLE_STEPS,
    NATIVE_BACKENDS,
    NOT_GENERATED,
    QUICK_EXAMPLES,
    QUICK_LIFECYCLE_EXAMPLES,
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


@pytest.mark.parametrize("backend", QUICK)
def test_backend_agrees_with_references_through_the_lifecycle(backend: str, tmp_path: Path) -> None:
    """The lifecycle share: each model also compiled again, its arrays refilled in place, interleaved with
    a second build and called from threads (seeds of their own: other models than the ordinary share). Collected
    first: its slow cases start early under ``pytest -n``."""
    _quick_profile(backend, 1000, QUICK_LIFECYCLE_EXAMPLES.get(backend, 8) * SCALE, LIFECYCLE_STEPS, tmp_path)


@pytest.mark.parametrize(("backend", "shard"), [(b, s) for b in QUICK for s in range(SHARDS.get(b, 1))])
def test_backend_agrees_with_references(backend: str, shard: int, tmp_path: Path) -> None:
    shards = SHARDS.get(backend, 1)
    _quick_profile(backend, shard, QUICK_EXAMPLES.get(backend, 40) * SCALE / shards, (), tmp_path)


def _quick_profile(backend: str, shard: int, models: float, lifecycle: tuple[str, ...], tmp_path: Path) -> None:
    """``models`` random models (in batches of ``BATCH[backend]``) drawn with seed ``shard``, checked with
    the ``lifecycle`` steps too; a failure is shrunk and written as a reproduction file."""
    batch = BATCH.get(backend, 1)
    examples = max(1, round(models / batch))  # batches of `batch` models
    profile = default_profile(backend, max_ops=QUICK_MAX_OPS)
    checker = (
        IsolatedChecker() if backend in NATIVE_BACKENDS else None
    )  # JAX in-process: xdist outlives a crashed worker
    check = checker.check if checker is not None else check_recipe
    if lifecycle:
        check = partial(check, lifecycle=lifecycle)
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
        raise AssertionError(
            f"{found.report()}\n\nmodel:\n{found.recipe.model_source()}\ncompile options: "
            f"{found.recipe.compile_kwargs_source()}"
        )

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

    @settings(
        max_examples=150,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate,),
    )
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


@pytest.mark.parametrize(
    ("disabled", "more_calls"), [((), False), (("cse",), True), (("fold",), True), (("prune",), True)]
)
def test_passes_disabled_changes_the_compiled_graph(disabled: tuple[str, ...], more_calls: bool) -> None:
    import mithril as ml

    recipe = _twins()
    baseline = ml.compile(
        recipe.build_model(), ml.NumpyBackend(dtype=ml.float64), inference=True, **recipe.compile_kwargs()
    )
    with passes_disabled(*disabled):
        pm = ml.compile(
            recipe.build_model(), ml.NumpyBackend(dtype=ml.float64), inference=True, **recipe.compile_kwargs()
        )
    assert (pm.primitive_count > baseline.primitive_count) is more_calls
    assert check_recipe(recipe, "numpy", ("default", "no-fold", "no-cse", "no-prune", "no-passes")) is None
    with pytest.raises(ValueError, match="unknown pass"):
        with passes_disabled("vectorise"):
            pass


def test_checker_reports_a_wrong_answer() -> None:
    """The oracle is sensitive: the same model with a perturbed expected value is a disagreement."""
    from mithril_testing.fuzz import Oracle

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
    from mithril_testing.fuzz import Oracle

    r = Recipe()
    (a,) = r.add_op("neg", {"input": r.add_input(np.array(0.1257302165031433), role="param")})
    (b,) = r.add_op("square", {"input": r.add_input(np.array([775.6, 7806.9, 5461.6, 2998.7]), role="param")})
    r.exposed += [a, b]
    oracle = Oracle.of(r)
    assert oracle.gradients["x0"].full is not None
    assert abs(float(oracle.gradients["x0"].full) + oracle.cotangents[a]) < 1e-9


def test_combined_models_are_checked_together_and_blamed_alone() -> None:
    from mithril_testing.fuzz import combine

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

    return [
        v.reproduction
        for k, v in runpy.run_path(str(path)).items()
        if k.startswith("test_") and hasattr(v, "reproduction")
    ]


def test_reproduction_file_runs_and_detects(tmp_path: Path) -> None:
    from mithril_testing.fuzz import Oracle

    recipe = _twins()
    found = Disagreement(
        recipe, "numpy", __import__("mithril").float64, "no-cse", "forward", variants=("default", "no-cse")
    )
    path = write_reproduction(found, tmp_path, also=["numpy", "torch"])
    assert path.name.startswith("test_numpy_torch_forward_")
    text = path.read_text()
    assert "def build_model" in text and 'variant="no-cse"' in text and 'backend=["numpy", "torch"]' in text
    assert "np.array" not in text and "shapes=" not in text, text  # compact lists; shapes implied by the values
    (reproduction,) = _reproductions(path)
    output = recipe.outputs[0]
    np.testing.assert_array_equal(reproduction.first.expected[output], Oracle.of(recipe).outputs[output])
    assert reproduction.backends == ("numpy", "torch") and reproduction.variant == "no-cse"
    reproduction.run("numpy")  # the model is right, so the reproduction passes
    reproduction.first.expected[output] = reproduction.first.expected[output] + 1e-6
    with pytest.raises(AssertionError, match=f"output {output}"):
        reproduction.run("numpy")


def test_reproductions_are_written_within_the_line_length(tmp_path: Path) -> None:
    import ast

    from mithril_testing.fuzz import Recipe
    from mithril_testing.fuzz._wrap import WIDTH, wrap_source

    recipe = Recipe()
    values = np.random.default_rng(0).normal(size=(6, 9))
    (y,) = recipe.add_op("exp", {"input": recipe.add_input(values, role="param")})
    recipe.exposed.append(y)
    found = Disagreement(recipe, "numpy", __import__("mithril").float64, "default", "forward")
    path = write_reproduction(found, tmp_path)
    text = path.read_text()
    assert max(map(len, text.splitlines())) <= WIDTH, text
    (reproduction,) = _reproductions(path)
    reproduction.run("numpy")  # the values survived the wrapping
    code = 'f([1.25, "a, b", (2, 3)], key={"k": [4, 5, 6]})  # a comment, with commas, ' + "x" * 40
    wrapped = wrap_source(code, width=30)
    assert ast.dump(ast.parse(wrapped)) == ast.dump(ast.parse(code)) and wrapped != code


def test_reproduction_values_round_trip() -> None:
    from mithril_testing.fuzz import compact_literal

    for value in (
        np.array(0.1 + 0.2),
        np.array([[1, -2]]),
        np.array([True, False]),
        np.array([1e-300, -np.inf, 2.0]),
        np.zeros((0,), np.int64),
        np.zeros((2, 0)),
    ):
        back = np.asarray(eval(compact_literal(value), {"np": np}))  # our own text
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
        [
            sys.executable,
            "-m",
            "mithril_testing.fuzz",
            "--backend",
            "numpy",
            "--examples",
            "5",
            "--seed",
            "3",
            "--out",
            str(tmp_path),
            "--quiet",
            "--exclude",
            "split",
        ],
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

    from mithril_testing.fuzz._isolation import STALL_FACTOR

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
        "from mithril_testing.fuzz import IsolatedChecker, Recipe\n"
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


# -- the lifecycle profile -------------------------------------------------------------------------------
class _RememberingExp:
    """A wrong fast path: ``exp`` of an array object it has seen returns the result it gave then (keeping the
    array alive, so its id stays its own) - what a cache keyed by the input object does."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, input: np.ndarray) -> np.ndarray:
        kept = self.seen.get(id(input))
        if kept is None or kept[0] is not input:
            kept = self.seen[id(input)] = (input, np.exp(input))
        return kept[1]


class _SinIntoOneBuffer:
    """A wrong buffer reuse: ``sin`` writes every result into one array per shape and returns it."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[int, ...], np.ndarray] = {}

    def __call__(self, input: np.ndarray) -> np.ndarray:
        return np.sin(input, out=self.buffers.setdefault(input.shape, np.empty(input.shape)))


@pytest.fixture
def planted() -> object:
    """A NumPy backend registered in-process as ``planted``, with the two bugs above (real NumPy otherwise)."""
    from mithril.plugins import hookimpl, manager
    from mithril_backend_numpy import NumpyBackend
    from mithril_backend_numpy.ops import TABLE

    class PlantedBackend(NumpyBackend):
        backend_type = "planted"

    class PlantedBugs:
        @hookimpl
        def mithril_register_backends(self, register):
            register("planted", PlantedBackend)

        @hookimpl
        def mithril_register_impls(self, register):
            register("planted", {**TABLE, "exp": _RememberingExp(), "sin": _SinIntoOneBuffer()})

    manager().register_plugin(PlantedBugs(), "planted-bugs")
    yield "planted"
    manager().unregister_plugin("planted-bugs")


def _exp_model() -> Recipe:
    r = Recipe()
    x = r.add_input(np.array([0.5, -1.0, 1.5]), role="param")
    d = r.add_input(np.array([1.25, 0.75, -0.5]), role="data")
    (a,) = r.add_op("exp", {"input": x})
    (b,) = r.add_op("multiply", {"left": a, "right": d})
    (c,) = r.add_op("square", {"input": d})
    r.exposed += [b, c]
    return r


def test_lifecycle_steps_make_their_calls_and_agree_on_a_correct_backend() -> None:
    """Each step alone first makes the calls it builds on (step ``recompile``); ``refill`` writes new values
    into the same arrays; ``interleave`` alternates A and B and reads every result again; 4 threads make the
    first calls of a new compilation, 2 each."""
    import mithril as ml
    from mithril_testing.fuzz import Feed, Lifecycle, Oracle, refilled

    recipe = _exp_model()
    second = refilled(recipe)
    assert valid_recipe(second) and second.cotangent_seed != recipe.cotangent_seed
    assert not np.array_equal(second.inputs["x0"].array, recipe.inputs["x0"].array)
    assert not np.array_equal(second.inputs["x1"].array, recipe.inputs["x1"].array)
    oracles = [Oracle.of(recipe), Oracle.of(second)]
    feeds = [Feed(*o.recipe.feeds(), o.cotangents) for o in oracles]
    backend = ml.NumpyBackend(dtype=ml.float64)
    expected = {
        "recompile": [("recompile", 0)] * 3,
        "refill": [("recompile", 0), ("refill", 1), ("refill", 0)],
        "interleave": [("recompile", 0)] * 2 + [("interleave", f) for f in (1, 0, 0, 1) * 2],
        "threads": [("threads", f) for f in (0, 0, 1, 1, 0, 0, 1, 1) * 2],  # the first calls of a new compilation
    }
    for step in LIFECYCLE_STEPS:
        session = Lifecycle(
            recipe.build_model, lambda m: ml.compile(m, backend, **recipe.compile_kwargs()), backend, feeds
        )
        calls = session.run(step)
        assert [(c.step, c.feed) for c in calls] == expected[step], step
        for call in calls:
            assert call.error is None, call.label
            for key, value in oracles[call.feed].outputs.items():
                np.testing.assert_allclose(call.outputs[key], value, rtol=1e-12, err_msg=call.label)
    assert check_recipe(recipe, "numpy", lifecycle=LIFECYCLE_STEPS) is None


def test_lifecycle_finds_a_result_kept_for_an_array_refilled_in_place(planted: str, tmp_path: Path) -> None:
    recipe = _exp_model()
    assert check_recipe(recipe, planted) is None  # one call per array: the ordinary check cannot see it
    found = check_recipe(recipe, planted, lifecycle=LIFECYCLE_STEPS)
    assert found is not None and (found.category, found.step) == ("refill:forward", "refill"), found
    assert "its arrays refilled in place with new values: output" in found.report()
    reduced = reduce_disagreement(found)
    assert reduced.step == "refill" and [op.primitive for op in reduced.recipe.ops] == ["exp"]
    path = write_reproduction(reduced, tmp_path)
    text = path.read_text()
    assert (
        path.name.startswith("test_planted_refill_forward_")
        and 'lifecycle="refill"' in text
        and "second=dict(\n" in text
    )
    (reproduction,) = _reproductions(path)
    reproduction.run("numpy")  # the model is right
    with pytest.raises(AssertionError, match="refilled in place with new values: output"):
        reproduction.run(planted)
    reproduction.lifecycle = ""
    reproduction.run(planted)  # the file's plain evaluate alone would not reproduce it


def test_lifecycle_finds_a_result_overwritten_by_a_later_call(planted: str) -> None:
    r = Recipe()
    r.exposed += r.add_op("sin", {"input": r.add_input(np.array([0.5, -1.0, 1.5]), role="param")})
    assert check_recipe(r, planted, lifecycle=("recompile", "refill")) is None  # results copied right after each call
    found = check_recipe(r, planted, lifecycle=LIFECYCLE_STEPS)
    assert found is not None and found.category == "interleave:forward", found
    assert "read again after the later calls" in found.report()


def test_reducer_reruns_the_lifecycle_step_that_failed() -> None:
    recipe = _twins()
    asked: list[tuple[str, ...]] = []

    def fails_when_refilled(
        r: Recipe, backend: str, variants: tuple[str, ...], *, lifecycle: tuple[str, ...] = ()
    ) -> Disagreement | None:
        asked.append(tuple(lifecycle))
        if "refill" in lifecycle and any(op.primitive == "square" for op in r.ops):
            return Disagreement(r, backend, __import__("mithril").float64, "default", "refill:forward", step="refill")
        return None

    start = fails_when_refilled(recipe, "numpy", ("default",), lifecycle=LIFECYCLE_STEPS)
    assert start is not None
    reduced = reduce_disagreement(start, check=fails_when_refilled)
    assert [op.primitive for op in reduced.recipe.ops] == ["square"] and reduced.category == "refill:forward"
    assert set(asked[1:]) == {("refill",)}, asked


def test_isolated_checker_runs_lifecycle_steps_and_names_the_one_that_crashed() -> None:
    recipe = _twins()
    with IsolatedChecker() as checker:
        assert checker.check(recipe, "numpy", lifecycle=LIFECYCLE_STEPS) is None
        crashed = checker._failure(
            recipe, "numpy", ("default", "no-cse"), ("no-cse", "threads"), "crash", "SIGSEGV", "died"
        )
    assert (crashed.category, crashed.step, crashed.variant) == ("threads:crash", "threads", "default")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--backend", "bogus"], "argument --backend: no backend named 'bogus'; available backends: "),
        (["--backend", "numpy", "--examples", "-1"], "argument --examples: expected an integer > 0, got '-1'"),
        (["--backend", "numpy", "--time-limit", "-5"], "argument --time-limit: expected a number > 0, got '-5'"),
        (["--backend", "numpy", "--max-ops", "0"], "argument --max-ops: expected an integer > 0, got '0'"),
        (["--backend", "numpy", "--exclude", "splitt"], "argument --exclude: 'splitt' is not a generated primitive"),
        (["--backend", "numpy", "--profile", "long"], "argument --profile: invalid choice: 'long'"),
    ],
)
def test_cli_refuses_wrong_arguments_in_one_line(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mithril.plugins.lookup import available_backends
    from mithril_testing.fuzz.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(arguments)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"python -m mithril_testing.fuzz: error: {message}"), err
    if "--backend" in message:
        assert ", ".join(b for b in available_backends()) in err


def test_cli_lifecycle_profile(capsys: pytest.CaptureFixture[str]) -> None:
    from mithril_testing.fuzz.__main__ import main

    assert (
        main(["--backend", "numpy", "--examples", "3", "--seed", "0", "--out", "", "--quiet", "--profile", "lifecycle"])
        == 0
    )
    assert capsys.readouterr().out == "numpy: 3 models, 0 disagreements\n"


def test_campaign_progress_never_passes_its_total() -> None:
    """10 models in batches of 8 are a batch of 8 and one of 2 (it was two of 8: ``[16/10]``)."""
    import re

    from mithril_testing.fuzz import run_campaign

    lines: list[str] = []
    result = run_campaign("numpy", 10, None, seed=0, batch=8, progress=lines.append)
    counts = [tuple(map(int, m.groups())) for line in lines if (m := re.match(r"\[(\d+)/(\d+)\]", line))]
    assert result.models == 10 and counts[-1] == (10, 10) and all(done <= total for done, total in counts), lines


def test_missing_test_packages_name_the_testing_extra() -> None:
    import subprocess
    import sys

    script = "import sys\nsys.modules['pytest'] = None\nimport mithril_testing.fuzz\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert (
        "ImportError: mithril_testing.fuzz needs pytest, which the mithril-testing package declares: pip install "
        "mithril-testing" in done.stderr
    ), done.stderr


def test_threads_step_keeps_its_threads_for_the_process() -> None:
    """MLX starts a stream thread for every new thread that evaluates and never ends it: the threads step
    runs on 4 threads kept for the process, so a campaign does not pile up OS threads (with new threads
    per model, an MLX campaign had 1,700 after a few minutes)."""
    pytest.importorskip("mithril_backend_mlx", reason="the MLX backend is not installed")
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        pytest.skip("counts OS threads with /proc (Linux)")
    recipe = _twins()
    assert check_recipe(recipe, "mlx", lifecycle=("threads",)) is None
    before = len(list(tasks.iterdir()))
    for _ in range(3):
        assert check_recipe(recipe, "mlx", lifecycle=("threads",)) is None
    assert len(list(tasks.iterdir())) == before


def test_mlx_models_first_called_from_threads_get_their_own_trace() -> None:
    """``regressions/test_mlx_threads_first_calls.py`` 30 times: each run compiles the model anew and makes
    its first calls from the 4 threads that ran the previous, freed, compilations (before the fix about 1
    run in 10 got a freed model's MLX trace: outputs under the wrong keys or none)."""
    pytest.importorskip("mithril_backend_mlx", reason="the MLX backend is not installed")
    (reproduction,) = _reproductions(REGRESSIONS / "test_mlx_threads_first_calls.py")
    for _ in range(30):
        reproduction.run("mlx")
