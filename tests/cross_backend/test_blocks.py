"""Every composite block of DESIGN section 3 on every installed backend, against the NumPy backend in
float64: outputs and gradients (of every parameter and of the float inputs).

The same parameters reach every backend (``randomize_params(seed)`` draws them with NumPy), so the only
differences are each framework's arithmetic. Tolerances per dtype (|got - ref| <= atol * max(1, max|ref|)
+ rtol * |ref|): float64 rtol 1e-7 / atol 1e-9 (algorithms differ: blocked GEMMs, fused attention);
float32 rtol 2e-4 / atol 2e-4; float16/bfloat16 are covered by the per-backend conformance suites.
"""

from __future__ import annotations

from collections.abc import Callable

import mithril as ml
import numpy as np
import pytest
from mithril.models import (
    MLP,
    AbsoluteError,
    AvgPool2D,
    BatchNorm2d,
    BinaryCrossEntropy,
    Conv1d,
    Conv2d,
    CrossEntropy,
    Dropout,
    Embedding,
    Flatten,
    Gelu,
    GroupNorm,
    IOKey,
    LayerNorm,
    Linear,
    MaxPool2D,
    Model,
    MultiHeadAttention,
    RMSNorm,
    Softmax,
    SquaredError,
)
from mithril.plugins.lookup import available_backends, backend_class

TOLERANCE = {ml.float64: (1e-7, 1e-9), ml.float32: (2e-4, 2e-4)}
RNG_SEED = 0


def _wrap(block: Model, **extra: str) -> Model:
    """Put a block under a root model with named input/output (and extra data keys)."""
    model = Model()
    model |= block(input="input", output=IOKey("output"), **extra)
    return model


def _loss(block: Model) -> Model:
    model = Model()
    model |= block(input="input", target="target", output=IOKey("output"))
    return model


# name -> (builder, input shape, extra data {key: (shape or values, kind)}, input is float)
BLOCKS: dict[str, tuple[Callable[[], Model], list[int], dict, bool]] = {
    "linear": (lambda: _wrap(Linear(5)), [3, 4], {}, True),
    "mlp": (lambda: _wrap(MLP(input_size=4, hidden_sizes=[6, 5], output_size=3)), [2, 4], {}, True),
    "conv2d_same_groups": (lambda: _wrap(Conv2d(4, 3, padding="same", groups=2)), [2, 4, 6, 6], {}, True),
    "conv2d_stride": (lambda: _wrap(Conv2d(3, 3, stride=2, padding=1)), [1, 2, 7, 7], {}, True),
    "conv1d": (lambda: _wrap(Conv1d(3, 3, padding=1)), [2, 2, 8], {}, True),
    "max_pool2d": (lambda: _wrap(MaxPool2D(2)), [1, 2, 6, 6], {}, True),
    "avg_pool2d": (lambda: _wrap(AvgPool2D(2)), [1, 2, 6, 6], {}, True),
    "flatten": (lambda: _wrap(Flatten()), [2, 3, 4], {}, True),
    "dropout_eval": (lambda: _wrap(Dropout(0.5, training=False)), [3, 4], {}, True),
    "softmax": (lambda: _wrap(Softmax(axis=-1)), [3, 5], {}, True),
    "gelu_tanh": (lambda: _wrap(Gelu(approximate=True)), [3, 5], {}, True),
    "layer_norm": (lambda: _wrap(LayerNorm()), [2, 3, 6], {}, True),
    "rms_norm": (lambda: _wrap(RMSNorm()), [2, 6], {}, True),
    "group_norm": (lambda: _wrap(GroupNorm(num_groups=2)), [2, 4, 3, 3], {}, True),
    "batch_norm": (lambda: _wrap(BatchNorm2d()), [3, 2, 4, 4], {}, True),
    "embedding": (lambda: _wrap(Embedding(10, 4)), [2, 3], {}, False),
    "attention_causal": (lambda: _wrap(MultiHeadAttention(8, 2, causal=True)), [2, 5, 8], {}, True),
    "cross_entropy": (lambda: _loss(CrossEntropy(reduction="mean")), [4, 5], {"target": ([1, 0, 4, 2], "int")}, True),
    "binary_cross_entropy": (
        lambda: _loss(BinaryCrossEntropy(reduction="mean")),
        [4, 3],
        {"target": ((4, 3), "prob")},
        True,
    ),
    "squared_error": (lambda: _loss(SquaredError(reduction="mean")), [4, 3], {"target": ((4, 3), "float")}, True),
    "absolute_error": (lambda: _loss(AbsoluteError(reduction="mean")), [4, 3], {"target": ((4, 3), "float")}, True),
}


def _data(shape: list[int], extra: dict, float_input: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(RNG_SEED)
    data = {"input": rng.normal(size=shape) if float_input else rng.integers(0, 10, size=shape)}
    for key, (spec, kind) in extra.items():
        if kind == "int":
            data[key] = np.asarray(spec)
        elif kind == "prob":
            data[key] = rng.uniform(size=spec)
        else:
            data[key] = rng.normal(size=spec)
    return data


def _run(backend, name: str):
    build, shape, extra, float_input = BLOCKS[name]
    data = _data(shape, extra, float_input)
    trainable = {"input"} if float_input else set()
    pm = ml.compile(
        build(),
        backend,
        shapes={"input": shape},
        trainable_keys=trainable,
        data_keys=set(extra) | ({"input"} - trainable),
    )
    params = pm.randomize_params(seed=RNG_SEED)
    if "input" in trainable:
        params["input"] = backend.array(data.pop("input"))
    out_shape = pm.shapes["output"]
    cot = np.random.default_rng(1).normal(size=out_shape) if out_shape else np.float64(1.0)
    outputs, grads = pm.evaluate(
        params,
        {k: backend.array(v, "int" if np.asarray(v).dtype.kind == "i" else None) for k, v in data.items()},
        output_gradients={"output": backend.array(cot)},
    )
    return backend.to_numpy(outputs["output"]), {k: backend.to_numpy(v) for k, v in grads.items()}


_REFERENCE: dict[str, tuple] = {}


def _reference(name: str):
    if name not in _REFERENCE:
        _REFERENCE[name] = _run(backend_class("numpy")(dtype=ml.float64), name)
    return _REFERENCE[name]


def _cases():
    for backend in sorted(b for b in available_backends() if b not in ("*", "numpy")):
        for dtype in (ml.float64, ml.float32):
            for name in BLOCKS:
                yield pytest.param(backend, dtype, name, id=f"{backend}-{dtype.value}-{name}")


def _close(got: np.ndarray, ref: np.ndarray, dtype, what: str) -> None:
    rtol, atol = TOLERANCE[dtype]
    got = np.asarray(got, dtype=np.float64)
    scale = max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol * scale, err_msg=what)


@pytest.mark.parametrize(("backend_name", "dtype", "block"), list(_cases()))
def test_block_matches_numpy(backend_name: str, dtype, block: str) -> None:
    try:
        backend = backend_class(backend_name)(dtype=dtype)
    except TypeError as exc:  # e.g. MLX and GGML have no float64
        pytest.skip(f"{backend_name} does not compute in {dtype.value}: {exc}")
    ref_out, ref_grads = _reference(block)
    out, grads = _run(backend, block)
    _close(out, ref_out, dtype, f"{block} output on {backend_name}")
    assert set(grads) == set(ref_grads)
    for key, ref in ref_grads.items():
        _close(grads[key], ref, dtype, f"{block} d/d{key} on {backend_name}")
