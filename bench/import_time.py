"""``import mithril`` with no backend imported, in fresh interpreters. Target <= 0.1 s (NumPy is imported on
first use: :mod:`mithril.lazy_numpy`).

Measured as an installed package runs: with its bytecode cached (``pip install`` compiles it; an editable
install compiles on the first import). The interpreters run without ``PYTHONDONTWRITEBYTECODE`` (one
untimed import writes the cache first): with it set, every import compiles every module's source again,
which is the compiler's time, not Mithril's (measured here: 0.21 s with it, 0.07 s without).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

CODE = "import time; t = time.perf_counter(); import mithril; print(time.perf_counter() - t)"
CHECK = (
    "import sys, mithril; "
    "print([m for m in ('numpy', 'jax', 'torch', 'mlx', 'mithril_backend_numpy') if m in sys.modules])"
)


def main() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.check_output([sys.executable, "-c", "import mithril"], env=env)  # writes the bytecode cache
    samples = [float(subprocess.check_output([sys.executable, "-c", CODE], text=True, env=env)) for _ in range(7)]
    leaked = subprocess.check_output([sys.executable, "-c", CHECK], text=True, env=env).strip()
    median = statistics.median(samples)
    print(
        f"import mithril: median {median:.3f} s over {len(samples)} fresh interpreters, bytecode cached "
        f"(target <= 0.1 s -> {'OK' if median <= 0.1 else 'MISSED'})"
    )
    print(f"backend modules imported by `import mithril`: {leaked}")


if __name__ == "__main__":
    main()
