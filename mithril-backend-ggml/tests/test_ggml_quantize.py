"""``ml.compile(..., quantize="q8_0" | "q4_0")`` on the GGML backend: ggml's own quantized products (the
weights quantized from the float32 parameters at each call), the same bits as the C code generated with
the same weights quantized (what an exported program runs), and the refusals (training, other backends,
unknown formats)."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError
from mithril.models import Conv2d, Embedding, Flatten, IOKey, Linear, Model, Relu
from mithril_backend_c import kernels

FORMATS = ("q8_0", "q4_0")


def _dense() -> tuple[Model, dict[str, list[int]]]:
    model = Model()
    model |= Embedding(100, 64)(input=IOKey("input", type="int"), output="e")
    model |= Linear(96)(input="e", output="h")
    model += Relu()
    model += Linear(32)(output=IOKey("output"))
    return model, {"input": [3, 5]}


def _conv() -> tuple[Model, dict[str, list[int]]]:
    model = Model()
    model |= Conv2d(32, 3, padding=1)(input="input", output="a")  # the stem: 3 * 9 values a row, stays float
    model += Relu()
    model += Conv2d(16, 3, padding=1, stride=2)  # rows of 288 values: quantized
    model += Relu()
    model += Flatten(start_dim=1)
    model += Linear(10)(output=IOKey("output"))
    return model, {"input": [2, 3, 8, 8]}


def _c_quantized(model: Model, shapes: dict[str, list[int]], fmt: str, params: dict, data: dict) -> np.ndarray:
    """The model's output from the C code generated with its weights quantized as ``fmt``."""
    pm = ml.compile(model, ml.CBackend(threads=1), shapes=shapes, data_keys=set(shapes), inference=True)
    code, functions = kernels.compiled_source(pm, fmt)
    call = kernels.load_functions(kernels.build_library(code.text()), functions, pm.backend)["evaluate"]
    (fn,) = functions
    by_path = {path: key for key, path in pm.input_paths.items()}
    named = {by_path[path]: value for path, value in params.items()}
    given = {f.key: kernels.quantize(named[f.key], fmt) if f.quant else named[f.key]
             for f in fn.inputs if f.role == "param"}  # fmt: skip
    inputs = {k: np.asarray(v, np.int64 if v.dtype.kind in "iu" else np.float32) for k, v in data.items()}
    return call(given, inputs)["output"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("build", [_dense, _conv])
def test_quantized_ggml_agrees_with_the_quantized_c_code(build, fmt: str) -> None:
    model, shapes = build()
    backend = ml.GGMLBackend(threads=2)
    pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), inference=True, quantize=fmt)
    assert "native (quantized weight" in pm.source
    params = pm.randomize_params(seed=0)
    rng = np.random.default_rng(0)
    data = {"input": rng.integers(0, 100, shapes["input"]) if build is _dense else
            rng.standard_normal(shapes["input"]).astype(np.float32)}  # fmt: skip
    got = pm.evaluate(params, data)["output"]
    want = _c_quantized(model, shapes, fmt, {pm.input_paths[k]: v for k, v in params.items()}, data)
    if build is _dense:  # ggml's vec_dot per row; the C code's strips of 16 weight rows add in another order
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())
    else:  # ggml's im2col and the C patches feed the same products; the layers around them are C kernels
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    plain = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), inference=True).evaluate(params, data)
    error = np.abs(got - plain["output"]).max() / np.abs(plain["output"]).max()
    assert 1e-6 < error < (0.02 if fmt == "q8_0" else 0.2)  # quantized, and close to float32


def test_quantized_weights_are_read_fresh_at_every_call() -> None:
    model, shapes = _dense()
    pm = ml.compile(model, ml.GGMLBackend(threads=1), shapes=shapes, data_keys=set(shapes), inference=True,
                    quantize="q8_0")  # fmt: skip
    params = pm.randomize_params(seed=0)
    data = {"input": np.arange(15).reshape(3, 5)}
    first = pm.evaluate(params, data)["output"]
    for value in params.values():
        value *= 2  # refilled in place: the next call quantizes the new values
    second = pm.evaluate(params, data)["output"]
    assert not np.allclose(first, second)


def test_quantize_refusals() -> None:
    model, shapes = _dense()
    with pytest.raises(ArgumentError, match="inference"):
        ml.compile(model, ml.GGMLBackend(threads=1), shapes=shapes, data_keys=set(shapes), quantize="q8_0")
    with pytest.raises(ArgumentError, match="no quantized kernels"):
        ml.compile(model, ml.CBackend(threads=1), shapes=shapes, data_keys=set(shapes), inference=True, quantize="q8_0")
    with pytest.raises(ArgumentError, match="accepts 'q8_0', 'q4_0'"):
        ml.compile(model, ml.GGMLBackend(threads=1), shapes=shapes, data_keys=set(shapes), inference=True,
                   quantize="q5_1")  # fmt: skip
