"""Float32 kernels of the C runtime against float64 references: the AVX-512 GEMM (every float GEMM on a
CPU that has it: row and column tails, depth blocks, transposed operands, alpha, beta), convolutions
forward and backward (the input gradient of a stride-1 convolution computed as a convolution of the
output gradient with the flipped kernel, Winograd included; im2col + col2im otherwise) and the
branch-free selects (``mt_sel_*``) of ReLU, max/min, where, abs, sign, sigmoid, softplus, nan_to_num
with NaN, infinities and signed zeros.

On a CPU without AVX-512 the same tests check the BLAS path."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.models import (
    Absolute,
    Conv2d,
    IOKey,
    LeakyRelu,
    Linear,
    MatrixMultiply,
    Maximum,
    Minimum,
    Model,
    Relu,
    Sigmoid,
    Sign,
    Softplus,
    Where,
)

torch = pytest.importorskip("torch", reason="PyTorch computes the convolution references")

# (M, K, N): tails of the 6-row and 64-column tiles and of the 256-deep blocks
GEMM_SHAPES = [(1, 3, 1), (5, 1, 17), (6, 256, 64), (7, 257, 65), (13, 600, 130), (12, 31, 15), (2, 513, 200)]


def _gemm_model() -> Model:
    model = Model()
    for i, _ in enumerate(GEMM_SHAPES):
        model |= MatrixMultiply()(left=f"a{i}", right=f"b{i}", output=IOKey(f"y{i}"))
    return model


@pytest.mark.parametrize("threads", [1, 2])
def test_float32_matmul_tails_match_float64(threads: int) -> None:
    shapes = {}
    for i, (m, k, n) in enumerate(GEMM_SHAPES):
        shapes[f"a{i}"], shapes[f"b{i}"] = [m, k], [k, n]
    pm = ml.compile(_gemm_model(), ml.CBackend(dtype=ml.float32, threads=threads), shapes=shapes,
                    data_keys=set(shapes), inference=True)  # fmt: skip
    rng = np.random.default_rng(threads)
    data = {key: rng.standard_normal(shape).astype(np.float32) for key, shape in shapes.items()}
    out = pm.evaluate({}, data)
    for i, (_, k, _) in enumerate(GEMM_SHAPES):
        ref = data[f"a{i}"].astype(np.float64) @ data[f"b{i}"].astype(np.float64)
        np.testing.assert_allclose(out[f"y{i}"], ref, rtol=0, atol=2e-6 * np.sqrt(k) * 4, err_msg=str(GEMM_SHAPES[i]))


@pytest.mark.parametrize("rows", [1, 7, 70])
def test_float32_linear_gradients_use_transposed_operands(rows: int) -> None:
    """Linear with bias (GEMM with beta 1) forward, and its gradients (GEMMs with op(A) or op(B)
    transposed), against float64."""
    model = Model()
    model |= Linear(37, use_bias=True)(input="input", output=IOKey("output"))
    shapes = {"input": [rows, 300]}
    pm = ml.compile(model, ml.CBackend(dtype=ml.float32, threads=2), shapes=shapes)
    rng = np.random.default_rng(rows)
    params = {k: rng.standard_normal(np.shape(v)).astype(np.float32) for k, v in pm.randomize_params(seed=0).items()}
    x = rng.standard_normal(shapes["input"]).astype(np.float32)
    g = rng.standard_normal((rows, 37)).astype(np.float32)
    out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})
    w = next(v for k, v in params.items() if k.endswith("weight")).astype(np.float64)
    b = next(v for k, v in params.items() if k.endswith("bias")).astype(np.float64)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    weight_grad = next(v for k, v in grads.items() if k.endswith("weight"))
    np.testing.assert_allclose(out["output"], x64 @ w.T + b, rtol=0, atol=1e-4)
    np.testing.assert_allclose(weight_grad, g64.T @ x64, rtol=0, atol=1e-4 * max(1, rows / 10))


# (batch, in channels, size, out channels, kernel, stride, padding, dilation, groups)
CONV_CASES = {
    "winograd_grad": (2, 16, (14, 13), 24, 3, 1, 1, 1, 1),
    "winograd_unpadded": (1, 16, (12, 16), 16, 3, 1, 0, 1, 1),
    "odd_kernel": (1, 5, (17, 15), 7, 5, 1, 2, 1, 1),
    "dilated": (2, 4, (19, 18), 6, 3, 1, 2, 2, 1),
    "groups": (1, 8, (16, 16), 12, 3, 1, 1, 1, 2),
    "asymmetric": (1, 6, (15, 16), 5, 3, 1, ((2, 0), (1, 2)), 1, 1),
    "stride2": (2, 6, (15, 13), 10, 3, 2, 1, 1, 1),
    "pointwise": (1, 12, (9, 10), 20, 1, 1, 0, 1, 1),
    "deep_channels": (1, 40, (6, 6), 48, 3, 1, 1, 1, 1),
}


def _conv_model() -> Model:
    model = Model()
    for name, (_, c, _, o, k, s, p, d, g) in CONV_CASES.items():
        conv = Conv2d(o, k, stride=s, padding=p, dilation=d, groups=g, use_bias=True, in_channels=c, name=name)
        model |= conv(input=f"{name}_x", output=IOKey(f"{name}_y"))
    return model


def _torch_padding(p):
    if isinstance(p, int):
        return (p, p, p, p)
    (top, bottom), (left, right) = p
    return (left, right, top, bottom)


def test_float32_convolutions_and_gradients_match_torch() -> None:
    """Forward, input gradient and weight gradient of every case (stride 1: the input gradient as a
    convolution of the output gradient; otherwise col2im) against PyTorch in float64."""
    shapes = {f"{name}_x": [n, c, *hw] for name, (n, c, hw, *_) in CONV_CASES.items()}
    pm = ml.compile(_conv_model(), ml.CBackend(dtype=ml.float32, threads=2), shapes=shapes,
                    trainable_keys=set(shapes), use_short_namings=False)  # fmt: skip
    assert "dst[t] = src[" in pm.source  # the flipped kernel of the correlation path
    rng = np.random.default_rng(0)
    params = {k: rng.standard_normal(np.shape(v)).astype(np.float32) for k, v in pm.randomize_params(seed=0).items()}
    outs = pm.evaluate(params)
    grads_out = {k: rng.standard_normal(np.shape(v)).astype(np.float32) for k, v in outs.items()}
    _, grads = pm.evaluate(params, output_gradients=grads_out)
    for name, (_, _, _, _, _, s, p, d, g) in CONV_CASES.items():
        x = torch.tensor(params[f"{name}_x"], dtype=torch.float64, requires_grad=True)
        w = torch.tensor(params[f"{name}.weight"], dtype=torch.float64, requires_grad=True)
        b = torch.tensor(params[f"{name}.bias"], dtype=torch.float64)
        y = torch.nn.functional.conv2d(
            torch.nn.functional.pad(x, _torch_padding(p)), w, b, stride=s, dilation=d, groups=g
        )
        y.backward(torch.tensor(grads_out[f"{name}_y"], dtype=torch.float64))
        for got, ref in ((outs[f"{name}_y"], y), (grads[f"{name}_x"], x.grad), (grads[f"{name}.weight"], w.grad)):
            ref = ref.detach().numpy()
            assert got.shape == ref.shape, name
            assert np.abs(got - ref).max() <= 1e-5 * max(1.0, float(np.abs(ref).max())), name


SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -1.5, 1e-30, -3e38, 88.0, -88.0, 700.0, -700.0])


def _select_model() -> Model:
    model = Model()
    unary = {"relu": Relu(), "abs": Absolute(), "sign": Sign(), "leaky": LeakyRelu(slope=0.1), "sigmoid": Sigmoid(),
             "softplus": Softplus()}  # fmt: skip
    for key, block in unary.items():
        model |= block(input="x", output=IOKey(key))
    model |= Maximum()(left="x", right="y", output=IOKey("maximum"))
    model |= Minimum()(left="x", right="y", output=IOKey("minimum"))
    model |= Where()(cond="c", input1="x", input2="y", output=IOKey("where"))
    return model


def _select_references(x: np.ndarray, y: np.ndarray, c: np.ndarray) -> dict[str, np.ndarray]:
    """What the conditionals the emitters wrote before (``x < 0 ? -x : x`` ...) give, bit for bit."""
    with np.errstate(all="ignore"):
        sigmoid = np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))
        return {
            "relu": np.where((x > 0) | np.isnan(x), x, 0),
            "abs": np.where(x < 0, -x, x),
            "sign": np.where(x > 0, 1, np.where(x < 0, -1, x)),
            "leaky": np.where(x > 0, x, 0.1 * x),
            "sigmoid": sigmoid,
            "softplus": np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
            "maximum": np.where(np.isnan(x) | (x > y), x, y),
            "minimum": np.where(np.isnan(x) | (x < y), x, y),
            "where": np.where(c, x, y),
        }


@pytest.mark.parametrize("dtype", [ml.float32, ml.float64])
def test_branch_free_selects_keep_nan_inf_and_signed_zero(dtype) -> None:
    """Selects written as bit operations pick exactly the operand the C conditional would (NaN propagates
    through ReLU, maximum and minimum; -0.0 stays -0.0 where it is picked)."""
    np_dtype = np.dtype(dtype.value)
    n = 67  # vector bodies and a scalar tail
    rng = np.random.default_rng(3)
    x = np.resize(SPECIAL, n).astype(np_dtype)
    y = rng.permutation(np.resize(SPECIAL, n)).astype(np_dtype)
    c = rng.random(n) < 0.5
    shapes = {"x": [n], "y": [n], "c": [n]}
    pm = ml.compile(_select_model(), ml.CBackend(dtype=dtype, threads=1), shapes=shapes, data_keys=set(shapes),
                    inference=True)  # fmt: skip
    assert "mt_sel_" in pm.source
    out = pm.evaluate({}, {"x": x, "y": y, "c": c})
    for key, ref in _select_references(x, y, c).items():
        ref = ref.astype(np_dtype)
        if key in ("sigmoid", "softplus"):
            np.testing.assert_allclose(out[key], ref, rtol=1e-6, equal_nan=True, err_msg=key)
        else:  # the same bits, signed zeros included (NaN's payload aside)
            same = (out[key] == ref) & (np.signbit(out[key]) == np.signbit(ref))
            assert np.all(same | (np.isnan(out[key]) & np.isnan(ref))), key
