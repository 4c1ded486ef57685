"""Every ``>>>`` example in every package's source runs and prints what it says (one test per module).

Docstring examples are the first code a reader copies; run here, they cannot drift from the code. The modules
are imported by their package names (not by file path), so each registry is the one the package uses.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "mithril": "mithril-core/src",
    "mithril_testing": "mithril-testing/src",
    "mithril_backend_numpy": "mithril-backend-numpy/src",
    "mithril_backend_jax": "mithril-backend-jax/src",
    "mithril_backend_torch": "mithril-backend-torch/src",
    "mithril_backend_mlx": "mithril-backend-mlx/src",
    "mithril_backend_c": "mithril-backend-c/src",
    "mithril_backend_ggml": "mithril-backend-ggml/src",
    "mithril_models": "mithril-models/src",
}


def _module_names() -> list[str]:
    names = []
    for package, src in PACKAGES.items():
        if importlib.util.find_spec(package) is None:
            continue  # that package is not installed here
        for path in sorted((ROOT / src / package).rglob("*.py")):
            parts = path.relative_to(ROOT / src).with_suffix("").parts
            if parts[-1] == "__main__":
                continue  # running it is the module's job, not importing it
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("name", _module_names())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    if not tests:
        pytest.skip("no examples")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failures: list[str] = []
    for test in tests:
        runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)
