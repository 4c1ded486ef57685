"""Hardening of the ways to see a model and of the command line (issue 25): user text reaches Graphviz only
as quoted DOT strings (no HTML-like labels, no injected nodes or links, a failing ``dot`` is a MithrilError),
the ``mithril`` command names what it expected for bad targets and options, the demo fails when its
backends disagree or its options make no sense, ``summary()`` counts what the compiled model trains and
prints once, ``model.shapes`` names unknown dims as the summary does, and the packages require each other
with version ranges. Each test failed before this work."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import mithril as ml
import numpy as np
import pytest
from mithril.cli import main as cli_main
from mithril.display import render, summarize, to_dot
from mithril.errors import ArgumentError, MithrilError
from mithril.models import Add, IOKey, Linear, Model, Relu
from mithril.plugins.lookup import available_backends

ROOT = Path(__file__).resolve().parents[2]
DOT = shutil.which("dot")
needs_dot = pytest.mark.skipif(DOT is None, reason="Graphviz's `dot` is not installed (apt-get install graphviz)")
needs_numpy = pytest.mark.skipif("numpy" not in available_backends(), reason="needs mithril-backend-numpy")
SVG = "{http://www.w3.org/2000/svg}"
INTERNAL_ID = re.compile(r"\b[dV]\d+\b")  # how the shape solver names unknown dims and variadics internally

Capture = pytest.CaptureFixture[str]
HTML_KEY = '<<table><tr><td href="javascript:alert(1)">x</td></tr></table>>'
DOT_NAME = 'root" ]; evil [URL="javascript:alert(2)" label="injected"]; a [label="'


def _hostile_model() -> Model:
    model = Model(name=DOT_NAME)
    model |= Linear(3)(input="x")
    model += Relu()(output=IOKey(HTML_KEY))
    return model


def _svg_facts(svg: str | bytes) -> tuple[list[str], int, int, list[str]]:
    """(texts, node count, edge count, links: ``<a>`` elements and attribute values naming ``javascript:``)
    of a Graphviz SVG."""
    root = ET.fromstring(svg)
    texts = ["".join(el.itertext()) for el in root.iter(f"{SVG}text")]
    classes = [el.get("class") for el in root.iter(f"{SVG}g")]
    links = [el.tag for el in root.iter(f"{SVG}a")]
    links += [value for el in root.iter() for value in el.attrib.values() if "javascript:" in value]
    return texts, classes.count("node"), classes.count("edge"), links


# -- 1. pictures: every user string is a quoted DOT string ---------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("<b>x</b>", '"<b>x</b>"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("trailing\\", '"trailing\\\\"'),
        ("\\N \\G \\l", '"\\\\N \\\\G \\\\l"'),  # Graphviz's escapes stay text
        ("a\nb\r\nc", '"a\nb\nc"'),  # line breaks of the label, never a backslash-newline continuation
        ("nul\x00esc\x1b[2J", '"nul\\\\x00esc\\\\x1b[2J"'),  # shown, not sent to dot
        ("lone \udc80", '"lone \\\\udc80"'),  # not encodable as UTF-8: shown as its escape
    ],
)
def test_dot_id_is_always_a_quoted_inert_string(text: str, expected: str) -> None:
    from mithril.compiler.codegen.escape import dot_id

    assert dot_id(text) == expected


def test_dot_text_has_no_html_label_and_an_escaped_graph_name() -> None:
    dot = to_dot(_hostile_model())
    assert "label=<" not in dot and "=<<" not in dot  # no HTML-like ID anywhere
    quoted_name = 'root\\" ]; evil [URL=\\"javascript:alert(2)\\" label=\\"injected\\"]; a [label=\\"'
    assert dot.startswith(f'digraph "{quoted_name}" {{')
    assert "javascript\":\"alert" not in dot  # no node:port split of a user key


@needs_dot
def test_html_like_output_key_and_dot_like_model_name_are_text_in_the_svg(tmp_path: Path) -> None:
    model = _hostile_model()
    written = model.plot(tmp_path / "model.svg").read_text()
    notebook = model._repr_svg_()
    for svg in (written, notebook):
        texts, nodes, edges, links = _svg_facts(svg)
        assert not links  # no element or attribute made from user text (it is only the text of a label)
        assert nodes == 6 and edges == 5  # x, weight, bias, linear, relu, the output: nothing injected
        assert HTML_KEY in texts and "injected" not in texts
        assert texts[0] == DOT_NAME  # the graph's title is the name, as text


@needs_dot
def test_trailing_backslash_key_is_drawn(tmp_path: Path) -> None:
    model = Model()
    model |= Linear(3)(input="x")
    model += Relu()(output=IOKey("y\\"))
    texts, nodes, _, _ = _svg_facts(model.plot(tmp_path / "model.svg").read_bytes())
    assert "y\\" in texts and nodes == 6


@needs_dot
def test_a_failing_dot_run_is_a_mithril_error_naming_the_command_and_its_stderr() -> None:
    with pytest.raises(MithrilError, match=r"dot -Kdot -Tsvg.*exit status 1.*syntax error in line 1") as info:
        render("digraph { a -> }")
    assert not isinstance(info.value, subprocess.CalledProcessError)


# -- 3. the command line -------------------------------------------------------------------------------
@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "mods.py").write_text(
        "from mithril.models import Linear, Model\n"
        "count = 3\n"
        "def build():\n"
        "    model = Model()\n"
        "    model |= Linear(16)(input='input')\n"
        "    return model\n"
        "def build_number():\n"
        "    return 5\n"
    )
    monkeypatch.chdir(tmp_path)
    return "mods"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["graph", "mods"], r"mithril graph: MODEL must be 'module:attribute' .*got 'mods'"),
        (["graph", ".mods:build"], r"mithril graph: MODEL must be 'module:attribute' .*got '\.mods:build'"),
        (
            ["graph", "mods:count"],
            r"mithril graph: MODEL mods:count must be a Model or a function returning one, got 3",
        ),
        (["graph", "mods:build_number"], r"mithril graph: what mods:build_number\(\) returns must be a Model, got 5 "),
        (
            ["graph", "mods:nothing"],
            r"module 'mods' has no attribute 'nothing'; its models and functions: build, build_nu",
        ),
        (["graph", "no_such_module:build"], r"cannot import module 'no_such_module'"),
        (
            ["graph", "mods:build", "--shape", "input"],
            r"--shape must be KEY=D1,D2,\.\.\. \(non-negative int.*got 'input'",
        ),
        (["graph", "mods:build", "--shape", "input=a,b"], r"--shape must be KEY=D1,D2,\.\.\..*got 'input=a,b'"),
        (["export", "mods:build", "out", "--shape", "input"], r"mithril export: --shape must be KEY=D1,D2"),
    ],
)
def test_cli_names_what_it_expected(user_module: str, argv: list[str], message: str, capsys: Capture) -> None:
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "_parent" not in err and not INTERNAL_ID.search(err) and "ArgumentError" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--steps", "-1"], r"run_demo: steps must be a positive int, got -1"),
        (["demo", "--steps", "0"], r"run_demo: steps must be a positive int, got 0"),
        (["demo", "--lr", "nan"], r"run_demo: lr must be a finite number > 0, got nan"),
        (["demo", "--lr", "inf"], r"run_demo: lr must be a finite number > 0, got inf"),
        (["demo", "--lr", "0"], r"run_demo: lr must be a finite number > 0, got 0.0"),
    ],
)
def test_demo_refuses_options_that_make_no_sense_before_training(
    argv: list[str], message: str, capsys: Capture
) -> None:
    assert cli_main(argv) == 1
    captured = capsys.readouterr()
    assert re.search(message, captured.err), captured.err
    assert "training on" not in captured.out


def test_demo_refuses_a_learning_rate_no_float_holds() -> None:
    """``math.isfinite(10**400)`` raised a raw ``OverflowError``."""
    from mithril.demo import run_demo

    with pytest.raises(ArgumentError, match=r"run_demo: lr must be a finite number > 0, got 10+\.\.\."):
        run_demo(steps=1, lr=10**400)


@needs_numpy
def test_demo_fails_when_a_backend_disagrees_beyond_the_tolerance() -> None:
    """Real training runs: one row trained as the others, one trained with another learning rate (a
    backend that computes something else), one that diverged. Only the last two are failures."""
    from mithril.demo import DEVIATION_TOLERANCE, _train, classification_data, disagreements

    data = classification_data(n=64)
    quiet = lambda line: None  # noqa: E731
    rows = {}
    for label, lr in (("reference", 0.1), ("same", 0.1), ("other", 0.5), ("diverged", 1e30)):
        backend = ml.NumpyBackend(dtype=ml.float32, seed=0)
        with np.errstate(over="ignore", invalid="ignore"):  # lr=1e30 overflows, as it should
            row, logits, cnn_out = _train(backend, 5, lr, data, quiet)
        row.backend = label
        rows[label] = (row, logits, cnn_out)
    reference = rows["reference"]
    for row, logits, cnn_out in rows.values():
        row.max_deviation = float(np.abs(logits - reference[1]).max())
        row.cnn_deviation = float(np.abs(cnn_out - reference[2]).max())
    assert rows["same"][0].max_deviation == 0.0 and rows["other"][0].max_deviation > 0.1
    assert not math.isfinite(rows["diverged"][0].final_loss)
    failures = disagreements([row for row, _, _ in rows.values()])
    assert [f.split(":")[0] for f in failures] == ["other", "diverged"]
    assert f"more than the tolerance {DEVIATION_TOLERANCE:.0e}" in failures[0]
    assert "training diverged" in failures[1] and "smaller --lr" in failures[1]


# -- 4. reports ------------------------------------------------------------------------------------------
@needs_numpy
def test_compiled_summary_counts_parameters_declared_with_trainable_keys() -> None:
    model = Model()
    model |= Add()(left=IOKey("x", shape=[2, 3]), right=IOKey("w", shape=[2, 3]), output=IOKey("y"))
    pm = ml.compile(model, ml.NumpyBackend(), trainable_keys={"w"})
    assert pm.param_keys == ["w"]
    summary = summarize(pm)
    assert summary.counts["trainable"] == 6
    details = dict([*summary.details, *summary.totals])
    assert details["parameters"] == "w [2, 3]" and details["data"] == "x [2, 3]"
    assert details["trainable parameters"] == "6 (24 B as float32)"
    assert details["parameter memory"] == "24 B"


@needs_numpy
def test_compiled_summary_does_not_count_a_weight_compiled_as_data() -> None:
    model = Model()
    model |= Linear(4)(input=IOKey("x", shape=[2, 3]), weight="w")
    pm = ml.compile(model, ml.NumpyBackend(), data_keys={"w"})
    assert summarize(pm).counts["trainable"] == 4  # the bias only


def test_model_shapes_name_unknown_dims_as_the_summary_does() -> None:
    model = Model()
    model |= Linear(dimension=16)(input=IOKey("tokens", shape=["batch", "seq", 8]))
    assert model.shapes["output"] == ["batch", "seq", 16]
    assert model.shapes["tokens"] == ["batch", "seq", 8]
    row = summarize(model).rows[0]
    assert row[2:4] == ("[batch, seq, 8]", "[batch, seq, 16]")
    linear = Linear(3)
    assert linear.shapes["input"] == ["...", "input_1"] and not INTERNAL_ID.search(str(linear.shapes))


@needs_numpy
@pytest.mark.parametrize("compiled", [False, True], ids=["logical", "compiled"])
def test_summary_prints_once_and_returns_none(compiled: bool, capsys: Capture) -> None:
    model = Model()
    model |= Linear(4)(input=IOKey("x", shape=[2, 3]))
    shown = ml.compile(model, ml.NumpyBackend()) if compiled else model
    assert shown.summary() is None
    printed = capsys.readouterr().out
    assert printed.count("trainable parameters: 16") == 1
    lines: list[str] = []
    assert shown.summary(print_fn=lines.append) is None
    assert lines == [str(shown)] and capsys.readouterr().out == ""
    with pytest.raises(ArgumentError, match=r"summary: print_fn must be a callable"):
        shown.summary(print_fn=None)


# -- 5. packages -----------------------------------------------------------------------------------------
def _projects() -> dict[str, dict]:
    projects = {}
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    for path in sorted(ROOT.glob("mithril-*/pyproject.toml")):
        project = tomllib.loads(path.read_text())["project"]
        projects[project["name"]] = project
    return projects


def test_every_inter_package_requirement_has_a_compatible_range() -> None:
    from packaging.requirements import Requirement

    projects = _projects()
    assert {"mithril-core", "mithril-backend-numpy", "mithril-models"} <= set(projects)
    checked = 0
    for name, project in projects.items():
        extras = project.get("optional-dependencies", {})
        for line in [*project.get("dependencies", []), *(d for deps in extras.values() for d in deps)]:
            requirement = Requirement(line)
            if requirement.name not in projects:
                continue
            version = projects[requirement.name]["version"]
            assert requirement.specifier, f"{name}: {line!r} has no version range"
            assert requirement.specifier.contains(version), f"{name}: {line!r} excludes {requirement.name} {version}"
            major, minor = (int(part) for part in version.split(".")[:2])
            next_minor = f"{major}.{minor + 1}.0"
            assert not requirement.specifier.contains(next_minor), f"{name}: {line!r} admits {next_minor}"
            checked += 1
    assert checked >= 20  # the plugins' core requirement and core's extras


def test_core_has_a_testing_extra() -> None:
    from packaging.requirements import Requirement

    testing = {Requirement(line).name for line in _projects()["mithril-core"]["optional-dependencies"]["testing"]}
    assert testing == {"mithril-testing"}  # the test kit's own package (it declares pytest and hypothesis)


def test_graph_cli_prints_dot_with_quoted_labels(user_module: str, capsys: Capture) -> None:
    assert cli_main(["graph", "mods:build", "--shape", "input=2,4"]) == 0
    out = capsys.readouterr().out
    assert 'label="input"' in out and 'label="[2, 16]"' in out
