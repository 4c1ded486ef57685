"""Mithril-NumPy vs hand-written NumPy on an MLP 784-512-256-10, batch 128, float32.

Forward and forward+backward, measured in one process. Target ratio <= 1.10.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import mithril as ml  # noqa: E402
from _timing import interleaved, report  # noqa: E402
from mithril.models import MLP  # noqa: E402

SIZES = (784, 512, 256, 10)
BATCH = 128


def hand_written(params: dict[str, np.ndarray]):
    w0, b0, w1, b1, w2, b2 = (params[k] for k in ("weight0", "bias0", "weight1", "bias1", "weight2", "bias2"))

    def forward(x):
        h0 = np.maximum(x @ w0.T + b0, 0)
        h1 = np.maximum(h0 @ w1.T + b1, 0)
        return h1 @ w2.T + b2

    def forward_backward(x, g):
        z0 = x @ w0.T + b0
        h0 = np.maximum(z0, 0)
        z1 = h0 @ w1.T + b1
        h1 = np.maximum(z1, 0)
        out = h1 @ w2.T + b2
        grads = {"weight2": g.T @ h1, "bias2": g.sum(0)}
        g1 = np.where(z1 > 0, g @ w2, 0)
        grads |= {"weight1": g1.T @ h0, "bias1": g1.sum(0)}
        g0 = np.where(z0 > 0, g1 @ w1, 0)
        grads |= {"weight0": g0.T @ x, "bias0": g0.sum(0)}
        return out, grads

    return forward, forward_backward


def main() -> None:
    backend = ml.NumpyBackend(dtype=ml.float32)
    model = MLP(input_size=SIZES[0], hidden_sizes=list(SIZES[1:-1]), output_size=SIZES[-1])
    pm = ml.compile(model, backend, shapes={"input": [BATCH, SIZES[0]]})
    params = pm.randomize_params(seed=0)
    x = backend.randn(BATCH, SIZES[0])
    g = backend.randn(BATCH, SIZES[-1])
    forward, forward_backward = hand_written(params)

    out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})
    ref_out, ref_grads = forward_backward(x, g)
    assert np.allclose(out["output"], ref_out, atol=1e-4)
    assert all(np.allclose(grads[k], ref_grads[k], atol=1e-3) for k in ref_grads)

    fwd = interleaved({"hand-written NumPy": lambda: forward(x), "Mithril NumPy": lambda: pm.evaluate(params, {"input": x})})
    report(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, forward", fwd, "hand-written NumPy", 1.10)
    both = interleaved(
        {
            "hand-written NumPy": lambda: forward_backward(x, g),
            "Mithril NumPy": lambda: pm.evaluate(params, {"input": x}, output_gradients={"output": g}),
        }
    )
    report(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, forward+backward", both, "hand-written NumPy", 1.10)


if __name__ == "__main__":
    main()
