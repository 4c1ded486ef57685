"""C kernels that every ggml thread runs on its own part: convolutions (Winograd or im2col blocks + BLAS)
with their fused elementwise epilogues, fused elementwise chains and padded pooling; results must not
depend on the thread count, including counts other than the one the kernels were laid out for."""

import mithril as ml
import numpy as np
import pytest
from mithril.models import (
    Add,
    BatchNorm2d,
    Conv2d,
    Exponential,
    IOKey,
    MaxPool2D,
    Model,
    Multiply,
    Relu,
    Subtract,
    Tanh,
)
from mithril_testing.references import REFERENCES as R

# name: (batch, in channels, size, out channels, kernel, stride, padding)
CASES = {
    "winograd": (1, 16, 12, 16, 3, 1, 1),  # 3x3 stride 1: Winograd, threads split the 2x2 tiles
    "winograd_rows": (1, 32, 10, 64, 3, 1, 1),  # few tiles: threads split the output channels
    "stride2": (2, 8, 13, 12, 3, 2, 1),  # im2col blocks
    "pointwise": (1, 16, 9, 8, 1, 1, 0),
}


def _model() -> Model:
    model = Model()
    for name, (_, c, _, o, k, s, p) in CASES.items():
        model |= Conv2d(o, k, stride=s, padding=p, in_channels=c, name=f"{name}_conv")(input=f"{name}_x")
        model += BatchNorm2d(o, use_batch_stats=False, name=f"{name}_bn")
        model += Relu()(output=IOKey(f"{name}_y"))
    model |= MaxPool2D(kernel_size=3, stride=2, padding=1)(input="winograd_y", output=IOKey("pooled"))
    return model


def _reference(params: dict, data: dict) -> dict:
    out = {}
    for name, (_, _, _, _, _, s, p) in CASES.items():
        y = R["conv2d"](
            data[f"{name}_x"],
            params[f"{name}_conv.weight"],
            params[f"{name}_conv.bias"],
            stride=s,
            padding=p,
            dilation=1,
            groups=1,
        )
        bn = {
            k: params[f"{name}_bn.{k}"].astype(np.float64).reshape(-1, 1, 1)
            for k in ("running_mean", "running_var", "weight", "bias")
        }
        y = (y - bn["running_mean"]) / np.sqrt(bn["running_var"] + 1e-5) * bn["weight"] + bn["bias"]
        out[f"{name}_y"] = np.maximum(y, 0)
    out["pooled"] = R["max_pool2d"](out["winograd_y"], kernel_size=3, stride=2, padding=1, dilation=1)
    return out


def test_split_convolutions_and_pooling_match_reference_for_any_thread_count():
    shapes = {f"{name}_x": [n, c, size, size] for name, (n, c, size, *_) in CASES.items()}
    backend = ml.GGMLBackend(threads=3)
    pm = ml.compile(_model(), backend, shapes=shapes, data_keys=set(shapes), inference=True, use_short_namings=False)
    forward = pm.source.split("def evaluate(")[1]
    assert forward.count("fused[conv2d, subtract, multiply, add, relu]") == len(CASES), forward
    assert "max_pool2d(input=" in forward and "C kernel, on 3 threads" in forward
    rng = np.random.default_rng(0)
    params = {}
    for key, value in pm.randomize_params(seed=0).items():
        shape = np.shape(value)
        params[key] = (
            rng.uniform(0.5, 2, shape) if key.endswith("running_var") else rng.standard_normal(shape)
        ).astype(np.float32)
    data = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
    expected = _reference(
        {k: v.astype(np.float64) for k, v in params.items()}, {k: v.astype(np.float64) for k, v in data.items()}
    )
    first = None
    for threads in (3, 1, 2, 5):  # 1 and 2: fewer parts than laid out for; 5: more (the extra ones idle)
        backend.threads = threads
        got = pm.evaluate(params, data)
        for key, value in expected.items():
            error = np.abs(got[key] - value).max() / np.abs(value).max()
            assert error < 1e-5, (threads, key, error)
        if first is None:
            first = got
        for key in expected:  # the same up to float32 rounding (BLAS may sum in another order for other shapes)
            assert np.abs(got[key] - first[key]).max() <= 1e-5 * np.abs(first[key]).max(), (threads, key)


def test_fused_elementwise_chain_is_one_split_kernel():
    model = Model()
    model |= (a := Subtract())(left="x", right="m")
    model |= (b := Multiply())(left=a.output, right="s")
    model |= (e := Exponential())(input=b.output)
    model |= Add()(left=e.output, right=a.output, output=IOKey("out"))  # reads an earlier member again
    model |= Tanh()(input="out", output=IOKey("t"))  # a single node after a returned value: native
    shapes = {"x": [2, 8, 5, 5], "m": [8, 1, 1], "s": [8, 1, 1]}
    pm = ml.compile(model, ml.GGMLBackend(threads=2), shapes=shapes, data_keys=set(shapes))
    assert "fused[subtract, multiply, exp, add]" in pm.source and "tanh(input=out)  # ggml: native" in pm.source, (
        pm.source
    )
    rng = np.random.default_rng(1)
    data = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
    got = pm.evaluate({}, data)
    x, m, s = (data[k].astype(np.float64) for k in ("x", "m", "s"))
    expected = np.exp((x - m) * s) + (x - m)
    np.testing.assert_allclose(got["out"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["t"], np.tanh(expected), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_conv_gradients_with_split_forward(threads):
    """Training graphs keep working: the forward convolution is a split kernel, its gradients native."""
    pytest.importorskip("mithril_backend_numpy", reason="the NumPy backend computes the reference")
    model = Model()
    model |= Conv2d(8, 3, padding=1, in_channels=16)(input="input")
    model += Relu()
    shapes = {"input": [1, 16, 10, 10]}
    pm = ml.compile(model, ml.GGMLBackend(threads=threads), shapes=shapes)
    ref = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes=shapes)
    params = pm.randomize_params(seed=0)
    x = np.random.default_rng(0).standard_normal(shapes["input"]).astype(np.float32)
    g = np.random.default_rng(1).standard_normal((1, 8, 10, 10)).astype(np.float32)
    out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    out_ref, grads_ref = ref.evaluate(
        p64, {"input": x.astype(np.float64)}, output_gradients={"output": g.astype(np.float64)}
    )
    np.testing.assert_allclose(out["output"], out_ref["output"], rtol=1e-4, atol=1e-4)
    for key in grads_ref:
        np.testing.assert_allclose(grads[key], grads_ref[key], rtol=1e-3, atol=1e-3)
