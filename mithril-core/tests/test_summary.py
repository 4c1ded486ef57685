"""model.summary() / pm.summary(): a table of blocks with readable shapes and parameter counts."""

from __future__ import annotations

import re
import sys

import mithril as ml
import pytest
from mithril.display import summarize
from mithril.errors import ArgumentError
from mithril.models import BatchNorm2d, IOKey, Linear, Model

INTERNAL_ID = re.compile(r"\bd\d+\b")  # how the shape solver names unknown dims internally


def _row(summary, name):
    return next(row for row in summary.rows if row[0].strip() == name)


def test_seed_cnn_rows_shapes_and_totals(seed_cnn):
    summary = summarize(seed_cnn)
    assert [row[0] for row in summary.rows] == [
        "conv2d_0",
        "relu_0",
        "max_pool2d_0",
        "conv2d_1",
        "relu_1",
        "max_pool2d_1",
        "flatten_0",
        "linear_0",
    ]
    assert _row(summary, "conv2d_0")[1:] == (
        "Conv2d",
        "[batch, 3, height, width]",
        "[batch, 16, height_1, width_1]",
        "448",
    )
    assert _row(summary, "max_pool2d_0")[3] == "[batch, 16, height_2, width_2]"
    assert _row(summary, "linear_0")[2:] == ("[batch, 2048]", "[batch, 10]", "20,490")
    # 16*3*3*3+16 + 32*16*3*3+32 + 10*2048+10
    assert summary.counts == {"trainable": 25578, "frozen": 0, "buffers": 0}
    text = summary.text()
    assert "trainable parameters: 25,578 (99.9 KiB as float32)" in text
    assert not INTERNAL_ID.search(text)


def test_str_print_and_summary_agree(seed_cnn, capsys):
    assert seed_cnn.summary() is None  # it prints, as Keras' does; the text is str(model) or print_fn's argument
    printed = capsys.readouterr().out
    assert printed.strip() == str(seed_cnn).strip()
    assert "conv2d_1" in printed and "Conv2d" in printed
    lines = []
    seed_cnn.summary(print_fn=lines.append)
    assert lines == [str(seed_cnn)]
    assert capsys.readouterr().out == ""


def test_depth_controls_rows(gpt_block):
    top = summarize(gpt_block, depth=1)
    assert [row[0] for row in top.rows] == ["transformer"]
    assert top.rows[0][2] == "[batch, seq]"
    assert top.rows[0][3] == "output: [batch, seq, 32], logits: [batch, seq, 100]"
    names = [row[0].strip() for row in summarize(gpt_block, depth=3).rows]
    assert names[:5] == ["transformer", "wte", "positions_0", "wpe", "add_0"]
    assert {"h.0", "ln_1", "attn", "ln_2", "mlp", "ln_f"} <= set(names)
    assert "c_attn" not in names and "c_attn" in {row[0].strip() for row in summarize(gpt_block, depth=4).rows}
    # indentation shows nesting
    assert _row(summarize(gpt_block, depth=3), "attn")[0] == "    attn"
    text = summarize(gpt_block, depth=6).text()
    assert not INTERNAL_ID.search(text)
    with pytest.raises(ArgumentError, match="depth"):
        summarize(gpt_block, depth=0)


def test_default_depth_is_readable(gpt_block):
    default = summarize(gpt_block)
    assert 5 <= len(default.rows) <= 40
    assert len(summarize(gpt_block, depth=6).rows) > 40


def test_gpt_parameter_count_matches_the_formula(gpt_block):
    d, vocab, block, layers = 32, 100, 64, 1
    per_layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    expected = vocab * d + block * d + layers * per_layer + 2 * d  # tied LM head counted once
    assert summarize(gpt_block).counts["trainable"] == expected


def test_unknown_sizes_are_reported_as_such():
    summary = summarize(Linear(3))
    assert summary.counts["trainable"] is None
    assert "unknown until the shapes are known" in summary.text()


def test_frozen_weights_are_counted_apart():
    model = Model()
    model |= Linear(4)(input=IOKey("x", shape=[2, 3]), weight="w")
    model.set_differentiability(w=False)
    summary = summarize(model)
    assert summary.counts == {"trainable": 4, "frozen": 12, "buffers": 0}
    assert "frozen parameters: 12 (48 B as float32)" in summary.text()


def test_batchnorm_buffers():
    model = Model()
    model |= BatchNorm2d(3)(input=IOKey("x", shape=[2, 3, 4, 4]))
    summary = summarize(model)
    assert summary.counts["buffers"] == 6  # running mean and variance
    assert summary.counts["trainable"] == 6  # weight and bias
    assert "buffers: 6 (24 B as float32)" in summary.text()


def test_compiled_summary_has_concrete_shapes_and_backend_facts(seed_cnn, numpy_backend):
    pm = ml.compile(seed_cnn, numpy_backend, shapes={"input": [4, 3, 32, 32]})
    summary = summarize(pm)
    assert _row(summary, "conv2d_0")[2:4] == ("[4, 3, 32, 32]", "[4, 16, 32, 32]")
    assert _row(summary, "flatten_0")[2:4] == ("[4, 32, 8, 8]", "[4, 2048]")
    details = dict(summary.details)
    assert details["dtype"] == "float32"
    assert details["backend"].startswith("NumpyBackend")
    assert details["compile time"].endswith("ms (23 primitive calls)")
    assert details["parameter memory"] == "99.9 KiB"  # 25,578 * 4 bytes
    # the first convolution's output is the largest tensor: 4*16*32*32 floats
    assert details["largest activation"].startswith("256.0 KiB (conv2d_0")
    assert details["data"] == "input [4, 3, 32, 32]"
    lines = []
    pm.summary(print_fn=lines.append)
    assert lines == [str(pm)]
    assert "<table>" in pm._repr_html_() and "conv2d_0" in pm._repr_html_()


def test_compiled_summary_keeps_run_time_dims_readable(gpt_block, numpy_backend):
    pm = ml.compile(gpt_block, numpy_backend, shapes={"input": [2, None]}, inference=True)
    summary = summarize(pm, depth=1)
    assert summary.rows[0][2] == "[2, seq]"
    details = dict(summary.details)
    assert details["data"] == "input [2, seq]"
    assert details["outputs"] == "output [2, seq, 100]"
    assert details["largest activation"] == "unknown (run-time shapes)"
    assert not INTERNAL_ID.search(summary.text())


def test_html_escapes_and_lists_every_row(seed_cnn):
    page = seed_cnn._repr_html_()
    assert page.count("<tr>") == 1 + 8
    assert "[batch, 3, height, width]" in page


def test_plain_text_without_rich(seed_cnn, monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.console", None)
    text = summarize(seed_cnn).text()
    lines = text.splitlines()
    assert lines[0] == "Model (Model)"
    assert any(line.startswith("conv2d_0") and line.endswith("448") for line in lines)
    assert "trainable parameters: 25,578 (99.9 KiB as float32)" in text
