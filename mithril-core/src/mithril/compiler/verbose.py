"""``ml.compile(verbose=True)``'s log: each stage's time on the ``mithril.compile`` logger.

Example:
    >>> from mithril.compiler.verbose import log_verbose
    >>> log_verbose("flatten: 0.0010 s")  # doctest: +SKIP
    mithril.compile: flatten: 0.0010 s
"""

from __future__ import annotations

import logging
import sys

__all__ = ["log_verbose", "logger"]

logger = logging.getLogger("mithril.compile")


def log_verbose(message: str) -> None:
    """Log ``message`` at INFO on the ``mithril.compile`` logger, shown on stderr when logging is not
    configured (``ml.compile(verbose=True)`` asked for it)."""
    level, handler = logger.level, None
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
    if not logger.isEnabledFor(logging.INFO):
        logger.setLevel(logging.INFO)
    try:
        logger.info(message)
    finally:
        logger.setLevel(level)
        if handler is not None:
            logger.removeHandler(handler)
