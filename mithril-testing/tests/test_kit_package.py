"""The test kit is its own package: core never imports it, ``mithril.extend.BackendConformanceTests`` finds it
on first use, and without it installed that name says which package to install."""

from __future__ import annotations

import subprocess
import sys

import mithril.extend

import mithril_testing


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_extend_gives_the_kits_base_class() -> None:
    assert mithril.extend.BackendConformanceTests is mithril_testing.BackendConformanceTests


def test_core_does_not_import_the_kit() -> None:
    done = _run("import sys, mithril, mithril.extend\nprint('mithril_testing' in sys.modules)")
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_without_the_kit_extend_names_the_package_to_install() -> None:
    code = (
        "import sys\nsys.modules['mithril_testing'] = None\nimport mithril.extend\n"
        "try:\n    mithril.extend.BackendConformanceTests\nexcept ImportError as exc:\n    print(exc)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert "comes from the test kit, which is not installed" in done.stdout
    assert done.stdout.strip().endswith("pip install mithril-testing"), done.stdout
