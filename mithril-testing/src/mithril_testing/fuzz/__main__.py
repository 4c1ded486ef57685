"""``python -m mithril_testing.fuzz --backend c --examples 10000 [--out fuzz-failures] [--seed N]
[--profile lifecycle]``

Runs a fuzz campaign (:func:`mithril_testing.fuzz.run_campaign`) on each ``--backend`` given and prints
``N models, M disagreements`` per backend; each new disagreement's minimal reproduction is written as a
standalone pytest file into ``--out``. ``--profile lifecycle`` also runs the lifecycle steps on every
model (:data:`mithril_testing.fuzz.LIFECYCLE_STEPS`). Exit status 1 when a disagreement was found, 2 for
a wrong argument (one line on stderr: what was given and what is accepted).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from mithril.errors import MithrilError
from mithril.extend import backend_class

PROFILES = ("standard", "lifecycle")
"""``--profile`` values: the ordinary checks, or those plus the lifecycle steps."""


class _Parser(argparse.ArgumentParser):
    """An argument error is one line on stderr, ``prog: error: ...``, and exit status 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse ``type``: a number of ``kind`` greater than 0."""
    what = "an integer" if kind is int else "a number"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} > 0, got {text!r}") from None
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"expected {what} > 0, got {text!r}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m mithril_testing.fuzz",
        description="Differential fuzzing of Mithril backends against the NumPy references.",
    )
    parser.add_argument(
        "--backend",
        action="append",
        required=True,
        help="an installed backend (numpy, jax, torch, mlx, c, ggml); repeat for several",
    )
    parser.add_argument(
        "--examples", type=_positive(int), default=1000, help="models to try per backend (default 1000)"
    )
    parser.add_argument(
        "--out",
        default="fuzz-failures",
        help="directory for reproduction files (default fuzz-failures/; '' to write none)",
    )
    parser.add_argument("--seed", type=int, default=None, help="base seed (default: random)")
    parser.add_argument(
        "--max-ops", type=_positive(int), default=40, help="most primitive calls per model (default 40)"
    )
    parser.add_argument(
        "--all-variants",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="check every pass-disabled variant per model (default: on numpy; elsewhere the default compilation "
        "plus one drawn variant)",
    )
    parser.add_argument(
        "--time-limit",
        type=_positive(float),
        default=None,
        help="stop starting new rounds after this many seconds per backend",
    )
    parser.add_argument("--exclude", default="", help="comma-separated primitives never to generate")
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default="standard",
        help="'lifecycle': also compile each model again, refill its arrays in place, interleave two compiled models "
        "and call from threads (default: standard)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the summary lines")
    return parser


def _check_names(parser: argparse.ArgumentParser, backends: Sequence[str], exclude: frozenset[str]) -> None:
    """Refuse (exit status 2) a backend that is not installed and a primitive the generator never draws."""
    from ._generate import GENERATED_PRIMITIVES

    for backend in backends:
        try:
            backend_class(backend)
        except MithrilError as exc:
            parser.error(f"argument --backend: {exc}")
    unknown = sorted(exclude - GENERATED_PRIMITIVES)
    if unknown:
        parser.error(
            f"argument --exclude: {', '.join(map(repr, unknown))} is not a generated primitive; "
            f"expected some of {', '.join(sorted(GENERATED_PRIMITIVES))}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    >>> main(["--backend", "numpy", "--examples", "2", "--seed", "0", "--out", "", "--quiet"])
    numpy: 2 models, 0 disagreements
    0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    exclude = frozenset(p.strip() for p in args.exclude.split(",") if p.strip())
    _check_names(parser, args.backend, exclude)

    import warnings

    from . import LIFECYCLE_STEPS, default_profile, run_campaign

    warnings.filterwarnings("ignore")  # overflow/invalid-value warnings of random models are not findings

    progress = None if args.quiet else (lambda line: print(line, flush=True))
    lifecycle = LIFECYCLE_STEPS if args.profile == "lifecycle" else ()
    status = 0
    for backend in args.backend:
        profile = default_profile(backend, max_ops=args.max_ops, exclude=exclude)
        result = run_campaign(
            backend,
            args.examples,
            args.out or None,
            seed=args.seed,
            profile=profile,
            all_variants=args.all_variants,
            time_limit=args.time_limit,
            progress=progress,
            lifecycle=lifecycle,
        )
        line = f"{backend}: {result.summary()}"
        if result.distinct:
            line += f" ({len(result.distinct)} distinct, reproductions in {args.out or '(not written)'})"
        if not args.quiet:
            line += f" in {result.seconds:.0f} s"
        print(line, flush=True)
        status = status or (1 if result.disagreements else 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
