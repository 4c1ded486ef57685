"""The lifecycle profile: a compiled model used the way programs use it, not once in a fresh process.

:class:`Lifecycle` runs the steps of :data:`LIFECYCLE_STEPS` on one logical model and one backend and
records every ``evaluate`` call (:class:`Call`); the fuzz checker compares them with the oracle and a
reproduction file with its numbers. Two sets of values (:class:`Feed`) are used: the recipe's own, and new
ones (:func:`refilled`) for the calls that must see changed inputs.

- ``recompile``: the logical model compiled twice in the process (two ``ml.compile`` calls on the same
  object), and a second build of it compiled once more; the first call of each compiled model (with
  cotangents where the model has gradients) is checked, outputs and gradients.
- ``refill``: the arrays of the first compiled model's first call (parameters, data, cotangents) are
  refilled in place with the new values (``x[...] = new``) and passed again (outputs and gradients must be
  those of the new values), then refilled with the first values and passed without cotangents.
- ``interleave``: the first compiled model (A) and the second build (B) are called A, B, A, B with
  alternating values; every result is checked right after its call and again after the last call (a
  result that a later call changed is a finding).
- ``threads``: the model object is compiled once more (in the calling thread), then :data:`THREADS`
  threads make its first calls at once, each with its own arrays (:data:`CALLS_PER_THREAD` calls each:
  with cotangents, then without): a model compiled in one thread and served from others. The threads are kept for
  the whole process, as a server's pool is: a backend may keep state per calling thread (MLX starts a
  stream thread for every new thread that evaluates, and never ends it), so new threads for every model
  would pile up.

A step run alone first makes the calls it builds on (a step's calls include the first call of each model
it uses); those calls belong to step ``recompile``.

In-place refills: arrays the backend can write into (NumPy, PyTorch, MLX; C and GGML take NumPy arrays)
are refilled with ``x[...] = new``. JAX arrays are immutable and JAX's ``evaluate`` accepts only JAX
arrays, so there the NumPy arrays the JAX arrays are made from are refilled, and converted with
``backend.array`` again before each call (what a JAX program reusing its buffers does).

Example:
    >>> import mithril as ml, numpy as np
    >>> from mithril.models import IOKey, Model, Primitive
    >>> def build():
    ...     model = Model()
    ...     model |= Primitive("exp")(input="x", output=IOKey("y"))
    ...     return model
    >>> backend = ml.NumpyBackend(dtype=ml.float64)
    >>> feeds = [Feed({"x": np.array([0.0])}, {}, {}), Feed({"x": np.array([1.0])}, {}, {})]
    >>> compile_ = lambda m: ml.compile(m, backend, shapes={"x": [1]}, trainable_keys=["x"])
    >>> run = Lifecycle(build, compile_, backend, feeds)
    >>> [(c.step, c.feed, c.outputs["y"].round(3).tolist()) for c in run.run("refill")]
    [('recompile', 0, [1.0]), ('refill', 1, [2.718]), ('refill', 0, [1.0])]
"""

from __future__ import annotations

import copy
import functools
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._generate import valid_recipe
from ._recipe import Recipe, kind_of_array

__all__ = [
    "CALLS_PER_THREAD",
    "LIFECYCLE_STEPS",
    "THREADS",
    "Call",
    "Feed",
    "Lifecycle",
    "backend_array",
    "numpy_results",
    "refilled",
]

LIFECYCLE_STEPS: tuple[str, ...] = ("recompile", "refill", "interleave", "threads")
"""The lifecycle steps, in the order a full lifecycle check runs them (see the module doc)."""

THREADS = 4
"""Threads calling one compiled model at once in step ``threads``."""

CALLS_PER_THREAD = 2
"""Calls each thread makes in step ``threads``: with cotangents (where the model has gradients), then without."""

THREAD_TIMEOUT = 300.0
"""Wall seconds the threads of step ``threads`` may take before the step counts as hung (a deadlock)."""

PROGRAMS = (
    "A (the model compiled)",
    "the same model object compiled again",
    "B (a second build of the model, compiled)",
    "the same model object compiled for the threads",
)
"""What each compiled model of a lifecycle is, by index (the last one's first calls are the threads')."""

_FOR_THREADS = len(PROGRAMS) - 1


@dataclass(frozen=True)
class Feed:
    """One set of values for ``evaluate``: NumPy arrays. ``cotangents`` empty: no call with gradients."""

    params: Mapping[str, np.ndarray]
    data: Mapping[str, np.ndarray]
    cotangents: Mapping[str, np.ndarray]


@dataclass
class Call:
    """One ``evaluate`` call of a lifecycle step (or the ``ml.compile`` before it, ``compiling``).

    Attributes:
        step: the step whose check this call is (a prerequisite call belongs to ``recompile``).
        label: what the call was, for reports (``"B (...), call 2 of 4"``).
        feed: the index of the :class:`Feed` the call was given, whose answer it must be.
        outputs, gradients: NumPy copies taken right after the call (``gradients`` ``None`` without cotangents).
        error: the exception the call (or the compilation) raised.
    """

    step: str
    label: str
    feed: int
    outputs: dict[str, np.ndarray] | None = None
    gradients: dict[str, np.ndarray] | None = None
    error: BaseException | None = None
    compiling: bool = False
    live: tuple[Any, Any] | None = None  # the backend's own result objects, read again after the step

    def read_again(self, backend: Any) -> Call:
        """The same call with its results as the backend's result objects hold them now."""
        assert self.live is not None
        outputs, gradients = self.live
        label = f"{self.label}, read again after the later calls"
        again = numpy_results(backend, gradients) if gradients is not None else None
        return Call(self.step, label, self.feed, numpy_results(backend, outputs), again)


def backend_array(backend: Any, value: np.ndarray) -> Any:
    """``backend.array`` of a NumPy value of any kind (float arrays get the backend's float dtype)."""
    kind = kind_of_array(value)
    return backend.array(value) if kind == "float" else backend.array(value, kind)


def numpy_results(backend: Any, results: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """NumPy copies of ``evaluate``'s results (copies: a later call must not change them)."""
    return {key: np.array(backend.to_numpy(value), copy=True) for key, value in results.items()}


_WRITABLE: dict[type, bool] = {}


def _writable(backend: Any) -> bool:
    """Whether the backend's arrays can be written in place (``x[...] = new``)."""
    kind = type(backend)
    if kind not in _WRITABLE:
        try:
            target = backend.array(np.zeros(1))
            target[...] = backend.array(np.ones(1))
            _WRITABLE[kind] = True
        except TypeError:  # JAX: immutable arrays
            _WRITABLE[kind] = False
    return _WRITABLE[kind]


class _Arrays:
    """The arrays one caller passes to ``evaluate`` and refills in place (see the module doc)."""

    def __init__(self, backend: Any, feed: Feed) -> None:
        self.backend = backend
        self.writable = _writable(backend)
        self.held = [
            {k: self._hold(v) for k, v in values.items()} for values in (feed.params, feed.data, feed.cotangents)
        ]

    def _hold(self, value: np.ndarray) -> Any:
        made = backend_array(self.backend, np.array(value, copy=True))  # never the caller's own memory
        return made if self.writable else np.array(self.backend.to_numpy(made), copy=True)

    def passed(self) -> list[dict[str, Any]]:
        """``params``, ``data`` and ``output_gradients`` as ``evaluate`` gets them."""
        if self.writable:
            return self.held
        return [{k: backend_array(self.backend, v) for k, v in held.items()} for held in self.held]

    def refill(self, feed: Feed) -> None:
        """Write ``feed``'s values into the held arrays, in place."""
        for held, values in zip(self.held, (feed.params, feed.data, feed.cotangents), strict=True):
            for key, target in held.items():
                target[...] = backend_array(self.backend, values[key]) if self.writable else values[key]


class _Workers:
    """:data:`THREADS` daemon threads that run one job each per :meth:`run`, kept for the process."""

    _shared: _Workers | None = None

    def __init__(self) -> None:
        self.jobs: list[queue.SimpleQueue[tuple[Callable[[], None], threading.Event]]] = []
        for t in range(THREADS):
            jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(jobs,), daemon=True, name=f"mithril-fuzz-{t}").start()
            self.jobs.append(jobs)

    @classmethod
    def shared(cls) -> _Workers:
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]]) -> None:
        while True:
            job, done = jobs.get()
            try:
                job()
            finally:
                done.set()

    def run(self, jobs: Sequence[Callable[[], None]], timeout: float) -> int:
        """Run ``jobs[t]`` on thread ``t``; how many did not finish within ``timeout`` seconds (then these
        threads are given up: the next :meth:`shared` starts new ones)."""
        events = []
        for queue_, job in zip(self.jobs, jobs, strict=True):
            events.append(threading.Event())
            queue_.put((job, events[-1]))
        deadline = time.monotonic() + timeout
        unfinished = sum(not event.wait(max(0.0, deadline - time.monotonic())) for event in events)
        if unfinished and _Workers._shared is self:
            _Workers._shared = None
        return unfinished


class Lifecycle:
    """The lifecycle steps of one logical model on one backend (see the module doc).

    Args:
        build_model: makes the logical model (called once per build: two builds at most).
        compile_model: ``ml.compile`` of a logical model with the options under test.
        backend: the backend instance ``compile_model`` compiles for.
        feeds: the values: ``feeds[0]`` for the first calls, ``feeds[1]`` the new values of the other steps.
    """

    def __init__(
        self, build_model: Callable[[], Any], compile_model: Callable[[Any], Any], backend: Any, feeds: Sequence[Feed]
    ) -> None:
        self.build_model = build_model
        self.compile_model = compile_model
        self.backend = backend
        self.feeds = list(feeds)
        self._model: Any = None
        self._programs: dict[int, Any] = {}
        self._first: dict[int, _Arrays] = {}  # the arrays of each compiled model's first call

    def run(self, step: str) -> list[Call]:
        """Run ``step`` (one of :data:`LIFECYCLE_STEPS`); its calls, in order. A failed compilation ends
        the step (its :class:`Call` has ``compiling`` set)."""
        steps: dict[str, Callable[[], list[Call]]] = {
            "recompile": self._recompile,
            "refill": self._refill,
            "interleave": self._interleave,
            "threads": self._threads,
        }
        if step not in steps:
            raise ValueError(f"lifecycle step must be one of {LIFECYCLE_STEPS}, got {step!r}")
        if step != "recompile" and len(self.feeds) < 2:
            raise ValueError(f"lifecycle step {step!r} needs two sets of values (feeds), got {len(self.feeds)}")
        return steps[step]()

    # -- calls ---------------------------------------------------------------------------------------
    def _call(self, step: str, label: str, index: int, arrays: _Arrays, feed: int, *, gradients: bool) -> Call:
        params, data, cotangents = arrays.passed()
        try:
            if gradients and cotangents:
                outputs, grads = self._programs[index].evaluate(params, data, output_gradients=cotangents)
            else:
                outputs, grads = self._programs[index].evaluate(params, data), None
            copied = numpy_results(self.backend, outputs), None if grads is None else numpy_results(self.backend, grads)
        except Exception as exc:
            return Call(step, label, feed, error=exc)
        return Call(step, label, feed, copied[0], copied[1], live=(outputs, grads))

    def _compile(self, index: int) -> list[Call]:
        """Compile model ``index`` (see :data:`PROGRAMS`; the model object's later compilations after its
        first), unless done already; the failed compilation's call, if any."""
        for needed in (0, index) if index in (1, _FOR_THREADS) else (index,):
            if needed not in self._programs:
                try:
                    if needed != 2 and self._model is None:
                        self._model = self.build_model()
                    self._programs[needed] = self.compile_model(self.build_model() if needed == 2 else self._model)
                except Exception as exc:
                    return [Call("recompile", f"compiling {PROGRAMS[needed]}", 0, error=exc, compiling=True)]
        return []

    def _first_call(self, index: int) -> list[Call]:
        """Compile model ``index`` and make its first call, unless done already."""
        if index in self._first:
            return []
        failed = self._compile(index)
        if failed:
            return failed
        self._first[index] = _Arrays(self.backend, self.feeds[0])
        return [self._call("recompile", f"{PROGRAMS[index]}, first call", index, self._first[index], 0, gradients=True)]

    def _prerequisites(self, *indices: int) -> tuple[list[Call], bool]:
        calls = [call for index in indices for call in self._first_call(index)]
        return calls, all(index in self._programs for index in indices)

    # -- steps ---------------------------------------------------------------------------------------
    def _recompile(self) -> list[Call]:
        calls: list[Call] = []
        for index in range(_FOR_THREADS):
            calls += self._first_call(index)
            if index not in self._programs:
                break
        return calls

    def _refill(self) -> list[Call]:
        calls, ready = self._prerequisites(0)
        if not ready:
            return calls
        arrays = self._first[0]
        arrays.refill(self.feeds[1])
        calls.append(
            self._call(
                "refill", f"{PROGRAMS[0]}, its arrays refilled in place with new values", 0, arrays, 1, gradients=True
            )
        )
        arrays.refill(self.feeds[0])
        calls.append(
            self._call(
                "refill",
                f"{PROGRAMS[0]}, its arrays refilled in place again, without cotangents",
                0,
                arrays,
                0,
                gradients=False,
            )
        )
        return calls

    def _interleave(self) -> list[Call]:
        calls, ready = self._prerequisites(0, 2)
        if not ready:
            return calls
        order = [(0, 1, True), (2, 0, True), (0, 0, False), (2, 1, False)]  # (model, feed, with cotangents)
        made = []
        for number, (index, feed, gradients) in enumerate(order, 1):
            plain = "" if gradients else " (no cotangents)"
            label = f"{'A' if index == 0 else 'B'} in A, B, A, B: call {number} of {len(order)}{plain}"
            made.append(
                self._call(
                    "interleave", label, index, _Arrays(self.backend, self.feeds[feed]), feed, gradients=gradients
                )
            )
        return calls + made + [call.read_again(self.backend) for call in made if call.live is not None]

    def _threads(self) -> list[Call]:
        calls = self._compile(_FOR_THREADS)
        if calls:
            return calls
        arrays = [_Arrays(self.backend, self.feeds[t % 2]) for t in range(THREADS)]
        made: list[list[Call]] = [[] for _ in range(THREADS)]
        barrier = threading.Barrier(THREADS)

        def work(t: int) -> None:
            try:
                barrier.wait(timeout=THREAD_TIMEOUT)
            except threading.BrokenBarrierError:
                pass
            for k in range(CALLS_PER_THREAD):
                plain = "" if k == 0 else " (no cotangents)"
                label = f"thread {t + 1} of {THREADS}, call {k + 1} of {CALLS_PER_THREAD}{plain}"
                made[t].append(self._call("threads", label, _FOR_THREADS, arrays[t], t % 2, gradients=k == 0))

        unfinished = _Workers.shared().run([functools.partial(work, t) for t in range(THREADS)], THREAD_TIMEOUT)
        if unfinished:
            hung = TimeoutError(f"{unfinished} of {THREADS} threads did not finish within {THREAD_TIMEOUT:.0f} s")
            return [Call("threads", f"{THREADS} threads calling {PROGRAMS[_FOR_THREADS]}", 0, error=hung)]
        done = [call for per_thread in made for call in per_thread]
        return done + [call.read_again(self.backend) for call in done if call.live is not None]


def refilled(recipe: Recipe, tries: int = 8) -> Recipe:
    """A copy of ``recipe`` with new values for its run-time inputs (parameters and data; constants stay)
    and new cotangents: the values a lifecycle refills in place. Deterministic for a recipe.

    The new values are the old ones shuffled and scaled by up to 10% (then, if the generator's checks fail,
    :func:`~mithril_testing.fuzz.valid_recipe`, only scaled, by less each try), exact in float32; ints and
    bools are shuffled. When no try keeps the model valid, only the cotangents change.

    >>> r = Recipe()
    >>> r.exposed += r.add_op("exp", {"input": r.add_input(np.array([0.5, 1.0, 1.5]), role="param")})
    >>> new = refilled(r)
    >>> new.inputs["x0"].array.shape, bool(np.any(new.inputs["x0"].array != r.inputs["x0"].array))
    ((3,), True)
    """
    rng = np.random.default_rng(int(recipe.fingerprint(), 16) % 2**32)
    runtime = [name for name in recipe.inputs if name in recipe.used_inputs() and not recipe.inputs[name].is_constant]
    for attempt in range(tries):
        shuffle = attempt < tries // 2
        scale = 0.1 if shuffle else 0.05 / 2 ** (attempt - tries // 2)
        candidate = copy.deepcopy(recipe)
        for name in runtime:
            candidate.inputs[name].array = _new_values(recipe.inputs[name].array, rng, shuffle=shuffle, scale=scale)
        if valid_recipe(candidate):
            break
    else:
        candidate = copy.deepcopy(recipe)
    candidate.cotangent_seed = (recipe.cotangent_seed + 1) % 2**16
    return candidate


def _new_values(array: np.ndarray, rng: np.random.Generator, *, shuffle: bool, scale: float) -> np.ndarray:
    values = rng.permutation(array.reshape(-1)).reshape(array.shape) if shuffle else array.copy()
    if kind_of_array(array) != "float":
        return values
    factor = 1.0 + scale * rng.uniform(-1.0, 1.0, array.shape)
    return np.asarray(values * factor).astype(np.float32).astype(np.float64)
