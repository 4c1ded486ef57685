"""Run checks in a child process, so a backend that crashes the interpreter (a segfault in native code) or
hangs becomes a :class:`~mithril_testing.fuzz.Disagreement` instead of ending the fuzzer.

:class:`IsolatedChecker` keeps one worker process (``multiprocessing`` *spawn*: no state inherited from
threaded parents) and restarts it after a crash. A script using it needs the ``if __name__ == "__main__":``
guard that *spawn* requires. The worker reports each compilation variant and lifecycle step before it
runs it, so a crash is attributed to the variant or step that was running.

Example:
    >>> import numpy as np
    >>> from mithril_testing.fuzz import Recipe
    >>> r = Recipe()
    >>> x = r.add_input(np.array([1.0]), role="param")
    >>> (y,) = r.add_op("exp", {"input": x})
    >>> r.exposed.append(y)
    >>> with IsolatedChecker() as checker:
    ...     checker.check(r, "numpy") is None
    True
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Sequence
from typing import Any, cast

from mithril.types import Dtype

from ._check import Disagreement, backend_dtype, check_recipe
from ._recipe import Recipe

__all__ = ["CRASH_TIMEOUT", "STALL_FACTOR", "IsolatedChecker"]

CRASH_TIMEOUT = 300.0
"""CPU seconds (the worker's and its compilers') one model may take before it counts as hung and is
killed; where the CPU time cannot be read (not Linux), wall seconds."""

STALL_FACTOR = 6
"""A worker that is given no answer within ``STALL_FACTOR * timeout`` wall seconds counts as hung too,
however little CPU it used (blocked for good, e.g. a deadlock). A worker starved of CPU by other processes
(a ``nice``-d campaign beside a test run) is slow, not hung: it is never failed by the wall clock alone
before then."""


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` and of its waited-for children (the C compiler runs),
    from ``/proc`` (``None`` where that is not available)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
    except (OSError, ValueError, IndexError):
        return None


def _worker(conn: Any) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        recipe, backend, variants, lifecycle = task
        try:
            result = check_recipe(
                recipe,
                backend,
                variants,
                lifecycle=lifecycle,
                on_variant=lambda v: conn.send(("variant", v)),
                on_step=lambda s: conn.send(("step", s)),
            )
        except BaseException as exc:
            conn.send(("raised", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("done", result))


class IsolatedChecker:
    """``check(recipe, backend, variants, lifecycle=...)`` like :func:`~mithril_testing.fuzz.check_recipe`, in
    a child process; a crash gives category ``"crash"`` (exception type: the signal name), a model that uses
    more than ``timeout`` CPU seconds (or gets no answer for :data:`STALL_FACTOR` times as many wall seconds)
    ``"hang"`` (prefixed ``"pass:"`` in a variant with passes disabled, or with the lifecycle step that was
    running: ``"threads:crash"``)."""

    def __init__(self, timeout: float = CRASH_TIMEOUT) -> None:
        self.timeout = timeout
        self._process: Any = None
        self._conn: Any = None
        self._dtypes: dict[str, Dtype] = {}

    def __enter__(self) -> IsolatedChecker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(target=_worker, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        answered = parent.poll(self.timeout)  # a worker that cannot start is the caller's setup, not a crash
        try:
            ready = answered and parent.recv()  # ("ready", pid)
        except (EOFError, OSError):
            ready = None
        if not ready:
            self._process.kill()
            self._process.join(5)
            code = self._process.exitcode
            self._process, self._conn = None, None
            if not answered:
                raise RuntimeError(f"the fuzz worker process did not start within {self.timeout:.0f} s")
            raise RuntimeError(
                f"the fuzz worker process exited (code {code}) before it was ready (its error is on stderr): with "
                "multiprocessing's spawn start method, the script that runs the checks must be a file with an "
                "'if __name__ == \"__main__\":' guard (not stdin or an interactive session)"
            )

    def close(self) -> None:
        """Stop the worker."""
        if self._process is not None:
            try:
                if self._conn is not None:
                    self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        self._process = None
        self._conn = None

    def check(
        self, recipe: Recipe, backend: str, variants: Sequence[str] = ("default",), *, lifecycle: Sequence[str] = ()
    ) -> Disagreement | None:
        if self._process is None or not self._process.is_alive():
            self._start()
        self._conn.send((recipe, backend, tuple(variants), tuple(lifecycle)))
        variant, step = "default", ""
        while True:
            hung = self._wait()
            if hung is not None:
                self._process.kill()
                self._process.join()
                self._process = None
                return self._failure(recipe, backend, variants, (variant, step), "hang", "Timeout", hung)
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                self._process.join(5)
                code = self._process.exitcode
                self._process = None
                name = signal.Signals(-code).name if code is not None and code < 0 else f"exit{code}"
                return self._failure(
                    recipe,
                    backend,
                    variants,
                    (variant, step),
                    "crash",
                    name,
                    f"the process died ({name}) while compiling or evaluating",
                )
            if kind == "variant":
                variant = payload
            elif kind == "step":
                step = payload
            elif kind == "raised":
                raise RuntimeError(f"the fuzz worker raised {payload}")
            else:
                return cast("Disagreement | None", payload)

    def _wait(self) -> str | None:
        """Wait for the worker's next message; ``None`` once there is one, else why it counts as hung."""
        start_wall, start_cpu = time.monotonic(), _cpu_seconds(self._process.pid)
        while not self._conn.poll(min(self.timeout, 5.0)):
            wall = time.monotonic() - start_wall
            cpu = _cpu_seconds(self._process.pid)
            if start_cpu is None or cpu is None:
                if wall >= self.timeout:
                    return f"no answer within {self.timeout:.0f} s"
            elif cpu - start_cpu >= self.timeout:
                return f"no answer after {cpu - start_cpu:.0f} s of CPU time ({wall:.0f} s wall)"
            if wall >= STALL_FACTOR * self.timeout:
                return (
                    f"no answer within {wall:.0f} s (having used "
                    f"{0 if cpu is None or start_cpu is None else cpu - start_cpu:.0f} s of CPU)"
                )
        return None

    def _failure(
        self,
        recipe: Recipe,
        backend: str,
        variants: Sequence[str],
        running: tuple[str, str],
        category: str,
        kind: str,
        text: str,
    ) -> Disagreement:
        """The disagreement for a crash or hang while ``running`` (the variant, the lifecycle step or ``""``)."""
        if backend not in self._dtypes:
            self._dtypes[backend] = backend_dtype(backend)
        variant, step = running
        variant = "default" if step else variant  # lifecycle steps run in the default compilation
        found = Disagreement(
            recipe, backend, self._dtypes[backend], variant, category, error=text, exception_type=kind, step=step
        )
        found.variants = tuple(variants)
        if step:
            found.category = f"{step}:{category}"
        elif variant != "default":
            found.category = f"pass:{category}"
        return found
