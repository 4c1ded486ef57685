"""Progress bars for long work (reading large checkpoints): tqdm on a terminal, silent otherwise.

``progress=None`` shows a bar when stderr is a terminal, the work is large and ``MITHRIL_PROGRESS`` is not
``0``; ``True``/``False`` force it on or off. Without tqdm installed nothing is shown.

Example:
    >>> with progress_bar(total=10, description="reading", enabled=False) as advance:
    ...     advance(10)
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

__all__ = ["progress_bar", "wants_progress"]

LARGE_BYTES = 64 * 2**20


def wants_progress(requested: bool | None, total_bytes: int) -> bool:
    """Whether to show a bar for ``total_bytes`` of work given the caller's ``progress`` argument."""
    if requested is not None:
        return requested
    return os.environ.get("MITHRIL_PROGRESS", "1") != "0" and sys.stderr.isatty() and total_bytes >= LARGE_BYTES


@contextlib.contextmanager
def progress_bar(total: int, description: str, enabled: bool) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; a tqdm byte counter when ``enabled`` and tqdm is installed."""
    bar = None
    if enabled:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            bar = tqdm(total=total, desc=description, unit="B", unit_scale=True, unit_divisor=1024, leave=False)
    try:
        yield (bar.update if bar is not None else (lambda n: None))
    finally:
        if bar is not None:
            bar.close()
