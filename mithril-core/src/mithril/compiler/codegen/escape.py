"""The one place where user-controlled strings (block names, keys, model names, paths) are made inert for
generated source and for file names. Every code generator goes through these functions.

- Python: :func:`python_identifier` (a valid, length-bounded identifier), :func:`python_comment` (one
  line, control characters escaped) and :func:`python_literal` (a string literal).
- C: :func:`c_identifier`, :func:`c_comment` (no ``*/``, no line breaks), :func:`c_string_literal`.
- Files: :func:`safe_file_name` (no separators, no ``..``, bounded length, unique by a hash suffix).
- Pictures and reports: :func:`dot_id` (a double-quoted Graphviz DOT string, never an HTML-like ``<...>`` ID)
  and :func:`display_text` (one printable line for a summary table: no escape sequence reaches a terminal).

Example:
    >>> python_comment("evil\\nimport os")
    'evil\\\\nimport os'
    >>> c_comment("a */ system(\\"x\\"); /*")
    'a * / system("x"); / *'
    >>> c_string_literal('key "1"\\n')
    '"key \\\\"1\\\\"\\\\012"'
    >>> safe_file_name("../etc/passwd", ".bin")
    'etc_passwd-7fef78f5.bin'
"""

from __future__ import annotations

import hashlib
import keyword
import re

__all__ = [
    "MAX_COMMENT", "MAX_DISPLAY", "MAX_IDENTIFIER", "c_comment", "c_identifier", "c_string_literal", "display_text",
    "dot_id", "python_comment", "python_identifier", "python_literal", "safe_file_name",
]

MAX_IDENTIFIER = 48
"""Longest identifier derived from a user string (a hash suffix keeps long names distinct)."""
MAX_COMMENT = 160
"""Longest comment derived from a user string."""
MAX_DISPLAY = 200
"""Most characters of one user string shown in a summary table or a graph picture (then ``...``)."""

_NOT_IDENTIFIER = re.compile(r"[^0-9A-Za-z_]")
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "_Bool _Complex _Imaginary NULL main".split()
)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _identifier(text: str, reserved: frozenset[str] | set[str], prefix: str) -> str:
    base = _NOT_IDENTIFIER.sub("_", text) or "_"
    if len(base) > MAX_IDENTIFIER or base != text:
        base = base[:MAX_IDENTIFIER]
    if base[0].isdigit() or base in reserved:
        base = f"{prefix}{base}"
    return base


def python_identifier(text: str) -> str:
    """An ASCII Python identifier derived from ``text`` (callers still make it unique)."""
    return _identifier(text, frozenset(keyword.kwlist) | frozenset(keyword.softkwlist), "v_")


def c_identifier(text: str) -> str:
    """An ASCII C identifier derived from ``text`` (callers still make it unique)."""
    return _identifier(text, _C_KEYWORDS, "v_")


def _one_line(text: str) -> str:
    """Printable ASCII on one line: everything else (newlines, NUL, unicode) as escapes, bounded length."""
    if text.isascii() and text.isprintable() and "\\" not in text and len(text) <= MAX_COMMENT:
        return text
    escaped = text.encode("unicode_escape").decode("ascii")
    escaped = "".join(ch if " " <= ch <= "~" else f"\\x{ord(ch):02x}" for ch in escaped)
    return escaped if len(escaped) <= MAX_COMMENT else escaped[: MAX_COMMENT - 12] + "..." + _digest(text)


def python_comment(text: str) -> str:
    """``text`` as the body of a ``#`` comment: it cannot end the comment or start a new line."""
    return _one_line(text)


def python_literal(text: str) -> str:
    """``text`` as a Python string literal (``repr`` of a ``str`` is always a valid, inert literal)."""
    return repr(str(text))


def c_comment(text: str) -> str:
    """``text`` as the body of a ``/* ... */`` comment: no ``*/`` or ``/*``, no line breaks, no trigraphs."""
    return _one_line(text).replace("*/", "* /").replace("/*", "/ *").replace("??", "?\\?")


def c_string_literal(text: str) -> str:
    """``text`` as a C string literal: quotes, backslashes, control and non-ASCII bytes escaped (UTF-8)."""
    out = []
    for byte in text.encode("utf-8", "surrogatepass"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "?":
            out.append("\\?")  # no trigraphs
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")  # octal escapes never swallow the next character
    return '"' + "".join(out) + '"'


def safe_file_name(text: str, suffix: str = "", max_length: int = 80) -> str:
    """A file name derived from ``text``: ``[A-Za-z0-9._-]`` only, no leading dots, at most ``max_length``
    characters before ``suffix``; a hash suffix keeps names distinct when anything was changed."""
    base = re.sub(r"[^0-9A-Za-z._-]", "_", text).lstrip("._") or "_"
    base = re.sub(r"\.{2,}", "_", base)
    if base != text or len(base) > max_length:
        base = f"{base[: max_length - 9]}-{_digest(text)}"
    return base + suffix


_LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # where str.splitlines splits


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DISPLAY else text[:MAX_DISPLAY] + "..."


def _visible(text: str) -> str:
    """Every character that is not printable (control and format characters, lone surrogates) as its escape."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def display_text(text: str) -> str:
    r"""``text`` as one printable line for a table: line breaks, ESC, NUL, bidirectional overrides and lone
    surrogates shown as their escapes, at most :data:`MAX_DISPLAY` characters; printable unicode is kept.

    >>> print(display_text("café\x1b[2J\nx"))
    café\x1b[2J\nx
    """
    return _visible(_cut(text))


def dot_id(*lines: str) -> str:
    r"""The one way a user string reaches Graphviz DOT text: a double-quoted DOT ID showing ``lines`` one below
    the other. Backslashes and quotes are escaped (so no Graphviz escape such as ``\N`` or ``\l``, no
    backslash-newline continuation, no unterminated string), a line break inside a line is a line break of the
    label, other unprintable characters are shown as escapes (:func:`display_text`); being quoted, the ID is
    never an HTML-like ``<...>`` label.

    >>> print(dot_id("<b>x</b>", 'say "hi"\\'))
    "<b>x</b>
    say \"hi\"\\"
    """
    parts = [_visible(part) for line in lines for part in _LINE_BREAK.split(_cut(line))]
    return '"' + "\n".join(part.replace("\\", "\\\\").replace('"', '\\"') for part in parts) + '"'
