"""Direct checks of the tricky NumPy ops against naive references and finite differences.

The full op x dtype conformance suite lives in ``mithril_testing``; these tests pin down convolution,
pooling and attention semantics (PyTorch conventions) independently of it.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from mithril_backend_numpy import NumpyBackend
from mithril_backend_numpy.ops import TABLE

ops = SimpleNamespace(**TABLE)  # the op table as attributes: ops.conv2d(...)

RNG = np.random.default_rng(1234)

CONV_CASES = [
    # stride, padding, dilation, groups, kernel
    (1, 0, 1, 1, (3, 3)),
    (1, 1, 1, 1, (3, 3)),
    (2, 1, 1, 1, (3, 3)),
    (2, (1, 2), 1, 2, (3, 2)),
    (1, ((0, 2), (1, 0)), 2, 1, (3, 3)),
    ((2, 1), "valid", (1, 2), 4, (2, 3)),
    (1, "same", 2, 2, (3, 3)),
    (1, 0, 1, 1, (1, 1)),
    (2, 0, 1, 2, (1, 1)),
]


def naive_conv2d(x, w, b, stride, padding, dilation, groups):
    """Loop-over-pixels reference with PyTorch semantics."""
    from mithril.primitives.catalogue.nn import conv_geometry

    (sh, sw), ((pt, pb), (pl, pr)), (dh, dw) = conv_geometry(
        {"stride": stride, "padding": padding, "dilation": dilation}, w.shape[2:]
    )
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt : pt + h, pl : pl + wd] = x
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b_ in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    patch = xp[
                        b_, g * cg : (g + 1) * cg, i * sh : i * sh + dh * kh : dh, j * sw : j * sw + dw * kw : dw
                    ]
                    out[b_, oc, i, j] = np.sum(patch * w[oc]) + (0 if b is None else b[oc])
    return out


def _conv_inputs(groups, kernel, n=2, c=4, o=4, size=(7, 8)):
    x = RNG.standard_normal((n, c, *size))
    w = RNG.standard_normal((o, c // groups, *kernel))
    return x, w, RNG.standard_normal(o)


def _attrs(stride, padding, dilation, groups):
    return {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}


@pytest.mark.parametrize("stride, padding, dilation, groups, kernel", CONV_CASES)
def test_conv2d_matches_naive_loop(stride, padding, dilation, groups, kernel):
    x, w, b = _conv_inputs(groups, kernel)
    attrs = _attrs(stride, padding, dilation, groups)
    np.testing.assert_allclose(ops.conv2d(x, w, b, **attrs), naive_conv2d(x, w, b, **attrs), atol=1e-10)
    np.testing.assert_allclose(ops.conv2d(x, w, None, **attrs), naive_conv2d(x, w, None, **attrs), atol=1e-10)


def _numeric_grad(f, value, cotangent, eps=1e-6):
    """d <f(value), cotangent> / d value by central differences."""
    grad = np.zeros_like(value)
    for idx in np.ndindex(value.shape):
        saved = value[idx]
        value[idx] = saved + eps
        plus = np.sum(f(value) * cotangent)
        value[idx] = saved - eps
        minus = np.sum(f(value) * cotangent)
        value[idx] = saved
        grad[idx] = (plus - minus) / (2 * eps)
    return grad


@pytest.mark.parametrize("stride, padding, dilation, groups, kernel", CONV_CASES)
def test_conv2d_grads_match_finite_differences(stride, padding, dilation, groups, kernel):
    x, w, _ = _conv_inputs(groups, kernel, n=2, size=(6, 7))
    attrs = _attrs(stride, padding, dilation, groups)
    out = ops.conv2d(x, w, None, **attrs)
    g = RNG.standard_normal(out.shape)
    grad_x = ops.conv2d_grad_input(g, w, x, **attrs)
    grad_w = ops.conv2d_grad_weight(g, x, w, **attrs)
    assert grad_x.shape == x.shape and grad_w.shape == w.shape
    np.testing.assert_allclose(grad_x, _numeric_grad(lambda v: ops.conv2d(v, w, None, **attrs), x, g), atol=1e-6)
    np.testing.assert_allclose(grad_w, _numeric_grad(lambda v: ops.conv2d(x, v, None, **attrs), w, g), atol=1e-6)


def test_conv1d_and_grads():
    x, w = RNG.standard_normal((2, 4, 11)), RNG.standard_normal((6, 2, 3))
    attrs = _attrs(2, 1, 2, 2)
    out = ops.conv1d(x, w, None, **attrs)
    # conv1d is conv2d with a height-1 image
    ref = naive_conv2d(x[:, :, None], w[:, :, None], None, (1, 2), ((0, 0), (1, 1)), (1, 2), 2)[:, :, 0]
    np.testing.assert_allclose(out, ref, atol=1e-10)
    g = RNG.standard_normal(out.shape)
    np.testing.assert_allclose(
        ops.conv1d_grad_input(g, w, x, **attrs),
        _numeric_grad(lambda v: ops.conv1d(v, w, None, **attrs), x, g),
        atol=1e-6,
    )
    np.testing.assert_allclose(
        ops.conv1d_grad_weight(g, x, w, **attrs),
        _numeric_grad(lambda v: ops.conv1d(x, v, None, **attrs), w, g),
        atol=1e-6,
    )


def test_conv2d_keeps_float32():
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = np.zeros(4, np.float32)
    attrs = _attrs(2, 1, 1, 1)
    out = ops.conv2d(x, w, b, **attrs)
    assert out.dtype == np.float32
    assert ops.conv2d_grad_input(out, w, x, **attrs).dtype == np.float32
    assert ops.conv2d_grad_weight(out, x, w, **attrs).dtype == np.float32


def naive_max_pool2d_grad(g, x, kernel, stride, pad):
    h, w = x.shape[-2:]
    xp = np.full((*x.shape[:-2], h + 2 * pad, w + 2 * pad), -np.inf)
    xp[..., pad : pad + h, pad : pad + w] = x
    grad = np.zeros_like(xp)
    for lead in np.ndindex(x.shape[:-2]):
        for i in range(g.shape[-2]):
            for j in range(g.shape[-1]):
                window = xp[lead][i * stride : i * stride + kernel, j * stride : j * stride + kernel]
                a, b = np.unravel_index(np.argmax(window), window.shape)  # first arg-max, row-major
                grad[lead][i * stride + a, j * stride + b] += g[lead][i, j]
    return grad[..., pad : pad + h, pad : pad + w]


@pytest.mark.parametrize("kernel, stride, pad", [(2, 2, 0), (3, 2, 1), (3, 1, 1), (2, 1, 0)])
def test_max_pool2d_and_grad(kernel, stride, pad):
    x = RNG.integers(0, 4, (2, 3, 7, 6)).astype(np.float64)  # many ties
    attrs = {"kernel_size": kernel, "stride": stride, "padding": pad, "dilation": 1}
    out = ops.max_pool2d(x, **attrs)
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf), (kernel, kernel), axis=(2, 3)
    )[:, :, ::stride, ::stride]
    np.testing.assert_array_equal(out, windows.max(axis=(-2, -1)))
    g = RNG.standard_normal(out.shape)
    np.testing.assert_allclose(ops.max_pool2d_grad(g, x, **attrs), naive_max_pool2d_grad(g, x, kernel, stride, pad))


def test_max_pool2d_default_stride_is_kernel():
    x = np.arange(16.0).reshape(1, 4, 4)
    out = ops.max_pool2d(x, kernel_size=2, stride=None, padding=0, dilation=1)
    np.testing.assert_array_equal(out, [[[5.0, 7.0], [13.0, 15.0]]])


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_padding_counts(count_include_pad):
    x = np.ones((1, 1, 3, 3))
    out = ops.avg_pool2d(x, kernel_size=3, stride=1, padding=1, dilation=1, count_include_pad=count_include_pad)
    corner = 4 / 9 if count_include_pad else 1.0
    assert out[0, 0, 0, 0] == pytest.approx(corner)
    assert out[0, 0, 1, 1] == pytest.approx(1.0)
    attrs = {"kernel_size": 3, "stride": 1, "padding": 1, "dilation": 1, "count_include_pad": count_include_pad}
    g = RNG.standard_normal(out.shape)
    x = RNG.standard_normal((1, 1, 3, 3))
    np.testing.assert_allclose(
        ops.avg_pool2d_grad(g, x, **attrs), _numeric_grad(lambda v: ops.avg_pool2d(v, **attrs), x, g), atol=1e-7
    )


def naive_attention(q, k, v, mask, causal, scale):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    lq, lk = scores.shape[-2:]
    allowed = np.ones((lq, lk), bool)
    if causal:
        allowed &= np.arange(lk)[None, :] <= np.arange(lq)[:, None]
    if mask is not None and mask.dtype == bool:
        allowed = allowed & mask
    elif mask is not None:
        scores = scores + mask
    scores = np.where(allowed, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return weights @ v


@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.25])
def test_scaled_dot_product_attention(mask_kind, causal, scale):
    q, k, v = RNG.standard_normal((2, 3, 5, 8)), RNG.standard_normal((2, 3, 6, 8)), RNG.standard_normal((2, 3, 6, 4))
    mask = None
    if mask_kind == "bool":
        mask = RNG.random((5, 6)) > 0.4
        mask[:, 0] = True  # no fully masked row
    elif mask_kind == "float":
        mask = RNG.standard_normal((5, 6))
    out = ops.scaled_dot_product_attention(q, k, v, mask, causal=causal, scale=scale)
    np.testing.assert_allclose(out, naive_attention(q, k, v, mask, causal, scale), atol=1e-12)
    weights = ops.attention_weights(q, k, mask, causal=causal, scale=scale)
    np.testing.assert_allclose(weights @ v, out, atol=1e-12)
    if causal:  # causal is top-left aligned: row 0 sees only key 0
        np.testing.assert_allclose(weights[..., 0, 1:], 0)


def test_erf_and_gelu_accuracy():
    x = np.linspace(-6, 6, 2001)
    reference = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(ops.erf(x), reference, atol=1e-14)
    assert ops.erf(np.array([1e-20]))[0] == pytest.approx(2 / math.sqrt(math.pi) * 1e-20, rel=1e-12)
    x32 = x.astype(np.float32)
    assert ops.gelu(x32, approximate=False).dtype == np.float32
    np.testing.assert_allclose(
        ops.gelu(x, approximate=False), x * 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x])), atol=1e-14
    )


def test_cross_entropy_grad_matches_finite_differences():
    logits = RNG.standard_normal((3, 4, 2))
    target = RNG.integers(0, 4, (3, 2))
    g = RNG.standard_normal((3, 2))
    attrs = {"input_type": "logits", "categorical": True, "eps": 1e-12}
    numeric = _numeric_grad(lambda v: ops.cross_entropy(v, target, **attrs), logits, g)
    np.testing.assert_allclose(ops.cross_entropy_grad(g, logits, target, **attrs), numeric, atol=1e-7)


def test_backend_dtypes():
    backend = NumpyBackend()
    assert backend.array([1.5, 2.0]).dtype == np.float32
    assert backend.array([1, 2]).dtype == np.int64
    assert backend.array([True]).dtype == np.bool_
    assert backend.array([1, 2], dtype="float").dtype == np.float32
    assert backend.implementation("full")(shape=(2,), fill_value=3, dtype=None).dtype == np.int64
    assert backend.implementation("randn")(shape=(2, 3)).dtype == np.float32
    assert backend.cast(np.array([1, 2]), dtype="float").dtype == np.float32
    mask = backend.dropout_mask(np.ones((100, 100), np.float32), p=0.25, training=True)
    assert mask.dtype == np.float32 and set(np.unique(mask)) <= {0.0, np.float32(1 / 0.75)}


def test_every_primitive_is_implemented():
    from mithril.plugins import registry
    from mithril_testing.conformance import required_primitives

    reg = registry()
    backend = NumpyBackend()
    required = required_primitives(backend)  # all but those with a decomposition (lstm_layer)
    shared = set(reg.impls("*"))  # core's implementations for every Python-codegen backend (``lambda``)
    assert sorted(required - set(reg.impls("numpy")) - shared) == []
    assert all(backend.has_implementation(name) for name in required)


def test_divide_ints_gives_backend_float():
    backend = NumpyBackend()
    assert backend.divide(np.array([1, 2]), np.array([2, 4])).dtype == np.float32
    assert backend.divide(np.ones(2, np.float32), 2).dtype == np.float32
