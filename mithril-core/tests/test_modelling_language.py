"""Mithril's published modelling language runs as written (issue 12): models below are written the way
Mithril's examples write them (``.connect(...)`` with positional keys, ``IOKey``, ``expose_keys``, Mithril's
key names), compiled on NumPy and checked against NumPy formulas."""

from __future__ import annotations

import math

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, ModelConnectionError
from mithril.models import (
    Add,
    Buffer,
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
    with pytest.raises(ml.errors.ModelKeyError, match="attn_mask"):
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
    assert Power().base.key == "base" and Where().input2.key == "input2"


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
    np.testing.assert_allclose(out["s"], [0.0, 2.0, 3.0], rtol=1e-6)  # Mithril's: |x| / sqrt(threshold) below it
    np.testing.assert_allclose(out["l"][1:], np.log([4.0, 9.0]), rtol=1e-6)
    assert np.isfinite(out["l"][0]) and np.all(np.isfinite(grads["x"]))
    assert Sqrt().input_keys == ["input"]  # robust=False is the plain primitive


def test_conv1d_takes_a_left_right_padding_pair():
    model = Model()
    model |= Conv1d(out_channels=1, kernel_size=2, padding=(2, 1), use_bias=False).connect(
        "input", weight="w", output=IOKey("output")
    )
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
    with pytest.raises(ModelConnectionError, match="only outputs are exposed"):
        model.expose_keys("input")
    pm, out = _run(model, {"input": RNG.normal(size=(2, 3))}, shapes={"input": [2, 3]})
    assert pm.output_keys == ["logits"] and out["logits"].shape == (2, 2)


def test_iokey_expose_true_hides_string_named_outputs():
    model = Model()
    model |= Linear(dimension=4).connect("input", output="hidden")
    model |= Relu().connect("hidden", output=IOKey("output", expose=True))
    assert model.output_keys == ["output"]


def test_buffer_tensor_types_and_physical_model_in_models():
    from mithril.models import Buffer, Model, PhysicalModel

    model = Model()
    model |= Buffer().connect(IOKey("x", type=ml.Tensor[float]), output=IOKey("same"))
    model |= Relu().connect("x", output=IOKey("output"))
    x = np.array([-1.0, 2.0])
    pm, out = _run(model, {"x": x})
    np.testing.assert_array_equal(out["same"], x)
    assert isinstance(pm, PhysicalModel) and Model is Model
    assert IOKey("i", type=ml.Tensor[int]).type == "int" and IOKey("u", type=ml.Tensor[int | float]).type is None
    params: dict[str, ml.DataType] = {}  # usable in annotations, as Mithril's examples use it
    assert params == {}


def test_backends_api_aliases_compile_call_and_layer_names():
    from mithril.models import Model

    model = Model()
    model |= Linear(dimension=4)(input_size=3)  # the manual's most common line
    model += Relu()
    model += Linear(dimension=2)
    assert model.shapes["input"][-1] == 3
    physical_model = model.compile(ml.NumpyBackend(dtype=ml.float64), shapes={"input": [5, 3]})
    assert physical_model.get_layer_names() == ["linear_0", "relu_0", "linear_1"]
    x = RNG.normal(size=(5, 3))
    params = physical_model.get_parameters()
    np.testing.assert_allclose(
        physical_model({"input": x})["output"], physical_model.evaluate(params, {"input": x})["output"]
    )
    with pytest.raises(ArgumentError, match="input_size"):
        Linear(dimension=2)(input_size=0)


# -- 4. expressions and symbolic shapes ---------------------------------------------------------------
def _python_backends():
    """NumPy plus the autograd backends whose plugins are installed."""
    backends = [ml.NumpyBackend(dtype=ml.float64)]
    for name in ("JaxBackend", "TorchBackend"):
        try:
            backends.append(getattr(ml, name)(dtype=ml.float64))
        except Exception:  # plugin not installed here
            continue
    return backends


def quick_gelu(name: str | None = None) -> Model:
    """Written as Mithril's CLIP example writes it."""
    block = Model(name=name)
    input = IOKey("input")
    block |= ml.Sigmoid().connect((input * 1.702), output="sigmoid")
    block |= Buffer().connect(input * block.sigmoid, output=IOKey("output"))
    return block


def test_iokey_expressions_are_built_where_they_are_connected():
    from mithril.framework.keys import Expr

    assert isinstance(IOKey("x") * 1.702, Expr) and isinstance((IOKey("x") ** 2).exp().abs(), Expr)
    model = Model()
    model |= quick_gelu().connect("input", output=IOKey("output"))
    x = RNG.normal(size=(4,))
    _, out = _run(model, {"input": x})
    np.testing.assert_allclose(out["output"], x / (1 + np.exp(-1.702 * x)))


def test_connection_expressions_pow_exp_abs_cast_dtype_comparisons():
    model = Model()
    model |= Relu().connect("x", output="r")
    model |= Buffer().connect((model.r**2 - 1.0).abs().exp(), output=IOKey("e"))
    model |= Buffer().connect(model.r.cast(ml.int32), output=IOKey("i"))
    model |= Buffer().connect(model.e.cast(model.i.dtype()), output=IOKey("same_kind"))
    model |= Buffer().connect(model.r > 0.5, output=IOKey("gt"))
    model |= Buffer().connect((model.r <= 0.5) & (model.r.ne(0.0)), output=IOKey("small"))
    x = np.array([-1.0, 0.25, 2.5])
    _, out = _run(model, {"x": x})
    r = np.maximum(x, 0)
    np.testing.assert_allclose(out["e"], np.exp(np.abs(r**2 - 1)))
    np.testing.assert_array_equal(out["i"], [0, 0, 2])
    assert out["same_kind"].dtype.kind == "i"
    np.testing.assert_array_equal(out["gt"], [False, False, True])
    np.testing.assert_array_equal(out["small"], [False, True, False])


def multi_head_attention(dim: int, heads: int) -> Model:
    """Heads split and merged with symbolic shapes (``shp[0]``, ``shp[:3]``), in the published examples' style."""
    model = Model()
    projections = []
    for name in ("q", "k", "v"):
        model |= Linear(dim, name=name).connect(input="input", output=f"{name}_out")
        projections.append(getattr(model, f"{name}_out"))
    shp = model.input.shape
    split_heads = [p.reshape((shp[0], shp[1], heads, -1)).transpose((0, 2, 1, 3)) for p in projections]
    model |= ScaledDotProduct().connect(*split_heads, output="heads_out")
    merged = model.heads_out.transpose((0, 2, 1, 3)).reshape(shp[:3])
    model |= Buffer().connect(merged, output=IOKey("output"))
    return model


@pytest.mark.parametrize("backend", _python_backends(), ids=lambda b: type(b).__name__)
def test_symbolic_shapes_compile_once_run_any_batch_and_length(backend):
    dim, heads = 8, 2
    model = Model()
    model |= multi_head_attention(dim, heads).connect("input", output=IOKey("output"))
    pm = ml.compile(model, backend, shapes={"input": [None, None, dim]})
    params = pm.randomize_params(seed=0)
    p = {k: np.asarray(backend.to_numpy(v)) for k, v in params.items()}
    paths = {path: key for key, path in pm.input_paths.items()}
    for batch, length in ((1, 3), (2, 5)):
        x = RNG.normal(size=(batch, length, dim))
        q, k, v = (
            (x @ p[paths[f"model_0.{n}.weight"]].T + p[paths[f"model_0.{n}.bias"]])
            .reshape(batch, length, heads, -1)
            .transpose(0, 2, 1, 3)
            for n in "qkv"
        )
        expected = _attention(q, k, v, causal=True).transpose(0, 2, 1, 3).reshape(batch, length, dim)
        out = pm.evaluate(params, {"input": backend.array(x)})["output"]
        np.testing.assert_allclose(np.asarray(backend.to_numpy(out)), expected, rtol=1e-8, atol=1e-10)


def test_connection_shape_is_symbolic_and_compares_as_a_list():
    model = Model()
    model |= Linear(8).connect(IOKey("input", shape=[2, 3, 4]), output="h")
    assert model.h.shape == [2, 3, 8] and model.h.shape[1].value == 3 and len(model.h.shape[:2]) == 2
    # dims neither known nor at their own position are read when the model runs (reshape_to)
    other = Model()
    other |= Relu().connect("x", output="y")
    other |= Relu().connect(other.y.reshape(other.y.shape[1], other.y.shape[0]), output=IOKey("swapped"))
    pm = ml.compile(other, ml.NumpyBackend(dtype=ml.float64), shapes={"x": [None, None]})
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(pm.evaluate({}, {"x": x})["swapped"], x.reshape(3, 2))


def test_size_and_arange_follow_the_sequence_length():
    from mithril.models import Embedding

    transformer = Model()  # the head of Mithril's GPT example
    transformer |= ml.Size(dim=1).connect("input")
    transformer |= ml.Arange(start=0, step=1).connect(stop=transformer.cout)
    transformer |= Embedding(name="wpe", num_embeddings=16, dim=4).connect(input=transformer.cout, output="pos_out")
    transformer |= Embedding(name="wte", num_embeddings=10, dim=4).connect(input="input", output="token_out")
    transformer |= Add().connect(left="pos_out", right="token_out", output=IOKey("output"))
    pm = ml.compile(transformer, ml.NumpyBackend(dtype=ml.float64))
    params = pm.randomize_params(seed=0)
    paths = {path: key for key, path in pm.input_paths.items()}
    for length in (3, 7):
        ids = RNG.integers(0, 10, size=(2, length))
        out = pm.evaluate(params, {"input": ids})["output"]
        np.testing.assert_allclose(
            out, params[paths["wpe.weight"]][np.arange(length)] + params[paths["wte.weight"]][ids]
        )
    static = Model()
    static |= ml.Arange(stop=5).connect(output=IOKey("r"))
    np.testing.assert_array_equal(_run(static, {})[1]["r"], np.arange(5))


@pytest.mark.parametrize("backend", _python_backends(), ids=lambda b: type(b).__name__)
def test_indexing_with_connections_picks_rows_and_differentiates(backend):
    from mithril.models import ArgMax

    model = Model()  # CLIP's text pooling: x[arange(batch), argmax(text)]
    model |= Relu().connect(IOKey("x", shape=[None, None, 4], differentiable=True), output="h")
    model |= ArgMax(axis=-1).connect(IOKey("text", type=int), output="eot")
    model |= ml.Size(dim=0).connect(model.h)
    model |= ml.Arange().connect(stop=model.cout, output="rows")
    model |= Sum().connect(model.h[model.rows, model.eot], output=IOKey("loss"))
    model.expose_keys("loss")
    pm = ml.compile(model, backend)
    x, text = RNG.normal(size=(3, 5, 4)), RNG.integers(0, 9, size=(3, 5))
    out, grads = pm.evaluate({"x": backend.array(x)}, {"text": backend.array(text)}, output_gradients=True)
    rows, cols = np.arange(3), text.argmax(-1)
    np.testing.assert_allclose(float(out["loss"]), np.maximum(x, 0)[rows, cols].sum())
    expected = np.zeros_like(x)
    expected[rows, cols] = (x[rows, cols] > 0).astype(float)
    np.testing.assert_allclose(np.asarray(backend.to_numpy(grads["x"])), expected)


# -- 5. TrainModel ------------------------------------------------------------------------------------
def _mlp() -> Model:
    model = Model()
    model |= Linear(dimension=3).connect("input", output="hidden")
    model |= Relu().connect("hidden", output="act")
    model |= Linear(dimension=2).connect("act", output=IOKey("output"))
    return model


def test_train_model_final_cost_combines_losses_regularization_and_metrics():
    import re

    from mithril.models import L1, L2, AbsoluteError, ArgMax, Mean, SquaredError, TrainModel

    train = TrainModel(_mlp())
    train.add_loss(SquaredError(), reduce_steps=[Mean()], input="output", target="target", key_name="mse")
    train.add_loss(AbsoluteError(), input="output", target="target", coef=0.5)  # our block's own mean
    train.add_regularization(L2(), coef=1e-2, input=re.compile(r"weight"))
    train.add_regularization(L1(), coef=1e-3, input="bias")
    train.add_metric(ArgMax(axis=-1), input="output", key_name="pred")
    train.set_loss_combiner(Mean())
    assert {"final_cost", "mse", "pred", "output"} <= set(train.output_keys)
    pm = ml.compile(train, ml.NumpyBackend(dtype=ml.float64), shapes={"input": [4, 5]})
    plain = ml.compile(_mlp(), ml.NumpyBackend(dtype=ml.float64), shapes={"input": [4, 5]})
    assert sorted(pm.param_keys) == sorted(plain.param_keys)  # regularisation keeps the parameter names
    params = pm.randomize_params(seed=1)
    x, t = RNG.normal(size=(4, 5)), RNG.normal(size=(4, 2))
    out, grads = pm.evaluate(params, {"input": x, "target": t}, output_gradients=True)
    o = out["output"]
    weights = [params[k] for k, path in pm.input_paths.items() if path.endswith("weight")]
    expected = (((o - t) ** 2).mean() + 0.5 * np.abs(o - t).mean()) / 2
    # as in Mithril, each regularisation term is divided by the elements its losses average: 4 x 2 = 8 for both
    expected += (1e-2 * 0.5 * sum((w**2).sum() for w in weights) + 1e-3 * np.abs(params["bias"]).sum()) / 8
    np.testing.assert_allclose(out["final_cost"], expected, rtol=1e-12)
    np.testing.assert_allclose(out["mse"], ((o - t) ** 2).mean())
    np.testing.assert_array_equal(out["pred"], o.argmax(-1))
    # the gradient is d final_cost (finite differences on one weight entry)
    key, eps = pm.param_keys[0], 1e-6
    bumped = {**params, key: params[key].copy()}
    bumped[key].flat[0] += eps
    numeric = (pm.evaluate(bumped, {"input": x, "target": t})["final_cost"] - out["final_cost"]) / eps
    np.testing.assert_allclose(grads[key].flat[0], numeric, rtol=1e-4, atol=1e-8)


def test_train_model_trains_with_plain_gradient_steps():
    from mithril.models import SquaredError, TrainModel

    train = TrainModel(_mlp())
    train.add_loss(SquaredError(), input="output", target="target")
    pm = ml.compile(train, ml.NumpyBackend(dtype=ml.float64), shapes={"input": [16, 5]})
    params = pm.randomize_params(seed=0)
    x = RNG.normal(size=(16, 5))
    t = np.stack([x[:, 0] - x[:, 1], x[:, 2]], axis=1)
    first = None
    for _ in range(60):
        out, grads = pm.evaluate(params, {"input": x, "target": t}, output_gradients=True)
        first = out["final_cost"] if first is None else first
        params = {k: v - 0.1 * grads[k] for k, v in params.items()}
    assert out["final_cost"] < 0.5 * first


def test_cross_entropy_weights_pos_weight_and_robust():
    from mithril.models import BinaryCrossEntropy, CrossEntropy

    x, y, w = RNG.normal(size=(5, 3)), RNG.integers(0, 3, size=5), np.array([0.2, 1.0, 3.0])
    log_p = x - np.log(np.exp(x).sum(-1, keepdims=True))
    model = Model()
    model |= CrossEntropy(weights=list(w), reduction="none").connect("logits", "labels", output=IOKey("weighted"))
    model |= CrossEntropy(categorical=False, weights=list(w), reduction="none").connect(
        "logits", "probs", output=IOKey("soft")
    )
    model |= BinaryCrossEntropy(pos_weight=2.5, reduction="none").connect("logits", "bits", output=IOKey("bce"))
    model |= CrossEntropy(input_type="probs", robust=False, reduction="none").connect(
        "p", "labels", output=IOKey("exact")
    )
    model |= CrossEntropy(input_type="probs", robust=True, reduction="none").connect(
        "p", "labels", output=IOKey("robust")
    )
    probs, bits = RNG.dirichlet([1.0, 1.0, 1.0], size=5), RNG.integers(0, 2, size=(5, 3)).astype(float)
    p = np.zeros((5, 3))
    p[np.arange(5), (y + 1) % 3] = 1.0  # probability 0 on the true class
    _, out = _run(model, {"logits": x, "labels": y, "probs": probs, "bits": bits, "p": p})
    np.testing.assert_allclose(out["weighted"], -w[y] * log_p[np.arange(5), y])
    np.testing.assert_allclose(out["soft"], -(w * probs * log_p).sum(-1))
    log_sig, log_1m = -np.logaddexp(0, -x), -np.logaddexp(0, x)
    np.testing.assert_allclose(out["bce"], -(2.5 * bits * log_sig + (1 - bits) * log_1m))
    # Mithril's robust log at 0: log(tiny) - 1 with tiny the dtype's smallest normal number (float64 here)
    assert np.all(np.isinf(out["exact"])) and np.allclose(out["robust"], 1.0 - np.log(np.finfo(np.float64).tiny))


def test_reshape_and_randn_blocks_take_shape_values():
    model = Model()
    model |= Relu().connect(IOKey("x", shape=[None, None, 6]), output="h")
    shp = model.h.shape
    model |= ml.Reshape().connect(model.h, shape=(shp[0], shp[1], 2, -1), output=IOKey("r"))
    model |= ml.Randn(shape=(2, shp[2])).connect(output=IOKey("noise"))
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64))
    for batch, length in ((1, 2), (3, 4)):
        x = RNG.normal(size=(batch, length, 6))
        out = pm.evaluate({}, {"x": x})
        np.testing.assert_array_equal(out["r"], np.maximum(x, 0).reshape(batch, length, 2, 3))
        assert out["noise"].shape == (2, 6)
    with pytest.raises(ml.errors.ShapeError, match="static shapes"):
        ml.Randn(shape=(shp[0], 2))
    with pytest.raises(ArgumentError, match="give shape="):
        Model().__ior__(ml.Reshape().connect("x"))


def test_long_parameter_names_load_with_dots_or_underscores(tmp_path):
    pm = ml.compile(_mlp(), ml.NumpyBackend(dtype=ml.float64), shapes={"input": [2, 5]}, use_short_namings=False)
    params = pm.randomize_params(seed=3)
    assert "linear_0.weight" in params  # the separator of long names is "."
    np.savez(tmp_path / "underscores.npz", **{k.replace(".", "_"): v for k, v in params.items()})
    loaded = pm.load_params(tmp_path / "underscores.npz")
    assert sorted(loaded) == sorted(params)
    for key in params:
        np.testing.assert_array_equal(loaded[key], params[key])


def test_iokey_shape_is_symbolic_until_the_key_is_in_a_model():
    def self_attention(d_model: int, n_head: int) -> Model:  # as Mithril's CLIP example writes it
        block = Model()
        queries = IOKey("queries")
        B, L = queries.shape[0], queries.shape[1]
        block |= Linear(d_model * 3, name="in_proj").connect(queries, output="in_proj")
        qkv = block.in_proj.reshape((B, L, 3, -1))
        heads = [qkv[:, :, i, :].reshape((B, L, n_head, d_model // n_head)).transpose((0, 2, 1, 3)) for i in range(3)]
        block |= ScaledDotProduct(is_causal=False).connect(*heads, output="attention")
        block |= Buffer().connect(
            block.attention.transpose((0, 2, 1, 3)).reshape((B, L, d_model)), output=IOKey("output")
        )
        return block

    assert IOKey("x").shape == None and not IOKey("x").shape and IOKey("x", shape=[2]).shape == [2]  # noqa: E711
    model = Model()
    model |= self_attention(8, 2).connect(queries="x", output=IOKey("y"))
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes={"x": [None, None, 8]})
    params = pm.randomize_params(seed=0)
    w, b = params["weight"], params["bias"]
    for batch, length in ((1, 3), (2, 5)):
        x = RNG.normal(size=(batch, length, 8))
        qkv = (x @ w.T + b).reshape(batch, length, 3, 8)
        q, k, v = (qkv[:, :, i].reshape(batch, length, 2, 4).transpose(0, 2, 1, 3) for i in range(3))
        expected = _attention(q, k, v, causal=False).transpose(0, 2, 1, 3).reshape(batch, length, 8)
        np.testing.assert_allclose(pm.evaluate(params, {"x": x})["y"], expected, rtol=1e-10)


def test_iokey_shape_reads_the_block_key_not_the_producing_child_key_of_the_same_name():
    block = Model()  # IOKey("input").shape after Split/transpose children that have an "input" key of their own
    x = IOKey("input", shape=[None, None, 4])
    shp = IOKey("input").shape
    block |= Linear(12, name="in_proj").connect(x, output="qkv")
    block |= Split(3, axis=-1).connect(block.qkv, output="parts")
    heads = block.parts[0].reshape((shp[0], shp[1], 2, -1)).transpose((0, 2, 1, 3))  # [B, 2, L, 2]
    block |= Buffer().connect(heads.transpose((0, 2, 1, 3)).reshape((shp[0], shp[1], 4)), output=IOKey("output"))
    assert list(block.output.shape)[1:] == [list(block.input.shape)[1], 4]  # L (a symbol), not the heads (2)
    pm = ml.compile(block, ml.NumpyBackend(dtype=ml.float64))
    params = pm.randomize_params(seed=0)
    x = RNG.normal(size=(3, 5, 4))
    expected = (x @ params["weight"].T + params["bias"])[..., :4]
    np.testing.assert_allclose(pm.evaluate(params, {"input": x})["output"], expected, rtol=1e-12)


def test_norm_blocks_take_input_first_as_mithrils_api():
    from mithril.models import LayerNorm, RMSNorm

    assert LayerNorm().input_keys == ["input", "weight", "bias"] and RMSNorm().input_keys == ["input", "weight"]
    model = Model()
    model |= LayerNorm(name="ln").connect("x", output=IOKey("y"))  # positional: the input
    x = RNG.normal(size=(2, 3))
    _, out = _run(model, {"x": x}, params={"weight": np.full(3, 2.0), "bias": np.ones(3)}, use_short_namings=True)
    centered = x - x.mean(-1, keepdims=True)
    np.testing.assert_allclose(out["y"], 2 * centered / np.sqrt((centered**2).mean(-1, keepdims=True) + 1e-5) + 1)


def test_iokey_tables_and_iokey_indices_index_with_tensors():
    model = Model()  # OpenAI CLIP's positional_embedding[arange(L)]: a bare parameter indexed by a connection
    model |= ml.Size(dim=1).connect(IOKey("text", type=int, shape=[None, None]), output="length")
    model |= ml.Arange().connect(stop=model.length, output="positions")
    table = IOKey("positional_embedding", shape=[6, 3], differentiable=True)
    model |= Buffer().connect(table[model.positions], output=IOKey("pos"))
    model |= Buffer().connect(model.pos[IOKey("ids", type=int)], output=IOKey("picked"))  # an IOKey as the index
    params = {"positional_embedding": RNG.normal(size=(6, 3))}
    text, ids = np.zeros((2, 4), dtype=int), np.array([3, 0, 3])
    _, out = _run(model, {"text": text, "ids": ids}, params=params)
    np.testing.assert_array_equal(out["pos"], params["positional_embedding"][:4])
    np.testing.assert_array_equal(out["picked"], params["positional_embedding"][ids])


def test_extend_needs_a_canonical_input_instead_of_connecting_nothing():
    gate = Model()  # no canonical input: Sigmoid's input is computed; += would silently leave it unconnected
    gate |= ml.models.Sigmoid().connect(IOKey("input") * 1.702, output="s")
    gate |= Buffer().connect(IOKey("input") * gate.s, output=IOKey("output"))
    model = Model()
    model |= Linear(4).connect(IOKey("x", shape=[2, 3]), output="h")
    with pytest.raises(ModelConnectionError, match="no canonical input"):
        model += gate
    gate2 = Model()
    gate2 |= ml.models.Sigmoid().connect(IOKey("input") * 1.702, output="s")
    gate2 |= Buffer().connect(IOKey("input") * gate2.s, output=IOKey("output"))
    model += gate2.set_cin("input")
    x = RNG.normal(size=(2, 3))
    _pm, out = _run(model, {"x": x})
    assert out["output"].shape == (2, 4)


def test_reshape_infers_minus_one_when_symbolic_dims_cancel():
    model = Model()  # a ViT's patches: [B, C, g, g] -> [B, C, g * g] with a symbolic batch, then sliced
    model |= Relu().connect(IOKey("image", shape=[None, 8, 2, 3]), output="h")
    shp = model.h.shape
    tokens = model.h.reshape((shp[0], 8, -1)).transpose((0, 2, 1))
    model |= Buffer().connect(tokens[:, :1, :], output=IOKey("first"))
    assert list(model.first.shape)[1:] == [1, 8] and tokens.shape[1].value == 6


def test_merge_connections_makes_one_value_and_checks_its_arguments():
    from mithril.errors import ModelConnectionError, ModelKeyError
    from mithril.models import Add, Multiply

    model = Model()
    model |= (first := Multiply())(left="a", right="b")
    model |= (second := Add())(left=first.output, right="c", output=IOKey("out"))
    model.merge_connections(first.left, second.right, name="x")  # x * b + x
    assert sorted(model.input_keys) == ["b", "x"]
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes={"x": [2], "b": [2]}, trainable_keys={"x", "b"})
    out, grads = pm.evaluate(
        {"x": np.array([2.0, 3.0]), "b": np.array([5.0, 7.0])}, output_gradients={"out": np.ones(2)}
    )
    np.testing.assert_allclose(out["out"], [12.0, 24.0])
    np.testing.assert_allclose(grads["x"], [6.0, 8.0])
    with pytest.raises(ModelKeyError, match="no key 'nope'"):
        model.merge_connections("nope", "b")
    with pytest.raises(ModelConnectionError, match="outside"):
        model.merge_connections(Multiply().left, "b")
