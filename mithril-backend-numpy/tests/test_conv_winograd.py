"""The NumPy backend's Winograd F(2x2, 3x3) convolution (3x3, stride 1, at least 8x8 outputs and 16
channels) against PyTorch in float64: odd sizes, padding 0-2 and asymmetric, batches, bias, float32 and
float64, the input gradient (a convolution of the output gradient, so Winograd too), and the work arrays
kept between calls (never part of a result; a second call with other data is unaffected)."""

from __future__ import annotations

import numpy as np
import pytest
from mithril.extend import WindowGeometry

from mithril_backend_numpy.ops import _conv

torch = pytest.importorskip("torch", reason="PyTorch computes the references")

# (batch, in channels, height, width, out channels, padding)
CASES = [
    (1, 16, 16, 16, 16, 1),
    (2, 16, 17, 13, 24, 1),
    (1, 32, 9, 20, 16, 0),
    (3, 17, 15, 16, 19, 2),
    (1, 16, 16, 15, 20, ((0, 1), (2, 1))),
]


def _torch_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, padding) -> np.ndarray:
    pads = (padding,) * 4 if isinstance(padding, int) else (*padding[1], *padding[0])
    xt = torch.nn.functional.pad(torch.from_numpy(x).double(), pads)
    bt = None if b is None else torch.from_numpy(b).double()
    return torch.nn.functional.conv2d(xt, torch.from_numpy(w).double(), bt).numpy()


@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
@pytest.mark.parametrize("case", CASES)
def test_winograd_matches_torch(case, dtype, tol) -> None:
    n, c, h, w, o, padding = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    weight = rng.standard_normal((o, c, 3, 3)).astype(dtype)
    bias = rng.standard_normal(o).astype(dtype)
    geometry = WindowGeometry.of((3, 3), stride=1, padding=padding, dilation=1, size=(h, w))
    assert _conv._winograd_pays(x, weight, geometry, 1)
    got = _conv.conv_forward(x, weight, bias, stride=1, padding=padding, dilation=1, groups=1)
    ref = _torch_conv(x, weight, bias, padding)
    assert got.dtype == dtype and got.shape == ref.shape and got.flags.c_contiguous
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


def test_small_or_grouped_convolutions_do_not_take_winograd() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 16, 7, 7)).astype(np.float32)
    geometry = WindowGeometry.of((3, 3), stride=1, padding=1, dilation=1, size=(7, 7))
    assert not _conv._winograd_pays(x, np.ones((16, 16, 3, 3), np.float32), geometry, 1)  # 16 tiles
    big = WindowGeometry.of((3, 3), stride=1, padding=1, dilation=1, size=(16, 16))
    assert not _conv._winograd_pays(x, np.ones((8, 16, 3, 3), np.float32), big, 1)  # 8 output channels
    assert not _conv._winograd_pays(x, np.ones((16, 8, 3, 3), np.float32), big, 2)  # groups


def test_work_arrays_are_not_results() -> None:
    """Two calls of the same shape return different arrays whose values follow their own inputs, and
    writing into a result changes nothing the next call computes."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    x1, x2 = (rng.standard_normal((1, 16, 12, 12)).astype(np.float32) for _ in range(2))
    y1 = _conv.conv_forward(x1, w, None, stride=1, padding=1, dilation=1, groups=1)
    kept = y1.copy()
    y2 = _conv.conv_forward(x2, w, None, stride=1, padding=1, dilation=1, groups=1)
    assert not np.shares_memory(y1, y2)
    np.testing.assert_array_equal(y1, kept)
    y2[...] = np.nan
    y3 = _conv.conv_forward(x1, w, None, stride=1, padding=1, dilation=1, groups=1)
    np.testing.assert_array_equal(y3, kept)
    im2col = _conv.conv_forward(x1, w, None, stride=2, padding=1, dilation=1, groups=1)  # im2col's work array
    assert np.abs(im2col - _torch_conv(x1, w, None, 1)[:, :, ::2, ::2]).max() < 1e-4


def test_input_gradient_of_a_winograd_convolution() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 16, 14, 13))
    w = rng.standard_normal((20, 16, 3, 3))
    g = rng.standard_normal((2, 20, 14, 13))
    got = _conv.conv_grad_input(g, w, x, stride=1, padding=1, dilation=1, groups=1)
    xt = torch.from_numpy(x).requires_grad_(True)
    torch.nn.functional.conv2d(xt, torch.from_numpy(w), padding=1).backward(torch.from_numpy(g))
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
