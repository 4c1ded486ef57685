"""Generated Python source wrapped to the project's line length, so a written reproduction passes the linter
as it is: code lines break after commas inside brackets (always valid Python, and the parsed program is
unchanged), docstring prose lines break between words.

Example:
    >>> print(wrap_source("x = f([1111, 2222, 3333], y=4)", width=18))
    x = f([1111, 2222,
        3333], y=4)
"""

from __future__ import annotations

import io
import textwrap
import tokenize

__all__ = ["WIDTH", "wrap_source"]

WIDTH = 120
"""The project's line length (``[tool.ruff] line-length``)."""


def _commas(source: str) -> dict[int, list[int]]:
    """Line number (1-based) -> columns just after each comma inside brackets on that line."""
    depth, found = 0, dict[int, list[int]]()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.OP:
            continue
        if token.string in "([{":
            depth += 1
        elif token.string in ")]}":
            depth -= 1
        elif token.string == "," and depth > 0:
            found.setdefault(token.start[0], []).append(token.end[1])
    return found


def _break_line(line: str, commas: list[int], width: int) -> list[str]:
    """``line`` in pieces of at most ``width`` columns where commas allow, the later ones indented by 4."""
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    pieces, start, offset, fits = [], 0, 0, None  # offset: the column the current piece starts at
    i = 0
    while i < len(commas):
        column = commas[i]
        if offset + column - start <= width:
            fits, i = column, i + 1
            continue
        if fits is None:  # no comma fits: break at this one anyway
            end, i = column, i + 1
        else:  # break at the last comma that fits, then weigh this one again in the new piece
            end = fits
        pieces.append(line[start:end].rstrip())
        start, offset, fits = end, len(indent), None
        while start < len(line) and line[start] == " ":
            start += 1
    pieces.append(line[start:])
    return [pieces[0], *(indent + piece for piece in pieces[1:])]


def _prose_lines(source: str) -> set[int]:
    """Line numbers inside the module docstring (prose: wrapped between words)."""
    first = next(t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.NL)
    if first.type != tokenize.STRING:
        return set()
    return set(range(first.start[0] + 1, first.end[0]))


def wrap_source(source: str, width: int = WIDTH) -> str:
    """``source`` with every line over ``width`` columns wrapped where that keeps its meaning."""
    commas, prose = _commas(source), _prose_lines(source)
    lines = []
    for number, line in enumerate(source.split("\n"), start=1):
        if len(line) <= width:
            lines.append(line)
        elif number in prose:
            indent = " " * (len(line) - len(line.lstrip()))
            lines.extend(textwrap.wrap(line, width, subsequent_indent=indent + "    ", break_long_words=False))
        else:
            lines.extend(_break_line(line, commas.get(number, []), width))
    return "\n".join(lines)
