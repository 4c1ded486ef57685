"""``python -m mithril.testing.fuzz --backend c --examples 10000 [--out fuzz-failures] [--seed N]``

Runs a fuzz campaign (:func:`mithril.testing.fuzz.run_campaign`) on each ``--backend`` given and prints
``N models, M disagreements`` per backend; each new disagreement's minimal reproduction is written as a
standalone pytest file into ``--out``. Exit status 1 when a disagreement was found.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    >>> main(["--backend", "numpy", "--examples", "2", "--seed", "0", "--out", "", "--quiet"])
    numpy: 2 models, 0 disagreements
    0
    """
    parser = argparse.ArgumentParser(prog="python -m mithril.testing.fuzz", description="Differential fuzzing of Mithril backends against the NumPy references.")
    parser.add_argument("--backend", action="append", required=True, help="backend name (numpy, jax, torch, mlx, c, ggml); repeat for several")
    parser.add_argument("--examples", type=int, default=1000, help="models to try per backend (default 1000)")
    parser.add_argument("--out", default="fuzz-failures", help="directory for reproduction files (default fuzz-failures/; '' to write none)")
    parser.add_argument("--seed", type=int, default=None, help="base seed (default: random)")
    parser.add_argument("--max-ops", type=int, default=40, help="most primitive calls per model (default 40)")
    parser.add_argument("--all-variants", action=argparse.BooleanOptionalAction, default=None, help="check every pass-disabled variant per model (default: on numpy; elsewhere the default compilation plus one drawn variant)")
    parser.add_argument("--time-limit", type=float, default=None, help="stop starting new rounds after this many seconds per backend")
    parser.add_argument("--exclude", default="", help="comma-separated primitives never to generate")
    parser.add_argument("--quiet", action="store_true", help="print only the summary lines")
    args = parser.parse_args(argv)

    import warnings

    from . import default_profile, run_campaign

    warnings.filterwarnings("ignore")  # overflow/invalid-value warnings of random models are not findings

    progress = None if args.quiet else (lambda line: print(line, flush=True))
    status = 0
    for backend in args.backend:
        exclude = frozenset(p for p in args.exclude.split(",") if p)
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
