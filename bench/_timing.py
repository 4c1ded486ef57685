"""Timing helpers shared by the benchmarks: best-of-N medians measured in this process."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int = 30, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


SETTLE_SECONDS = 0.2
"""Pause before each timed block: BLAS/OpenMP thread pools (NumPy's OpenBLAS, torch's, the C backend's)
spin for up to ~0.1 s after their last job, and would otherwise steal the cores of whatever runs next."""


def interleaved(fns: dict[str, Callable[[], object]], rounds: int = 7, repeats: int = 10) -> dict[str, float]:
    """Median per-call time of each function, measured in alternating rounds so machine noise hits all alike
    (each block after :data:`SETTLE_SECONDS` of idle time, so one implementation's spinning threads do not
    slow down the next)."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(SETTLE_SECONDS)
            samples[name].append(median_seconds(fn, repeats=repeats, warmup=1))
    return {name: statistics.median(values) for name, values in samples.items()}


def report(title: str, times: dict[str, float], baseline: str, target: float | None = None) -> None:
    """Print times and the ratio of each entry to ``baseline``."""
    print(title)
    base = times[baseline]
    for name, seconds in times.items():
        ratio = seconds / base
        mark = ""
        if target is not None and name != baseline:
            mark = f"  (target <= {target:.2f}: {'met' if ratio <= target else 'MISSED'})"
        print(f"  {name:<34} {seconds * 1e3:9.3f} ms   ratio {ratio:5.2f}{mark}")
