"""Mithril's published modelling language runs as written (issue 12): models below are written the way
Mithril's examples write them (``.connect(...)`` with positional keys, ``IOKey``, ``expose_keys``, Mithril's
key names), compiled on NumPy and checked against NumPy formulas."""

from __future__ import annotations

import math

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, ConnectionError_
from mithril.models import (
    Add,
    Concat,
    Conv1d,
    Divide,
    FloorDivide,
    IOKey,
    Linear,
    Log,
    Model,
    Power,
    Relu,
    ScaledDotProduct,
    SiLU,
    Split,
    Sqrt,
    Sum,
    Where,
)

RNG = np.random.default_rng(0)


def _run(model, data, params=None, **compile_options):
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(model, backend, **compile_options)
    return pm, pm.evaluate(params if params is not None else pm.randomize_params(seed=0), data)


def _attention(q, k, v, causal, mask=None, scale=None):
    scores = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        lq, lk = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((lq, lk), bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


# -- 1. ScaledDotProduct: causal by default ---------------------------------------------------------
def test_scaled_dot_product_is_causal_by_default():
    model = Model()
    model |= ScaledDotProduct().connect("query", "key", "value", output=IOKey("output"))
    assert model.input_keys == ["query", "key", "value"]  # no mask input unless use_attn_mask=True
    q, k, v = (RNG.normal(size=(2, 5, 4)) for _ in range(3))
    _, out = _run(model, {"query": q, "key": k, "value": v})
    np.testing.assert_allclose(out["output"], _attention(q, k, v, causal=True), rtol=1e-10)
    assert not np.allclose(out["output"], _attention(q, k, v, causal=False))


def test_scaled_dot_product_options_is_causal_scale_and_attn_mask():
    model = Model()
    sdp = ScaledDotProduct(is_causal=False, use_attn_mask=True, scale=0.5)
    model |= sdp.connect(query="q", key="k", value="v", attn_mask="m", output=IOKey("output"))
    assert sdp.input_keys == ["query", "key", "value", "attn_mask"]
    q, k, v = (RNG.normal(size=(1, 2, 3, 4)) for _ in range(3))
    mask = RNG.normal(size=(3, 3))
    _, out = _run(model, {"q": q, "k": k, "v": v, "m": mask})
    np.testing.assert_allclose(out["output"], _attention(q, k, v, causal=False, mask=mask, scale=0.5), rtol=1e-10)
    with pytest.raises(ml.errors.KeyError_, match="attn_mask"):
        Model().__ior__(ScaledDotProduct().connect(attn_mask="m"))


def test_multi_head_attention_keeps_its_non_causal_default():
    from mithril.models import MultiHeadAttention

    children = [child for _, child in MultiHeadAttention(dim=8, num_heads=2)._children]
    sdpa = next(c for c in children if getattr(c, "primitive_name", "") == "scaled_dot_product_attention")
    assert sdpa.attributes["causal"] is False


# -- 2. Mithril's key names and options --------------------------------------------------------------
def test_binary_ops_take_mithril_key_names():
    model = Model()
    model |= Power().connect(base="x", exponent=IOKey("e", value=3.0), output="p")
    model |= Divide().connect(numerator="p", denominator="y", output="d")
    model |= FloorDivide().connect(numerator="d", denominator=2.0, output="f")
    model |= Where().connect(cond="c", input1="f", input2="y", output=IOKey("output"))
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, 4.0, 2.0])
    c = np.array([True, False, True])
    _, out = _run(model, {"x": x, "y": y, "c": c})
    np.testing.assert_allclose(out["output"], np.where(c, (x**3 / y) // 2, y))
    assert Power().base.key == "left" and Where().input2.key == "right"


def test_concat_takes_a_list_and_axis_none_flattens():
    model = Model()
    model |= Concat(axis=-1).connect(input=["a", "b", "c"], output=IOKey("joined"))
    model |= Concat(axis=None).connect(input=["a", "b"], output=IOKey("flat"))
    a, b, c = RNG.normal(size=(2, 1)), RNG.normal(size=(2, 2)), RNG.normal(size=(2, 3))
    _, out = _run(model, {"a": a, "b": b, "c": c})
    np.testing.assert_allclose(out["joined"], np.concatenate([a, b, c], axis=-1))
    np.testing.assert_allclose(out["flat"], np.concatenate([a, b], axis=None))


def test_split_has_one_list_valued_output_indexable():
    model = Model()
    model |= Split(3, axis=-1).connect("input", output="split_out")
    model |= Add().connect(model.split_out[0], model.split_out[2], output=IOKey("output"))
    assert len(model.split_out) == 3 and Split(split_size=2).attributes["sections"] == 2
    x = RNG.normal(size=(2, 6))
    _, out = _run(model, {"input": x})
    np.testing.assert_allclose(out["output"], x[:, :2] + x[:, 4:])
    other = Model()
    other |= Split(2).connect("input", output=["first", "second"])
    assert other.shapes["first"] == other.shapes["second"]


def test_cast_takes_dtype_at_construction_or_connect():
    from mithril.models import Cast

    model = Model()
    model |= Cast(dtype=ml.int32).connect("x", output=IOKey("a"))
    model |= Cast().connect("x", dtype=ml.float16, output=IOKey("b"))
    _, out = _run(model, {"x": np.array([1.7, -2.2])})
    assert out["a"].dtype == np.int32 and out["b"].dtype == np.float16
    np.testing.assert_array_equal(out["a"], [1, -2])


def test_silu():
    model = Model()
    model |= SiLU().connect("input", output=IOKey("output"))
    x = RNG.normal(size=(5,))
    _, out = _run(model, {"input": x})
    np.testing.assert_allclose(out["output"], x / (1 + np.exp(-x)))


def test_robust_power_sqrt_log_are_finite_at_zero_and_negative_inputs():
    model = Model()
    model |= Sqrt(robust=True).connect("x", output=IOKey("s"))
    model |= Log(robust=True).connect("x", output=IOKey("l"))
    model |= Power(robust=True).connect(base="x", exponent=0.5, output=IOKey("p"))
    model |= Sum().connect(model.s + model.l + model.p, output=IOKey("total"))
    x = np.array([0.0, -4.0, 9.0], dtype=np.float32)
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float32), trainable_keys={"x"}, shapes={"x": [3]})
    out, grads = pm.evaluate({"x": x}, {}, output_gradients={"total": np.float32(1.0)})
    np.testing.assert_allclose(out["s"], [math.sqrt(1.1754944e-38), 2.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(out["l"][1:], np.log([4.0, 9.0]), rtol=1e-6)
    assert np.isfinite(out["l"][0]) and np.all(np.isfinite(grads["x"]))
    assert Sqrt().input_keys == ["input"]  # robust=False is the plain primitive


def test_conv1d_takes_a_left_right_padding_pair():
    model = Model()
    model |= Conv1d(out_channels=1, kernel_size=2, padding=(2, 1), use_bias=False).connect("input", weight="w", output=IOKey("output"))
    x = np.arange(4.0).reshape(1, 1, 4)
    _, out = _run(model, {"input": x}, params={"w": np.ones((1, 1, 2))})
    np.testing.assert_allclose(out["output"], [[[0.0, 0.0, 1.0, 3.0, 5.0, 3.0]]])


# -- 3. connect, canonical keys, exposure ------------------------------------------------------------
def test_connect_positional_arguments_follow_key_order():
    model = Model()
    model |= Linear(dimension=3).connect("x", "w", "b", IOKey("y"))
    assert model.input_keys == ["x", "w", "b"] and model.output_keys == ["y"]
    with pytest.raises(ArgumentError, match="at most 4 positional"):
        Linear(3).connect("a", "b", "c", "d", "e")
    with pytest.raises(ArgumentError, match="positionally and by name"):
        Linear(3).connect("a", input="b")


def test_expose_keys_and_canonical_keys():
    model = Model()
    model |= Linear(dimension=4).connect("input", output="hidden")
    model |= Relu().connect("hidden", output="act")
    model |= Linear(dimension=2).connect("act", output="logits")
    assert model.output_keys == ["hidden", "act", "logits"]  # the manual's rule: named outputs are outputs
    model.expose_keys("logits")
    assert model.output_keys == ["logits"]  # Mithril's rule once keys are exposed
    model.set_cout("act")
    assert model.cout.key == "act" and model.cin.key == "input"
    model.set_cin("input")
    with pytest.raises(ConnectionError_, match="only outputs are exposed"):
        model.expose_keys("input")
    pm, out = _run(model, {"input": RNG.normal(size=(2, 3))}, shapes={"input": [2, 3]})
    assert pm.output_keys == ["logits"] and out["logits"].shape == (2, 2)


def test_iokey_expose_true_hides_string_named_outputs():
    model = Model()
    model |= Linear(dimension=4).connect("input", output="hidden")
    model |= Relu().connect("hidden", output=IOKey("output", expose=True))
    assert model.output_keys == ["output"]


def test_buffer_tensor_types_and_physical_model_in_models():
    from mithril.models import Buffer, LogicalModel, PhysicalModel

    model = Model()
    model |= Buffer().connect(IOKey("x", type=ml.Tensor[float]), output=IOKey("same"))
    model |= Relu().connect("x", output=IOKey("output"))
    x = np.array([-1.0, 2.0])
    pm, out = _run(model, {"x": x})
    np.testing.assert_array_equal(out["same"], x)
    assert isinstance(pm, PhysicalModel) and LogicalModel is Model
    assert IOKey("i", type=ml.Tensor[int]).type == "int" and IOKey("u", type=ml.Tensor[int | float]).type is None
    params: dict[str, ml.DataType] = {}  # usable in annotations, as Mithril's examples use it
    assert params == {}


def test_backends_api_aliases_compile_call_and_layer_names():
    from mithril.models import LogicalModel

    model = LogicalModel()
    model |= Linear(dimension=4)(input_size=3)  # the manual's most common line
    model += Relu()
    model += Linear(dimension=2)
    assert model.shapes["input"][-1] == 3
    physical_model = model.compile(ml.NumpyBackend(dtype=ml.float64), shapes={"input": [5, 3]})
    assert physical_model.get_layer_names() == ["linear_0", "relu_0", "linear_1"]
    x = RNG.normal(size=(5, 3))
    params = physical_model.get_parameters()
    np.testing.assert_allclose(physical_model({"input": x})["output"], physical_model.evaluate(params, {"input": x})["output"])
    with pytest.raises(ArgumentError, match="input_size"):
        Linear(dimension=2)(input_size=0)
