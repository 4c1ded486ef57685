"""Architecture figures for the closing notes of refactoring work: long functions, the public surface, imports
that go past a package's public modules, and the size of core without its test kit.

Run from the repository root::

    python tools/architecture_metrics.py          # the summary
    python tools/architecture_metrics.py --list   # and every long function and every import past a door
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LONG_FUNCTION = 80

# the modules other packages may import from each package (its documented doors)
PUBLIC_DOORS = {
    "mithril": ("mithril", "mithril.extend", "mithril.models", "mithril.errors", "mithril.types", "mithril.validation"),
    "mithril_backend_c": ("mithril_backend_c", "mithril_backend_c.kernels"),
    "mithril_backend_ggml": ("mithril_backend_ggml",),
    "mithril_testing": ("mithril_testing",),
}


@dataclass(frozen=True)
class SourceFile:
    package: str  # the distribution folder, e.g. "mithril-backend-c"
    path: Path
    module: str  # dotted module name


def source_files() -> Iterator[SourceFile]:
    """Every Python module under a package's ``src``."""
    for dist in sorted(ROOT.glob("mithril-*")):
        src = dist / "src"
        for path in sorted(src.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield SourceFile(dist.name, path, ".".join(parts))


def long_functions(files: list[SourceFile]) -> list[tuple[int, str]]:
    """``(lines, "module:function")`` for every function longer than :data:`LONG_FUNCTION` lines (docstrings
    not counted)."""
    found = []
    for f in files:
        for node in ast.walk(ast.parse(f.path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = _function_lines(node)
                if length > LONG_FUNCTION:
                    found.append((length, f"{f.module}:{node.name}"))
    return sorted(found, reverse=True)


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines from ``def`` to its end, its docstring not counted (documentation is not a job)."""
    length = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        length -= (first.end_lineno or first.lineno) - first.lineno + 1
    return length


def _imported_modules(tree: ast.AST, module: str) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside the same package
                continue
            yield node.module or ""


def imports_past_doors(files: list[SourceFile]) -> list[tuple[str, str]]:
    """``(importing module, imported module)`` where a package imports another package's non-public module."""
    found = []
    for f in files:
        top = f.module.split(".")[0]
        for imported in _imported_modules(ast.parse(f.path.read_text()), f.module):
            other = imported.split(".")[0]
            if other == top or other not in PUBLIC_DOORS:
                continue
            if imported not in PUBLIC_DOORS[other]:
                found.append((f.module, imported))
    return found


def public_names() -> int:
    import mithril as ml

    return len(set(ml.__all__))


def code_lines(paths: list[Path]) -> int:
    """Lines that are neither blank nor comments (docstrings count: they are read as code is)."""
    lines = (line.strip() for p in paths for line in p.read_text().splitlines())
    return sum(1 for line in lines if line and not line.startswith("#"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list every long function and import past a door")
    args = parser.parse_args()
    files = list(source_files())
    long = long_functions(files)
    past = imports_past_doors(files)
    core = [f.path for f in files if f.package == "mithril-core"]
    kit = [f.path for f in files if f.package == "mithril-testing"]
    print(f"functions over {LONG_FUNCTION} lines: {len(long)}")
    print(f"ml.__all__: {public_names()} names")
    print(f"imports past another package's public modules: {len(past)} in {len({m for m, _ in past})} modules")
    print(f"core code lines: {code_lines(core)} (the test kit, in mithril-testing: {code_lines(kit)})")
    if args.list:
        for length, name in long:
            print(f"  {length:4d}  {name}")
        for importer, imported in past:
            print(f"  {importer} -> {imported}")


if __name__ == "__main__":
    main()
