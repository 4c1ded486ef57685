"""Graph pictures: ml.to_dot, model.plot / pm.plot with the real Graphviz `dot`, and `mithril graph`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import mithril as ml
import pytest
from mithril.cli import main as cli_main
from mithril.display import GraphvizNotFound, to_dot
from mithril.display._tree import ModelView
from mithril.models import IOKey, Linear, Model, Relu

pytest.importorskip("graphviz", reason="the graphviz Python package is not installed (pip install 'mithril-core[viz]')")
DOT = shutil.which("dot")
needs_dot = pytest.mark.skipif(
    DOT is None,
    reason="Graphviz's `dot` is not installed (apt-get install graphviz); .ci/run installs it where apt is available",
)


def _svg_texts(svg: bytes | str) -> list[str]:
    root = ET.fromstring(svg)
    return ["".join(el.itertext()) for el in root.iter("{http://www.w3.org/2000/svg}text")]


def _block_names(model, depth=None):
    return {block.name for block in ModelView(model).tree.walk(depth)}


def test_dot_of_the_seed_cnn_has_blocks_shapes_and_styled_keys(seed_cnn):
    dot = ml.to_dot(seed_cnn)
    for name in _block_names(seed_cnn):
        assert f'label="{name}\n' in dot
    assert 'label="[batch, 16, height_1, width_1]"' in dot  # edges carry shapes
    assert "i0 [label=\"input\" fillcolor=\"#cfe2ff\" shape=ellipse" in dot  # user text: always a quoted string
    assert dot.count("shape=cylinder") == 6  # three weights and three biases
    assert "[label=\"output\" fillcolor=\"#d1f0d6\"" in dot
    assert "subgraph cluster" not in dot  # nothing to open: every block is one primitive
    assert "shape=cylinder" not in ml.to_dot(seed_cnn, params=False)


def test_compiled_dot_has_concrete_shapes_and_compiled_names(seed_cnn, numpy_backend):
    pm = ml.compile(seed_cnn, numpy_backend, shapes={"input": [2, 3, 32, 32]})
    dot = to_dot(pm)
    assert 'label="[2, 32, 8, 8]"' in dot and 'label="[2, 10]"' in dot
    assert 'label="weight_2\n[10, 2048]"' in dot
    assert "NumpyBackend, float32" in dot


def test_gpt_block_clusters_follow_depth(gpt_block):
    shallow, middle, deep = to_dot(gpt_block, depth=1), to_dot(gpt_block, depth=3), to_dot(gpt_block, depth=4)
    assert "cluster" not in shallow and 'label="transformer\nModel"' in shallow
    assert 'label="h.0 (Model)"' in middle and 'label="attn\nModel"' in middle  # depth 3: attn is a box
    assert 'label="attn (Model)"' in deep and 'label="attn\n' not in deep  # depth 4: opened
    # tied embedding: one parameter node feeding the embedding and the LM head
    assert middle.count('label="transformer.wte.weight\n[100, 32]"') == 1


def test_hostile_names_are_labels_not_dot(tmp_path):
    model = Model()
    name = 'evil"] ; x -> y [label="\\\\n\nnewline'
    model |= Linear(4, name=name)(input=IOKey("x", shape=[2, 3]))
    model += Relu()
    dot = to_dot(model)
    if DOT:
        svg = subprocess.run([DOT, "-Tsvg"], input=dot.encode(), capture_output=True, check=True).stdout
        texts = _svg_texts(svg)
        assert 'evil"] ; x -> y [label="\\\\n' in texts and "newline" in texts
        classes = [el.get("class") for el in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}g")]
        # x, weight, bias, the linear box, relu, output: no node or edge was injected by the name
        assert classes.count("node") == 6 and classes.count("edge") == 5


@needs_dot
def test_plot_writes_svg_naming_every_block_of_the_seed_cnn(seed_cnn, tmp_path):
    path = seed_cnn.plot(tmp_path / "cnn.svg")
    assert path == tmp_path / "cnn.svg"
    texts = set(_svg_texts(path.read_bytes()))
    assert _block_names(seed_cnn) <= texts
    assert {"input", "output", "[batch, 2048]"} <= texts


@needs_dot
def test_plot_writes_svg_naming_every_block_of_a_gpt2_block(gpt_block, tmp_path):
    depth = ModelView(gpt_block).tree.max_depth() + 1
    path = gpt_block.plot(tmp_path / "gpt.svg", depth=depth)
    texts = set(_svg_texts(path.read_bytes()))
    expected = _block_names(gpt_block)
    assert {"ln_1", "attn", "c_attn", "c_proj", "ln_2", "mlp", "c_fc", "wte", "wpe", "ln_f"} <= expected
    named = {
        name for name in expected if any(t == name or t.startswith(name + " (") for t in texts)
    }  # boxes or clusters
    assert named == expected, sorted(expected - named)


@needs_dot
def test_png_and_notebook_svg(seed_cnn, numpy_backend, tmp_path):
    pm = ml.compile(seed_cnn, numpy_backend, shapes={"input": [1, 3, 32, 32]})
    png = pm.plot(tmp_path / "cnn.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    svg = pm._repr_svg_()
    assert svg.lstrip().startswith("<?xml") and "conv2d_1" in svg
    assert "[1, 16, 32, 32]" in _svg_texts(svg)


def test_missing_dot_is_a_clear_error(seed_cnn, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on PATH
    with pytest.raises(GraphvizNotFound, match=r"apt-get install graphviz"):
        seed_cnn.plot(tmp_path / "cnn.svg")
    assert seed_cnn._repr_svg_() is None  # notebooks fall back to the HTML table
    assert not (tmp_path / "cnn.svg").exists()


def test_plot_refuses_unknown_formats(seed_cnn, tmp_path):
    with pytest.raises(ml.errors.ArgumentError, match=r"\.svg, \.png or \.pdf"):
        seed_cnn.plot(tmp_path / "cnn.jpg")


@needs_dot
def test_cli_graph_writes_the_picture(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_cnn.py").write_text(
        "from mithril.models import Model, Conv2d, Relu, Flatten, Linear\n"
        "def build():\n"
        "    m = Model()\n"
        "    m |= Conv2d(in_channels=3, out_channels=4, kernel_size=3)\n"
        "    m += Relu()\n"
        "    m += Flatten()\n"
        "    m += Linear(5)\n"
        "    return m\n"
    )
    monkeypatch.chdir(tmp_path)
    assert cli_main(["graph", "my_cnn:build", "--shape", "input=1,3,32,32", "-o", "model.svg"]) == 0
    assert "wrote model.svg" in capsys.readouterr().out
    texts = _svg_texts((tmp_path / "model.svg").read_bytes())
    assert {"conv2d_0", "relu_0", "flatten_0", "linear_0", "[1, 4, 30, 30]", "[1, 5]"} <= set(texts)
    assert cli_main(["graph", "my_cnn:build", "--depth", "1"]) == 0
    assert capsys.readouterr().out.startswith("digraph")


def test_cli_graph_in_a_subprocess(tmp_path):
    """The installed console script, as a user runs it."""
    script = Path(sys.executable).with_name("mithril")
    if not script.exists():
        pytest.skip("the mithril console script is not installed next to this Python")
    (tmp_path / "one.py").write_text("from mithril.models import Linear\nmodel = Linear(3)\n")
    result = subprocess.run(
        [str(script), "graph", "one:model", "--shape", "input=2,4"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert 'label="[2, 3]"' in result.stdout
