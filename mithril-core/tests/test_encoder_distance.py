"""Mithril's EncoderDistanceMatrix and robust Power against SciPy's Minkowski distances and NumPy."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.models import EncoderDistanceMatrix, IOKey, Model, Power
from scipy.spatial.distance import cdist


def _order(norm: float) -> float:
    """NormModifier's triangle wave into [1, 5]."""
    return 4.0 * (1.0 - 2.0 * abs(((norm - 1.0) % 8.0) / 8.0 - 0.5)) + 1.0


@pytest.mark.parametrize("norm", [2.0, 3.5, 11.0])
@pytest.mark.parametrize("final", [True, False])
def test_encoder_distance_matrix_is_minkowski(norm: float, final: bool) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    b[0] = a[0]  # a zero distance: the robust root is 0 there, with finite gradients
    model = Model()
    model |= EncoderDistanceMatrix(get_final_distance=final)(
        input1="a", input2="b", norm="norm", output=IOKey("output")
    )
    pm = ml.compile(
        model, ml.NumpyBackend(dtype=ml.float64), shapes={"a": [4, 3], "b": [5, 3]}, trainable_keys={"a", "b", "norm"}
    )
    out, grads = pm.evaluate({"a": a, "b": b, "norm": np.array(norm)}, output_gradients={"output": np.ones((4, 5))})
    p = _order(norm)
    expected = cdist(a, b, "minkowski", p=p)
    np.testing.assert_allclose(out["output"], expected if final else expected**p, rtol=1e-10, atol=1e-12)
    assert all(np.all(np.isfinite(g)) for g in grads.values())


def test_robust_power_is_linear_below_the_threshold() -> None:
    model = Model()
    model |= Power(robust=True)(base="x", exponent="e", output=IOKey("output"))
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes={"x": [4], "e": [4]}, trainable_keys={"x", "e"})
    # the threshold is the dtype's smallest normal number (float64 here); 1e-310 ** 0.001 is steeper than the line
    x, e = np.array([0.0, -8.0, 1e-310, 1e-310]), np.array([1 / 3, 1 / 3, 0.001, 3.0])
    out, grads = pm.evaluate({"x": x, "e": e}, output_gradients={"output": np.ones(4)})
    tiny = float(np.finfo(np.float64).tiny)
    np.testing.assert_allclose(out["output"], [0.0, 2.0, 1e-310 / tiny, 0.0], rtol=1e-12)
    assert np.all(np.isfinite(grads["x"])) and np.all(np.isfinite(grads["e"]))
