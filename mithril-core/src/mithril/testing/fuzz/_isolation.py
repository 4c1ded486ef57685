"""Run checks in a child process, so a backend that crashes the interpreter (a segfault in native code) or
hangs becomes a :class:`~mithril.testing.fuzz.Disagreement` instead of ending the fuzzer.

:class:`IsolatedChecker` keeps one worker process (``multiprocessing`` *spawn*: no state inherited from
threaded parents) and restarts it after a crash. A script using it needs the ``if __name__ == "__main__":``
guard that *spawn* requires. The worker reports each compilation variant before it
runs it, so a crash is attributed to the variant that was running.

Example:
    >>> import numpy as np
    >>> from mithril.testing.fuzz import Recipe
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
import signal
from collections.abc import Sequence
from typing import Any

from ...types import Dtype
from ._check import Disagreement, backend_dtype, check_recipe
from ._recipe import Recipe

__all__ = ["IsolatedChecker", "CRASH_TIMEOUT"]

CRASH_TIMEOUT = 300.0
"""Seconds a worker may take for one model before it counts as hung and is killed."""


def _worker(conn: Any) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        recipe, backend, variants = task
        try:
            result = check_recipe(recipe, backend, variants, on_variant=lambda v: conn.send(("variant", v)))
        except BaseException as exc:  # noqa: BLE001 - a fuzzer bug: report it to the parent as an error
            conn.send(("raised", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("done", result))


class IsolatedChecker:
    """``check(recipe, backend, variants)`` like :func:`~mithril.testing.fuzz.check_recipe`, in a child
    process; a crash gives category ``"crash"`` (exception type: the signal name), a timeout ``"hang"``."""

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

    def check(self, recipe: Recipe, backend: str, variants: Sequence[str] = ("default",)) -> Disagreement | None:
        if self._process is None or not self._process.is_alive():
            self._start()
        self._conn.send((recipe, backend, tuple(variants)))
        variant = "default"
        while True:
            if not self._conn.poll(self.timeout):
                self._process.kill()
                self._process.join()
                self._process = None
                return self._failure(recipe, backend, variants, variant, "hang", "Timeout", f"no answer within {self.timeout:.0f} s")
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                self._process.join(5)
                code = self._process.exitcode
                self._process = None
                name = signal.Signals(-code).name if code is not None and code < 0 else f"exit{code}"
                return self._failure(recipe, backend, variants, variant, "crash", name, f"the process died ({name}) while compiling or evaluating")
            if kind == "variant":
                variant = payload
            elif kind == "raised":
                raise RuntimeError(f"the fuzz worker raised {payload}")
            else:
                return payload

    def _failure(self, recipe: Recipe, backend: str, variants: Sequence[str], variant: str, category: str, kind: str, text: str) -> Disagreement:
        if backend not in self._dtypes:
            self._dtypes[backend] = backend_dtype(backend)
        found = Disagreement(recipe, backend, self._dtypes[backend], variant, category, error=text, exception_type=kind)
        found.variants = tuple(variants)
        if variant != "default":
            found.category = f"pass:{category}"
        return found
