"""The minimal backend of ``docs/minimal-backend.md``, copied from the page into a fresh folder as a reader would
(its module, its test file, its ``pyproject.toml`` entry point), passes the whole conformance suite, stays within
80 code lines, and adds to ``op_table(np)`` exactly what the page says a NumPy backend must add."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from mithril.extend import op_table, plugin_registry

from mithril_testing.conformance import required_primitives

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "minimal-backend.md"
BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
MAX_CODE_LINES = 80

pytestmark = pytest.mark.skipif(not PAGE.is_file(), reason="not run from the repository (no docs/minimal-backend.md)")


def _blocks(language: str) -> list[str]:
    return [code for lang, code in BLOCK.findall(PAGE.read_text()) if lang == language]


def _files() -> dict[str, str]:
    """The page's ``# file: NAME`` Python blocks: file name -> contents."""
    files = {}
    for code in _blocks("python"):
        first, _, rest = code.partition("\n")
        if first.startswith("# file: "):
            files[first[len("# file: ") :].strip()] = rest
    return files


def code_lines(source: str) -> int:
    """Lines that are neither blank nor comments (as ``tools/architecture_metrics.py`` counts them)."""
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


def _install(folder: Path) -> None:
    """Write the page's files into ``folder`` and register its entry point there, as ``pip install .`` would."""
    tomllib = pytest.importorskip("tomllib", reason="reading the page's pyproject.toml needs Python 3.11")
    for name, code in _files().items():
        (folder / name).write_text(code)
    (project,) = [tomllib.loads(code)["project"] for code in _blocks("toml") if "entry-points" in code]
    info = folder / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    points = project["entry-points"]["mithril"]
    (info / "entry_points.txt").write_text("[mithril]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))


def test_the_page_has_the_backend_and_its_conformance_test() -> None:
    assert {"minimal_backend.py", "test_minimal_backend.py"} <= set(_files())
    assert "BackendConformanceTests" in _files()["test_minimal_backend.py"]


def test_the_backend_is_at_most_80_code_lines() -> None:
    lines = code_lines(_files()["minimal_backend.py"])
    assert lines <= MAX_CODE_LINES, f"docs/minimal-backend.md: the backend has {lines} code lines (at most 80)"


def test_the_backend_adds_exactly_what_op_table_lacks_and_the_page_names_it() -> None:
    namespace: dict[str, object] = {"__name__": "minimal_backend"}
    exec(compile(_files()["minimal_backend.py"], "minimal_backend.py", "exec"), namespace)
    table = namespace["TABLE"]
    assert isinstance(table, dict)
    shared = set(op_table(np))
    everywhere = set(plugin_registry().impls("*"))  # implemented by core for every Python backend (lambda)
    required = required_primitives(types.SimpleNamespace(supports_autograd=False))
    assert not sorted(required - set(table) - everywhere), "the documented backend misses required primitives"
    added = set(table) - shared
    text = PAGE.read_text()
    unnamed = sorted(p for p in added if f"`{p}`" not in text)
    assert not unnamed, f"docs/minimal-backend.md does not name {unnamed} among what op_table leaves out"


def test_the_minimal_backend_passes_the_whole_conformance_suite(tmp_path: Path) -> None:
    _install(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_minimal_backend.py"],
        cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-3000:]
    assert done.returncode == 0, f"{summary}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) > 500 and "failed" not in summary and "error" not in summary, summary
