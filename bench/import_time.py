"""``import mithril`` with no backend imported, in fresh interpreters. Target <= 0.1 s (NumPy is imported on
first use: :mod:`mithril.lazy_numpy`)."""

from __future__ import annotations

import statistics
import subprocess
import sys

CODE = "import time; t = time.perf_counter(); import mithril; print(time.perf_counter() - t)"
CHECK = (
    "import sys, mithril; "
    "print([m for m in ('numpy', 'jax', 'torch', 'mlx', 'mithril_backend_numpy') if m in sys.modules])"
)


def main() -> None:
    samples = [float(subprocess.check_output([sys.executable, "-c", CODE], text=True)) for _ in range(7)]
    leaked = subprocess.check_output([sys.executable, "-c", CHECK], text=True).strip()
    median = statistics.median(samples)
    print(
        f"import mithril: median {median:.3f} s over {len(samples)} fresh interpreters (target <= 0.1 s -> "
        f"{'OK' if median <= 0.1 else 'MISSED'})"
    )
    print(f"backend modules imported by `import mithril`: {leaked}")


if __name__ == "__main__":
    main()
