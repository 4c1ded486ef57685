"""``mithril demo --plot``: the loss curves of every backend in one matplotlib figure."""

from __future__ import annotations

from pathlib import Path

import mithril as ml
import numpy as np
import pytest
from mithril.demo import _train, classification_data, plot_losses
from mithril.errors import ArgumentError
from mithril.plugins.lookup import available_backends, backend_class

pytest.importorskip("matplotlib")


def _rows(steps: int = 8) -> list:
    data = classification_data(n=64)
    names = [n for n in ("numpy", "jax", "torch") if n in available_backends()]
    return [
        _train(backend_class(name)(dtype=ml.float32, seed=0), steps, 0.1, data, lambda line: None)[0] for name in names
    ]


def test_plot_has_one_curve_per_backend_with_its_losses(tmp_path: Path) -> None:
    rows = _rows()
    figure = plot_losses(rows, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = figure.axes[0].get_lines()
    assert [line.get_label() for line in lines] == [row.backend for row in rows]
    for line, row in zip(lines, rows, strict=True):
        assert len(row.losses) == 8 and row.losses[-1] < row.losses[0]  # it trained
        np.testing.assert_array_equal(line.get_ydata(), row.losses)
    if len(rows) > 1:  # the same numbers everywhere: the curves lie on each other
        np.testing.assert_allclose(rows[0].losses, rows[1].losses, rtol=1e-4)


def test_unwritable_plot_path_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="missing-dir"):
        plot_losses(_rows(steps=2), tmp_path / "missing-dir" / "loss.png")


def test_cli_takes_plot() -> None:
    from mithril.cli import build_parser

    args = build_parser().parse_args(["demo", "--steps", "3", "--plot", "loss.svg"])
    assert args.plot == "loss.svg" and args.steps == 3
