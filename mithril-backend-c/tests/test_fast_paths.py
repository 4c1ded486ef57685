"""The C backend's fast paths against float64 references: convolutions (Winograd F(2x2, 3x3), im2col
blocks, 1x1 kernels; threads splitting pixels or channels) with fused epilogues (bias, BatchNorm in
inference mode, residual add, ReLU), fused elementwise chains, split GEMMs and pooling.

Each model holds many cases side by side (one input and one output per case), so a handful of C
compiles covers them all."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.models import (
    Add,
    BatchNorm2d,
    Conv2d,
    Exponential,
    Greater,
    IOKey,
    Linear,
    MaxPool2D,
    Model,
    Multiply,
    Relu,
    Subtract,
    Sum,
    Tanh,
    Where,
)
from mithril_testing.references import REFERENCES as R

# id: (batch, in channels, height, width, out channels, kernel, stride, padding, dilation, groups, bias)
CONV_CASES = {
    "winograd": (1, 16, 12, 12, 16, 3, 1, 1, 1, 1, False),
    "winograd_odd_batch_bias": (2, 16, 13, 11, 24, 3, 1, 1, 1, 1, True),
    "winograd_unpadded": (1, 16, 13, 14, 16, 3, 1, 0, 1, 1, False),
    "winograd_asymmetric": (1, 16, 12, 11, 16, 3, 1, ((2, 1), (0, 2)), 1, 1, False),
    "winograd_groups": (1, 32, 12, 12, 32, 3, 1, 1, 1, 2, True),
    "winograd_split_channels": (1, 32, 12, 12, 64, 3, 1, 1, 1, 1, False),
    "winograd_blocks": (1, 16, 42, 40, 16, 3, 1, 1, 1, 1, False),
    "stride2": (1, 8, 15, 13, 12, 3, 2, 1, 1, 1, True),
    "stem7x7": (1, 3, 40, 38, 16, 7, 2, 3, 1, 1, False),
    "dilated_blocks": (1, 4, 40, 40, 8, 3, 1, 2, 2, 1, False),
    "pointwise_blocks": (2, 16, 20, 30, 8, 1, 1, 0, 1, 1, True),
    "small_split_channels": (1, 64, 5, 5, 64, 3, 1, 1, 1, 1, False),
    "downsample": (1, 16, 14, 14, 32, 1, 2, 0, 1, 1, False),
}


def _conv_model() -> Model:
    """One Conv2d per case; the odd cases are followed by BatchNorm2d (running statistics) + ReLU, so the
    convolution runs with a fused epilogue, and return the convolution too (a stored intermediate)."""
    model = Model()
    for i, (name, (_, c, _, _, o, k, s, p, d, g, bias)) in enumerate(CONV_CASES.items()):
        conv = Conv2d(
            o, k, stride=s, padding=p, dilation=d, groups=g, use_bias=bias, in_channels=c, name=f"{name}_conv"
        )
        if i % 2:
            model |= conv(input=f"{name}_x", output=IOKey(f"{name}_conv_out"))
            model |= BatchNorm2d(o, use_batch_stats=False, name=f"{name}_bn")(input=f"{name}_conv_out")
            model += Relu()(output=IOKey(f"{name}_y"))
        else:
            model |= conv(input=f"{name}_x", output=IOKey(f"{name}_y"))
    return model


def _inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {f"{name}_x": rng.standard_normal((n, c, h, w)) for name, (n, c, h, w, *_) in CONV_CASES.items()}


def _conv_reference(params: dict, data: dict) -> dict[str, np.ndarray]:
    out = {}
    for i, (name, (_, _, _, _, _, _, s, p, d, g, bias)) in enumerate(CONV_CASES.items()):
        b = params[f"{name}_conv.bias"] if bias else None
        y = R["conv2d"](data[f"{name}_x"], params[f"{name}_conv.weight"], b, stride=s, padding=p, dilation=d, groups=g)
        if i % 2:
            out[f"{name}_conv_out"] = y
            keys = ("running_mean", "running_var", "weight", "bias")
            shaped = {k: params[f"{name}_bn.{k}"].reshape(-1, 1, 1) for k in keys}
            y = (y - shaped["running_mean"]) / np.sqrt(shaped["running_var"] + 1e-5) * shaped["weight"] + shaped["bias"]
            y = np.maximum(y, 0)
        out[f"{name}_y"] = y
    return out


def _relative_errors(got: dict, ref: dict) -> dict[str, float]:
    return {k: float(np.abs(np.asarray(got[k], np.float64) - ref[k]).max() / np.abs(ref[k]).max()) for k in ref}


def _random_params(pm, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Weights and non-trivial running statistics (the defaults, 0 and 1, would hide mistakes)."""
    params = {}
    for key, value in pm.randomize_params(seed=0).items():
        shape = np.shape(value)
        if key.endswith("running_var"):
            params[key] = rng.uniform(0.5, 2.0, shape)
        else:
            params[key] = rng.standard_normal(shape) * (1.0 if key.endswith("weight") else 0.3)
    return params


@pytest.fixture(scope="module")
def conv_setup():
    model = _conv_model()
    shapes = {f"{name}_x": [n, c, h, w] for name, (n, c, h, w, *_) in CONV_CASES.items()}
    return model, shapes


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_convolutions_with_fused_epilogues_match_float64_reference(conv_setup, threads) -> None:
    """Every convolution path (Winograd with padding/odd sizes/groups/blocks/channel split, im2col with
    strides/dilation/blocks, 1x1) and every epilogue agree with a float64 reference to 1e-9."""
    model, shapes = conv_setup
    backend = ml.CBackend(dtype=ml.float64, threads=threads)
    pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), inference=True, use_short_namings=False)
    assert pm.source.count("mt_wino_input_f64(") == sum(name.startswith("winograd") for name in CONV_CASES)
    assert "mt_im2col_range_f64(" in pm.source
    rng = np.random.default_rng(threads)
    params, data = _random_params(pm, rng), _inputs(rng)
    errors = _relative_errors(pm.evaluate(params, data), _conv_reference(params, data))
    assert max(errors.values()) < 1e-9, errors


def test_convolutions_float32(conv_setup) -> None:
    model, shapes = conv_setup
    backend = ml.CBackend(dtype=ml.float32, threads=2)
    pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), inference=True, use_short_namings=False)
    rng = np.random.default_rng(5)
    params, data = _random_params(pm, rng), _inputs(rng)
    ref = _conv_reference(params, data)
    got = pm.evaluate(
        {k: v.astype(np.float32) for k, v in params.items()}, {k: v.astype(np.float32) for k, v in data.items()}
    )
    errors = _relative_errors(got, ref)
    assert max(errors.values()) < 1e-5, errors


def _chain_model() -> Model:
    """Elementwise chains: broadcasting, a value used twice, a bool mask, a returned intermediate, a
    member reading a value computed between members (``total``), two interleaved chains."""
    m = Model()
    m |= (c := Subtract())(left="x", right="mean")  # [4, 5, 6] - [5, 1]
    m |= (s := Multiply())(left=c.output, right="scale", output=IOKey("s"))  # a returned intermediate
    m |= (e := Exponential())(input=s.output)
    m |= (total := Sum(axis=0))(input="y")  # not elementwise, between members
    m |= (et := Add())(left=e.output, right=total.output)
    m |= Add()(left=et.output, right=c.output, output=IOKey("out"))  # reads an earlier member again
    m |= (mask := Greater())(left=s.output, right=0.0)
    m |= Where()(cond=mask.output, input1=e.output, input2=s.output, output=IOKey("picked"))
    m |= (ty := Tanh())(input="y")  # a second chain, interleaved
    m |= Multiply()(left=ty.output, right=ty.output, output=IOKey("ty2"))
    return m


@pytest.mark.parametrize("dtype", [ml.float64, ml.float32])
def test_fused_elementwise_chains_match_numpy(dtype) -> None:
    pytest.importorskip("mithril_backend_numpy", reason="the NumPy backend computes the reference")
    shapes = {"x": [4, 5, 6], "mean": [5, 1], "scale": [6], "y": [3, 4, 5, 6]}
    model = _chain_model()
    rng = np.random.default_rng(0)
    data = {k: rng.standard_normal(v) for k, v in shapes.items()}
    ref = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes=shapes, data_keys=set(shapes))
    expected = ref.evaluate({}, data)
    pm = ml.compile(model, ml.CBackend(dtype=dtype, threads=2), shapes=shapes, data_keys=set(shapes))
    blocks = [line.strip() for line in pm.source.splitlines() if line.strip().startswith("{  /*")]
    assert any("subtract" in b and "+ multiply, exp" in b for b in blocks), blocks  # one loop for the chain
    got = pm.evaluate({}, {k: v.astype(np.dtype(dtype.value)) for k, v in data.items()})
    tol = 1e-12 if dtype is ml.float64 else 1e-5
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=tol, atol=tol, err_msg=key)


def test_fused_groups_in_generated_source() -> None:
    """BatchNorm2d (inference) + ReLU after a convolution become its epilogue: one block of C."""
    model = Model()
    model |= Conv2d(16, 3, padding=1, use_bias=False, in_channels=16)(input="input")
    model += BatchNorm2d(16, use_batch_stats=False)
    model += Relu()
    pm = ml.compile(model, ml.CBackend(threads=2), shapes={"input": [1, 16, 16, 16]}, inference=True)
    blocks = [line.strip() for line in pm.source.splitlines() if line.strip().startswith("{  /*")]
    assert any("conv2d" in b and "+ subtract, multiply, add, relu" in b for b in blocks), blocks
    assert not any(b.startswith("{  /* relu") or b.startswith("{  /* subtract") for b in blocks), blocks


def test_training_graph_with_fusion_matches_numpy() -> None:
    """Forward + backward of conv/BatchNorm (batch statistics)/ReLU/residual/pool/linear: the backward's
    elementwise chains are fused too, and gradients agree with NumPy."""
    pytest.importorskip("mithril_backend_numpy", reason="the NumPy backend computes the reference")
    model = Model()
    model |= Conv2d(16, 3, padding=1, in_channels=4)(input="input", output="a")
    model |= BatchNorm2d(16)(input="a", output="b")
    model |= Relu()(input="b", output="r")
    model |= Conv2d(16, 3, padding=1, in_channels=16)(input="r", output="c")
    model |= Add()(left="c", right="r", output="res")
    model |= Relu()(input="res", output="r2")
    model |= MaxPool2D(kernel_size=3, stride=2, padding=1)(input="r2", output="p")
    model |= Sum(axis=(2, 3))(input="p", output="f")
    model |= Linear(3)(input="f", output=IOKey("output"))
    shapes = {"input": [2, 4, 12, 12]}
    ref = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes=shapes)
    pm = ml.compile(model, ml.CBackend(dtype=ml.float64, threads=2), shapes=shapes)
    params = ref.randomize_params(seed=0)
    x = np.random.default_rng(1).standard_normal(shapes["input"])
    g = np.random.default_rng(2).standard_normal((2, 3))
    out_ref, grads_ref = ref.evaluate(params, {"input": x}, output_gradients={"output": g})
    out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})
    for key, value in {**out_ref, **{f"grad {k}": v for k, v in grads_ref.items()}}.items():
        got = out[key] if key in out else grads[key[5:]]
        np.testing.assert_allclose(got, value, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(value).max())), err_msg=key)


def test_max_pool_interior_and_borders_with_nans() -> None:
    """The pooling kernel's interior fast path and border path agree with the reference (NaN propagates)."""
    x = np.random.default_rng(0).standard_normal((2, 3, 11, 10))
    x[0, 1, 4, 5] = np.nan
    x[1, 2, 0, 0] = np.nan
    model = Model()
    model |= MaxPool2D(kernel_size=3, stride=2, padding=1)(input="input", output=IOKey("output"))
    pm = ml.compile(model, ml.CBackend(dtype=ml.float64, threads=2), shapes={"input": list(x.shape)})
    expected = R["max_pool2d"](x, kernel_size=3, stride=2, padding=1, dilation=1)
    np.testing.assert_array_equal(pm.evaluate({}, {"input": x})["output"], expected)
