"""Progress for long work: C/GGML builds, first JIT calls, checkpoint reading and writing, demo training.

One facility for the whole project. A task shows a tqdm bar (or, without tqdm, one plain status line) on
standard error only when

- standard error is a terminal (never in logs, pipes or CI output),
- ``MITHRIL_PROGRESS`` is not ``0``, and the caller's ``verbose`` is not ``False`` (``True`` forces it on),
- the work has lasted ``delay`` seconds (2 s by default; 0 with ``verbose=True``): short work stays silent.

Indeterminate work (a compiler running) shows what is being done and the elapsed time, refreshed by a
background ticker; counted work (bytes read) shows a bar. Nothing is shown after the task ends.

Example:
    >>> with task("compiling model.c", verbose=False) as advance:
    ...     advance(0)
    >>> wants_progress(False)
    False
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["DEFAULT_DELAY", "task", "wants_progress"]

DEFAULT_DELAY = 2.0
"""Seconds a task runs before anything is shown."""


def wants_progress(verbose: bool | None = None) -> bool:
    """Whether progress may be shown: ``verbose`` when given, else a terminal and ``MITHRIL_PROGRESS != 0``."""
    if verbose is not None:
        return verbose
    if os.environ.get("MITHRIL_PROGRESS", "1").strip() in ("0", "false", "no", "off"):
        return False
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()


class _Line:
    """The fallback display without tqdm: one status line rewritten in place."""

    def __init__(self, description: str, total: int | None, unit: str, started: float) -> None:
        self.description, self.total, self.unit = description, total, unit
        self.n = 0
        self.status = ""
        self.started = started
        self.shown = False

    def update(self, n: int) -> None:
        self.n += n

    def set_postfix_str(self, status: str, refresh: bool = True) -> None:
        self.status = status

    def refresh(self) -> None:
        elapsed = time.perf_counter() - self.started
        done = f" {self.n}/{self.total} {self.unit}" if self.total else ""
        status = f" {self.status}" if self.status else ""
        sys.stderr.write(f"\r{self.description}{done} [{elapsed:.0f} s]{status}\x1b[K")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _display(description: str, total: int | None, unit: str, started: float) -> Any:
    """A tqdm bar (or :class:`_Line`) whose clock starts when the task did (``perf_counter`` time)."""
    try:
        from tqdm.auto import tqdm  # optional: a plain line without it
    except ImportError:
        return _Line(description, total, unit, started)
    scale = unit == "B"
    size = shutil.get_terminal_size()  # a new pseudo-terminal reports 0 x 0: tqdm would draw nothing
    bar = tqdm(
        total=total, desc=description, unit=unit or "it", unit_scale=scale, unit_divisor=1024 if scale else 1000,
        leave=False, file=sys.stderr, bar_format=None if total else "{desc} [{elapsed}]",
        ncols=size.columns, nrows=size.lines,
    )  # fmt: skip
    bar.start_t -= time.perf_counter() - started  # tqdm's clock: show the time since the task began
    return bar


@contextlib.contextmanager
def task(
    description: str,
    *,
    total: int | None = None,
    unit: str = "",
    verbose: bool | None = None,
    delay: float | None = None,
) -> Iterator[Callable[..., None]]:
    """Run a block as a named task; yields ``advance(n, status=None)`` for counted work (``total`` in
    ``unit``s); ``status`` (``"loss 0.41, 820 samples/s"``) is shown after the bar until replaced.

    >>> with task("reading model.safetensors", total=100, unit="B", verbose=False) as advance:
    ...     advance(100)
    """
    if not wants_progress(verbose):
        yield lambda n, status=None: None
        return
    if verbose:  # asked for explicitly: shown from the start
        delay = 0.0
    elif delay is None:
        delay = DEFAULT_DELAY
    state: dict[str, Any] = {"display": None, "pending": 0, "status": None}
    lock = threading.Lock()
    stop = threading.Event()
    started = time.perf_counter()

    def show() -> None:
        with lock:
            display = state["display"]
            if display is None:
                display = state["display"] = _display(description, total, unit, started)
                display.update(state["pending"])
                if state["status"] is not None:
                    display.set_postfix_str(state["status"], refresh=False)
            display.refresh()

    def advance(n: int, status: str | None = None) -> None:
        with lock:
            if status is not None:
                state["status"] = status
                if state["display"] is not None:
                    state["display"].set_postfix_str(status, refresh=False)
            if state["display"] is None:
                state["pending"] += n
                late = time.perf_counter() - started >= delay
            else:
                state["display"].update(n)
                late = False
        if late:
            show()

    def tick() -> None:
        if stop.wait(delay):
            return
        while not stop.is_set():
            show()
            stop.wait(0.5)

    ticker = threading.Thread(target=tick, name="mithril-progress", daemon=True)
    ticker.start()
    try:
        yield advance
    finally:
        stop.set()
        ticker.join()
        if state["display"] is not None:
            state["display"].close()
