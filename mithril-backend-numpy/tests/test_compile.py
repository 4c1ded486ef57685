"""ml.compile and PhysicalModel on the NumPy backend: options, passes, generated code, bad input."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import (
    DtypeError,
    MithrilError,
    ModelConnectionError,
    ModelKeyError,
    ShapeError,
    UnsupportedPrimitiveError,
)
from mithril.models import MLP, Add, Embedding, IOKey, Lambda, Linear, Model, Multiply, Relu, Sum


@pytest.fixture
def backend():
    return ml.NumpyBackend(dtype=ml.float64, seed=0)


def mlp_model():
    model = Model()
    model |= Linear(8)(input="input")
    model += Relu()
    model += Linear(3)
    return model


def compiled(backend, **kwargs):
    return ml.compile(mlp_model(), backend, shapes={"input": [4, 5]}, **kwargs)


def test_keys_shapes_and_short_names(backend):
    pm = compiled(backend)
    assert pm.param_keys == ["weight", "bias", "weight_1", "bias_1"]
    assert pm.data_keys == ["input"] and pm.output_keys == ["output"]
    assert pm.shapes["weight"] == [8, 5] and pm.shapes["output"] == [4, 3]


def test_long_names_use_model_paths(backend):
    pm = compiled(backend, use_short_namings=False)
    assert "linear_0.weight" in pm.param_keys and "linear_1.bias" in pm.param_keys


def test_generated_source_is_written_and_readable(backend, tmp_path):
    path = tmp_path / "mlp.py"
    pm = compiled(backend, file_path=path)
    text = path.read_text()
    assert text == pm.source
    assert "def evaluate(params, data):" in text and "def evaluate_gradients(params, data, cotangents):" in text
    assert "linear(" in text and "relu(" in text


def test_unknown_compile_option_names_accepted_ones(backend):
    with pytest.raises(TypeError, match=r"pipelining.*accepted: shapes, data_keys"):
        ml.compile(mlp_model(), backend, pipelining="data")


def test_parallelism_needs_a_backend_with_a_device_mesh(backend):
    with pytest.raises(TypeError, match=r"parallelism='data'.*device mesh.*JaxBackend\(device_mesh=\(2,\)\)"):
        ml.compile(mlp_model(), backend, parallelism="data")


def test_overlapping_key_sets_are_rejected(backend):
    with pytest.raises(ModelKeyError, match="both data_keys and trainable_keys"):
        compiled(backend, data_keys={"weight"}, trainable_keys={"weight"})


def test_constant_for_a_non_input_key(backend):
    with pytest.raises(ModelKeyError, match=r"constant_keys.*\['output'\] are not inputs"):
        compiled(backend, constant_keys={"output": np.zeros((4, 3))})


def test_constant_keys_are_folded(backend):
    model = Model()
    model |= Add()(left="x", right="y")
    model += Multiply()(right="z")
    pm = ml.compile(model, backend, constant_keys={"y": np.ones(3), "z": 2.0}, data_keys={"x"})
    out = pm.evaluate({}, {"x": np.arange(3.0)})
    np.testing.assert_allclose(out["output"], (np.arange(3.0) + 1) * 2)


def test_constant_folding_and_cse(backend):
    model = Model()
    model |= Add()(left=IOKey("a", value=np.ones(3)), right=IOKey("b", value=np.ones(3)), output="c")
    model |= Relu()(input="x", output="r1")
    model |= Relu()(input="x", output="r2")
    model |= Add()(left="r1", right="c", output="out1")
    pm = ml.compile(model, backend, shapes={"x": [3]})
    assert pm.primitive_count == 2  # a+b folded; the two relu(x) merged
    out = pm.evaluate({}, {"x": np.array([-1.0, 0.5, 2.0])})
    np.testing.assert_allclose(out["out1"], [2.0, 2.5, 4.0])
    np.testing.assert_allclose(out["r1"], out["r2"])


def test_discard_keys_prunes(backend):
    model = Model()
    model |= Relu()(input="x", output="a")
    model |= Sum()(input="x", output="b")
    pm = ml.compile(model, backend, discard_keys={"b"})
    assert pm.output_keys == ["a"] and pm.primitive_count == 1


def test_discarding_every_output_gives_an_empty_model(backend):
    """As in Mithril's API: not an error, a model that computes nothing."""
    model = Model()
    model |= Relu()(input="x", output="a")
    model |= Sum()(input="x", output="b")
    pm = ml.compile(model, backend, shapes={"x": [3]}, discard_keys={"a", "b"})
    assert pm.output_keys == [] and pm.primitive_count == 0
    assert pm.evaluate({}, {"x": np.ones(3)}) == {}


def test_evaluate_reports_missing_and_unknown_keys(backend):
    pm = compiled(backend)
    params = pm.randomize_params()
    with pytest.raises(ModelKeyError, match=r"missing \['input'\]"):
        pm.evaluate(params, {})
    with pytest.raises(ModelKeyError, match=r"unknown \['inputs'\]"):
        pm.evaluate(params, {"input": np.zeros((4, 5)), "inputs": 1})
    partial = dict(params)
    del partial["bias_1"]
    with pytest.raises(ModelKeyError, match=r"params=.*missing \['bias_1'\]"):
        pm.evaluate(partial, {"input": np.zeros((4, 5))})


def test_evaluate_reports_wrong_shape_and_dtype(backend):
    pm = compiled(backend)
    params = pm.randomize_params()
    with pytest.raises(ShapeError, match=r"'input' has shape \(4, 6\), expected \(4, 5\)"):
        pm.evaluate(params, {"input": np.zeros((4, 6))})
    bad = dict(params, weight=params["weight"].astype(np.float32))
    with pytest.raises(DtypeError, match="'weight' has dtype float32"):
        pm.evaluate(bad, {"input": np.zeros((4, 5))})
    bad_shape = dict(params, bias=np.zeros(7))
    with pytest.raises(ShapeError, match="'bias' has shape"):
        pm.evaluate(bad_shape, {"input": np.zeros((4, 5))})


def test_bad_input_does_not_corrupt_the_model(backend):
    pm = compiled(backend)
    params = pm.randomize_params()
    x = np.ones((4, 5))
    before = pm.evaluate(params, {"input": x})["output"]
    with pytest.raises(ShapeError):
        pm.evaluate(params, {"input": np.ones((2, 5))})
    np.testing.assert_array_equal(pm.evaluate(params, {"input": x})["output"], before)


def test_data_from_numpy_is_converted_but_floats_never_become_indices(backend):
    model = Model()
    model |= Embedding(10, 4)(input="ids", output=IOKey("out"))
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float32), shapes={"ids": [2]})
    params = pm.randomize_params()
    out = pm.evaluate(params, {"ids": [1, 3]})
    assert out["out"].dtype == np.float32
    with pytest.raises(DtypeError, match="float values"):
        pm.evaluate(params, {"ids": np.array([1.0, 3.0])})


def test_connect_time_shape_error_is_raised_before_compile():
    model = Model()
    model |= Linear(4)(input=IOKey("x", shape=[2, 3]), output="h")
    with pytest.raises(ShapeError, match="add"):
        model |= Add()(left="h", right=IOKey("b", shape=[3]))


def test_compiling_a_child_is_rejected(backend):
    inner = Linear(3)
    outer = Model()
    outer |= inner
    with pytest.raises(ModelConnectionError, match="compile its root"):
        ml.compile(inner, backend)


def test_output_gradients_true_for_a_scalar_loss(backend):
    model = Model()
    model |= Linear(2)(input="input")
    model += Sum()(output=IOKey("loss"))
    pm = ml.compile(model, backend, shapes={"input": [3, 4]})
    params = pm.randomize_params()
    x = np.ones((3, 4))
    _, grads = pm.evaluate(params, {"input": x}, output_gradients=True)
    np.testing.assert_allclose(grads["bias"], [3.0, 3.0])
    np.testing.assert_allclose(grads["weight"], np.full((2, 4), 3.0))


def test_output_gradients_true_needs_a_scalar(backend):
    pm = compiled(backend)
    with pytest.raises(ModelKeyError, match="exactly one scalar output"):
        pm.evaluate(pm.randomize_params(), {"input": np.ones((4, 5))}, output_gradients=True)


def test_inference_model_has_no_gradients(backend):
    pm = compiled(backend, inference=True)
    with pytest.raises(MithrilError, match="inference=True"):
        pm.evaluate(pm.randomize_params(), {"input": np.ones((4, 5))}, output_gradients={"output": np.ones((4, 3))})


def test_randomize_params_is_deterministic_and_pytorch_like(backend):
    pm = ml.compile(MLP(input_size=100, hidden_sizes=[50], output_size=2), backend)
    a, b = pm.randomize_params(seed=3), pm.randomize_params(seed=3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert np.abs(a["weight0"]).max() <= 1 / np.sqrt(100)


def test_randomize_params_needs_static_shapes(backend):
    pm = ml.compile(mlp_model(), backend)
    with pytest.raises(ShapeError, match="weight"):
        pm.randomize_params()


def test_save_and_load_params(backend, tmp_path):
    pm = compiled(backend)
    params = pm.randomize_params(seed=1)
    for name in ("p.npz", "p.safetensors"):
        pm.save_params(tmp_path / name, params)
        loaded = pm.load_params(tmp_path / name)
        assert all(np.array_equal(loaded[k], params[k]) for k in params)


def test_lambda_runs_forward_and_refuses_manual_gradients(backend):
    model = Model()
    model |= Lambda(lambda x: np.maximum(0.01 * x, x))(input="x", output=IOKey("y"))
    pm = ml.compile(model, backend, inference=True)
    np.testing.assert_allclose(pm.evaluate({}, {"x": np.array([-1.0, 2.0])})["y"], [-0.01, 2.0])
    trainable = Model()
    trainable |= Lambda(lambda x: x * 2)(input=IOKey("x", differentiable=True), output=IOKey("y"))
    with pytest.raises(UnsupportedPrimitiveError, match="'lambda' has no gradient rule"):
        ml.compile(trainable, backend)


def test_same_model_compiles_twice_with_different_shapes(backend):
    model = mlp_model()
    a = ml.compile(model, backend, shapes={"input": [4, 5]})
    b = ml.compile(model, backend, shapes={"input": [2, 7]})
    assert a.shapes["weight"] == [8, 5] and b.shapes["weight"] == [8, 7]


def test_backend_rejects_unknown_dtype():
    with pytest.raises(TypeError, match="does not compute in int32"):
        ml.NumpyBackend(dtype=ml.int32)


def test_inputs_sharing_a_symbolic_dim_must_agree(backend):
    add = Add()
    add.set_shapes(left=["N", 4], right=["N", 4])
    model = Model()
    model |= add(left="l", right="r", output=IOKey("out"))
    pm = ml.compile(model, backend)
    with pytest.raises(ShapeError, match="'r' axis 0 has size 1 but 'l' axis 0 has size 3"):
        pm.evaluate({}, {"l": np.ones((3, 4)), "r": np.ones((1, 4))})
    assert pm.evaluate({}, {"l": np.ones((2, 4)), "r": np.ones((2, 4))})["out"].shape == (2, 4)


def test_constant_and_shape_for_the_same_key(backend):
    model = Model()
    model |= Add()(left="x", right="y", output=IOKey("out"))
    pm = ml.compile(model, backend, shapes={"x": [3]}, constant_keys={"x": np.ones(3)})
    np.testing.assert_allclose(pm.evaluate({}, {"y": np.ones(3)})["out"], [2.0, 2.0, 2.0])


def test_bias_initialisation_uses_the_weight_fan_in_like_pytorch(backend):
    pm = ml.compile(Linear(1000), backend, shapes={"input": [2, 3]})
    bias = pm.randomize_params(seed=0)["bias"]
    # uniform(+-1/sqrt(3)) from the weight's fan-in 3 (not +-1/sqrt(1000) from the bias's own size)
    assert 0.5 < np.abs(bias).max() <= 1 / np.sqrt(3)


def test_safe_names_false_is_refused_for_python_code(backend):
    with pytest.raises(ValueError, match="safe_names=False"):
        ml.compile(mlp_model(), backend, safe_names=False)


def test_shapes_given_for_outputs_propagate_back_to_inputs(backend):
    model = Model()
    model |= Linear(4, in_features=3)
    model += Relu()
    pm = ml.compile(model, backend, shapes={"output": [8, 4]})
    assert pm.shapes["input"] == [8, 3] and pm.shapes["weight"] == [4, 3]
