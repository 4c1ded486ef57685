"""``mithril demo`` trains on every installed backend and agrees with NumPy."""

from mithril.demo import run_demo


def test_demo_trains_and_backends_agree():
    lines: list[str] = []
    rows = run_demo(steps=60, print_fn=lines.append)
    numpy_row = next(r for r in rows if r.backend == "NumpyBackend")
    assert numpy_row.final_loss < 0.1  # well-separated blobs are learnt in a few dozen steps
    assert any("compile ms" in line for line in lines)
    for row in rows:
        assert row.max_deviation < 1e-2 and row.cnn_deviation < 1e-3, row
