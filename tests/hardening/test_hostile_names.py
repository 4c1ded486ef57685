"""Property test: block names and keys made of hostile text (quotes, newlines, comment terminators, NUL,
unicode, preprocessor lines, 1,000+ characters) reach generated Python and C only as inert text.

Each generated name carries payloads that break the build or set a canary if they ever escape a comment
or a string literal: a Python line that sets ``MITHRIL_PWNED``, C ``#error`` lines. The model must compile
on every installed backend (both naming modes, so hostile block names also become parameter names), give
the right numbers, and leave the canary unset; on the C backend the exported program must build and
reproduce them.

The same names reach the ways to see a model as inert text: ``to_dot`` and ``plot`` (every user string a quoted
DOT string, the SVG holding exactly the model's nodes and edges and no link), ``summary`` (one printable line
per block: no escape sequence reaches the terminal) and ``_repr_html_`` (only the table's own tags).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import mithril as ml
import numpy as np
import pytest
from _hardening_helpers import BACKENDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mithril.models import IOKey, Linear, Model, Relu
from mithril.plugins.lookup import backend_class

NATIVE = {"c", "ggml"}

PIECES = [
    '"', "'", '"""', "\n", "\r\n", "\r", "*/", "/*", "//", "#", "\\", "\\\n", "\x00", "??/", "??=", "%s", "{}",
    "é", "\u2028", "\U0001d518", "../", "/", " ", "\t", ";", "`", "$(touch pwned)", "\x1b[2J",
    "\nimport os; os.environ['MITHRIL_PWNED'] = '1'\n",
    "*/\n#error injected\n/*",
    '";\n#error injected\nchar *x = "',
    "\n#error injected\n",
]  # fmt: skip

fragment = st.one_of(st.sampled_from(PIECES), st.text(min_size=1, max_size=4))
hostile = st.builds(
    lambda parts, repeat: "".join(parts) * repeat,
    st.lists(fragment, min_size=1, max_size=8),
    st.sampled_from([1, 1, 1, 200]),  # sometimes well over 1,000 characters
)


def _model(names: list[str], root: str | None = None) -> tuple[Model, str, str]:
    block_a, block_b, key_in, key_out = names
    key_in, key_out = "in" + key_in, "out" + key_out  # distinct, non-empty keys (and block names)
    block_a, block_b = "a" + block_a, "b" + block_b
    model = Model(name=root)
    model |= Linear(3, name=block_a)(input=key_in)
    model += Relu(name=block_b)(output=IOKey(key_out))
    return model, key_in, key_out


def _check(backend_name: str, names: list[str], short_names: bool, tmp_path: object = None) -> None:
    os.environ.pop("MITHRIL_PWNED", None)
    model, key_in, key_out = _model(names)
    backend = backend_class(backend_name)(dtype=ml.float32)
    pm = ml.compile(model, backend, shapes={key_in: [2, 4]}, use_short_namings=short_names, inference=True)
    params = pm.randomize_params(seed=1)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    out = backend.to_numpy(pm.evaluate(params, {key_in: backend.array(x)})[key_out])
    weight, bias = (backend.to_numpy(params[k]) for k in pm.param_keys)
    np.testing.assert_allclose(out, np.maximum(x @ weight.T + bias, 0), rtol=1e-5, atol=1e-6)
    assert "MITHRIL_PWNED" not in os.environ


@pytest.mark.parametrize("backend_name", [b for b in BACKENDS if b not in NATIVE])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(hostile, min_size=4, max_size=4), short_names=st.booleans())
def test_hostile_names_are_inert_on_python_backends(backend_name: str, names: list[str], short_names: bool) -> None:
    _check(backend_name, names, short_names)


@pytest.mark.parametrize("backend_name", sorted(NATIVE & set(BACKENDS)))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(hostile, min_size=4, max_size=4), short_names=st.booleans())
def test_hostile_names_are_inert_on_native_backends(backend_name: str, names: list[str], short_names: bool) -> None:
    _check(backend_name, names, short_names)


@pytest.mark.skipif("c" not in BACKENDS or shutil.which("cc") is None, reason="needs the C backend and cc")
@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(hostile, min_size=4, max_size=4), short_names=st.booleans())
def test_exported_c_program_with_hostile_names_builds_and_reproduces(
    names: list[str], short_names: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, key_in, key_out = _model(names)
    backend = ml.CBackend(dtype=ml.float32, threads=1)
    pm = ml.compile(model, backend, shapes={key_in: [2, 4]}, use_short_namings=short_names, inference=True)
    params = pm.randomize_params(seed=2)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    expected = pm.evaluate(params, {key_in: x})[key_out]
    out_dir = tmp_path_factory.mktemp("export") / "program"
    result = pm.export(out_dir, params)
    written = sorted(p.name for p in out_dir.iterdir())
    assert all(len(name.encode()) <= 120 and "/" not in name and not name.startswith(".") for name in written)
    build = (out_dir / "BUILD").read_text().split()
    subprocess.run([shutil.which("cc"), *build[1:], "-o", "model"], cwd=out_dir, check=True, capture_output=True)
    x.tofile(out_dir / result.inputs[key_in])
    run = subprocess.run([str(out_dir / "model"), str(out_dir)], check=True, capture_output=True)
    assert run.returncode == 0
    got = np.fromfile(out_dir / result.outputs[key_out], dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _dot_skeleton(dot: str) -> str:
    """The DOT text with every quoted string replaced by ``""`` (a backslash escapes the next character, as in
    Graphviz's scanner): what Graphviz reads as statements and attributes rather than text."""
    out, i = [], 0
    while i < len(dot):
        if dot[i] != '"':
            out.append(dot[i])
            i += 1
            continue
        i += 1
        while dot[i] != '"':  # an unterminated string is an IndexError: a failure
            i += 2 if dot[i] == "\\" else 1
        out.append('""')
        i += 1
    return "".join(out)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag if not attrs else f"{tag} {attrs}")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(hostile, min_size=5, max_size=5))
def test_hostile_names_are_text_in_pictures_and_reports(
    names: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, _, _ = _model(names[:4], root=names[4])
    plain, _, _ = _model(["", "", "", ""], root="model")
    # every user string is one quoted string: the same statements and attributes as with plain names
    assert _dot_skeleton(ml.to_dot(model)) == _dot_skeleton(ml.to_dot(plain))
    lines: list[str] = []
    model.summary(print_fn=lines.append)
    (text,) = lines
    assert all(line.isprintable() for line in text.split("\n"))  # no ESC, NUL, CR, bidi override, ...
    if "numpy" in BACKENDS:  # a compiled model's summary names blocks by path (its largest activation too)
        pm = ml.compile(model, backend_class("numpy")(), shapes={"in" + names[2]: [2, 4]}, use_short_namings=False)
        compiled: list[str] = []
        pm.summary(print_fn=compiled.append)
        assert all(line.isprintable() for line in compiled[0].split("\n")), compiled[0]
    if importlib.util.find_spec("rich") is not None:
        assert len([line for line in text.split("\n") if line.startswith("│")]) == 2  # one line a block
    parser = _Tags()
    parser.feed(model._repr_html_())
    assert set(parser.tags) <= {"div", "p", "b", "table", "thead", "tbody", "tr", "th", "td", "code", "br"}
    assert parser.tags.count("tr") == 3  # the header and the two blocks
    if shutil.which("dot") is None:
        return
    path = model.plot(tmp_path_factory.mktemp("plot") / "model.svg")
    for svg in (path.read_text(encoding="utf-8"), model._repr_svg_()):
        root = ET.fromstring(svg)
        classes = [el.get("class") for el in root.iter("{http://www.w3.org/2000/svg}g")]
        assert classes.count("node") == 6 and classes.count("edge") == 5  # input, weight, bias, 2 blocks, output
        assert not list(root.iter("{http://www.w3.org/2000/svg}a"))  # no link made from user text
