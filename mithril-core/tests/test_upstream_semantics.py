"""Mithril's published semantics this project follows: ``ml.Tensor`` values, ``TrainModel``'s regularisation
scaling and API, and the compiled model's ``get_shapes``/``discarded_keys``/partial ``output_gradients``."""

from __future__ import annotations

import re

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, DtypeError, MithrilError
from mithril.models import (
    L1,
    L2,
    Add,
    IOKey,
    Linear,
    Mean,
    Minimum,
    Model,
    Multiply,
    QuadraticFormRegularizer,
    Relu,
    SquaredError,
    Sum,
    TrainModel,
)


def _numpy() -> ml.Backend:
    return ml.NumpyBackend(dtype=ml.float64)


# -- 1. ml.Tensor as a value -------------------------------------------------------------------------------------


def test_tensor_holds_a_value_and_its_kind() -> None:
    assert (ml.Tensor(5).value, ml.Tensor(5).kind, ml.Tensor(5).differentiable) == (5, "int", False)
    assert ml.Tensor(float("-inf")).kind == "float"
    declared = ml.Tensor[float](differentiable=True)
    assert (declared.has_value, declared.kind, declared.differentiable) == (False, "float", True)
    assert ml.Tensor(differentiable=True).kind == "float"
    assert ml.IOKey("x", type=ml.Tensor[float]).type == "float"  # still a type marker


def test_tensor_connected_as_a_constant() -> None:
    model = Model()
    model |= Minimum()(left="x", right=ml.Tensor(5.0), output="low")
    model |= Add()(left="x", right=IOKey(value=ml.Tensor([1.0, 2.0, 3.0])), output="shifted")
    pm = ml.compile(model, _numpy(), shapes={"x": [3]}, jit=False)
    assert pm.input_keys == ["x"]
    out = pm.evaluate({}, {"x": np.array([1.0, 7.0, 9.0])})
    np.testing.assert_allclose(out["low"], [1.0, 5.0, 5.0])
    np.testing.assert_allclose(out["shifted"], [2.0, 9.0, 12.0])


def test_tensor_in_arithmetic_and_set_values() -> None:
    model = Model()
    model |= Relu()(input="x", output="r")
    model |= Multiply()(left=model.r, right="scale", output="y")
    model.set_values(scale=ml.Tensor(-2.0))
    pm = ml.compile(model, _numpy(), jit=False)
    np.testing.assert_allclose(pm.evaluate({}, {"x": np.array([-1.0, 3.0])})["y"], [0.0, -6.0])


def test_tensor_refuses_what_mithril_refuses() -> None:
    with pytest.raises(DtypeError, match=r"Tensor\('abc'\).*number, bool"):
        ml.Tensor("abc")
    with pytest.raises(ArgumentError, match="differentiable=True takes no value"):
        ml.Tensor(1.0, differentiable=True)
    with pytest.raises(DtypeError, match="only float tensors can be differentiable, type is int"):
        ml.Tensor[int](differentiable=True)


# -- 2. TrainModel -----------------------------------------------------------------------------------------------


def _linear_train(coef: float = 0.1) -> TrainModel:
    model = Model()
    model |= Linear(1)(input="input", weight="weight", bias="bias", output="output")
    train = TrainModel(model)
    train.add_loss(SquaredError(), [Mean()], input="output", target="target")
    train.add_regularization(L2(), ml.Tensor(coef), input="weight")
    return train


def test_regularisation_is_divided_by_the_elements_the_loss_averages() -> None:
    # Mithril's test_linear_10 semantics: mse + 0.1 * L2(w) / N, N = 4 x 1 elements averaged
    train = _linear_train()
    train.finalize()
    pm = ml.compile(train, _numpy(), shapes={"input": [4, 2]}, jit=False)
    x = np.array([[1.0, 2.0], [0.0, 1.0], [2.0, 2.0], [1.0, -1.0]])
    t = np.array([[1.0], [2.0], [3.0], [4.0]])
    w, b = np.array([[0.5, -1.0]]), np.array([0.25])
    out, grads = pm.evaluate({"weight": w, "bias": b}, {"input": x, "target": t}, output_gradients=True)
    o = x @ w.T + b
    expected = ((o - t) ** 2).mean() + 0.1 * 0.5 * (w**2).sum() / 4
    np.testing.assert_allclose(out["final_cost"], expected, rtol=1e-12)
    np.testing.assert_allclose(grads["weight"], (2 * (o - t) * x).mean(0, keepdims=True) + 0.1 * w / 4, rtol=1e-12)


def test_regularisation_scaling_counts_only_mean_min_max_and_dependent_losses() -> None:
    model = Model()
    model |= Linear(2)(input="input", weight="weight", bias="bias", output="output")
    train = TrainModel(model)
    train.add_loss(SquaredError(), [Sum()], input="output", target="target")  # a Sum counts 1
    train.add_loss(SquaredError(), [Mean(axis=0), Mean()], input="output", target="target")  # 3 x 2 = 6
    train.add_loss(SquaredError(), [], input="other", target="target")  # empty steps: Mean; no weight in it
    train.add_regularization(L1(), 1.0, input=re.compile("weight"))
    pm = ml.compile(train, _numpy(), shapes={"input": [3, 2]}, jit=False)
    rng = np.random.default_rng(0)
    x, t, other = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    w, b = rng.normal(size=(2, 2)), rng.normal(size=2)
    out = pm.evaluate({"weight": w, "bias": b}, {"input": x, "target": t, "other": other})
    o = x @ w.T + b
    losses = ((o - t) ** 2).sum() + ((o - t) ** 2).mean() + ((other - t) ** 2).mean()
    # the two losses that depend on weight average over 1 and 6 elements: their geometric mean divides
    np.testing.assert_allclose(out["final_cost"], losses + np.abs(w).sum() / np.sqrt(1 * 6), rtol=1e-12)


def test_add_regularization_takes_other_keys_and_reg_key() -> None:
    model = Model()
    model |= Linear(1)(input="input", weight="weight", bias="bias", output="output")
    train = TrainModel(model)
    train.add_loss(SquaredError(), input="output", target="target")  # no steps: Mean over 3 x 1
    # Mithril's QuadraticFormRegularizer takes a row [1, N]: the weight of a one-output Linear
    train.add_regularization(QuadraticFormRegularizer(), 0.5, "input", "qf", input="weight", kernel="kernel")
    pm = ml.compile(train, _numpy(), shapes={"input": [3, 4]}, jit=False)
    rng = np.random.default_rng(1)
    x, t, k = rng.normal(size=(3, 4)), rng.normal(size=(3, 1)), np.eye(4) * 2.0 + 0.5
    w, b = rng.normal(size=(1, 4)), rng.normal(size=1)
    out = pm.evaluate({"weight": w, "bias": b}, {"input": x, "target": t, "kernel": k})
    o = x @ w.T + b
    np.testing.assert_allclose(out["qf"], 0.5 * w @ k @ w.T, rtol=1e-12)  # [1, 1], as in Mithril
    assert np.shape(out["final_cost"]) == ()  # the [1, 1] term is summed into the scalar cost
    np.testing.assert_allclose(
        out["final_cost"], ((o - t) ** 2).mean() + 0.5 * (0.5 * w @ k @ w.T).item() / 3, rtol=1e-12
    )


def test_train_model_api_names_and_finalize() -> None:
    model = Model()
    model |= Linear(1)(input="input", weight="weight", bias="bias", output="output")
    train = TrainModel(model)
    with pytest.warns(DeprecationWarning, match=r"add_loss\(loss_model=...\)"):
        train.add_loss(loss=SquaredError(), input="output", target="target")
    with pytest.warns(DeprecationWarning, match="reduce_steps=..."):
        train.add_regularization(L2(), 0.1, [Sum()], input="weight")
    train.finalize()
    train.finalize()  # twice is harmless
    with pytest.raises(ArgumentError, match="finalized"):
        train.add_loss(SquaredError(), input="output", target="target")
    with pytest.raises(ArgumentError, match="loss_model must be a Model"):
        TrainModel(Linear(1)).add_loss("mse", input="output", target="target")
    with pytest.raises(MithrilError, match=r"no key.*'kernel'"):
        TrainModel(Linear(1)).add_regularization(L2(), 0.1, kernel="weight")


# -- 3. PhysicalModel --------------------------------------------------------------------------------------------


def test_get_shapes() -> None:
    pm = ml.compile(Linear(3), _numpy(), shapes={"input": [None, 2]}, jit=False)
    shapes = pm.get_shapes(symbolic=False)
    assert shapes["weight"] == [3, 2] and shapes["input"] == [None, 2] and shapes["output"] == [None, 3]
    symbolic = pm.get_shapes(symbolic=True)
    assert symbolic["weight"] == [3, 2] and symbolic["input"][1] == 2 and isinstance(symbolic["input"][0], str)
    assert symbolic["input"][0] == symbolic["output"][0]


def test_discard_keys_drop_the_inputs_only_they_need() -> None:
    pm = ml.compile(Linear(2), _numpy(), discard_keys=["output"], inference=True, jit=False)
    assert pm.output_keys == [] and pm.input_keys == []
    assert pm.discarded_keys == {"output", "input", "weight", "bias"}
    model = Model()
    model |= Multiply()(left="a", right="b", output="ab")
    model |= Add()(left="b", right="c", output="bc")
    pm = ml.compile(model, _numpy(), discard_keys=["ab"], jit=False)
    assert sorted(pm.input_keys) == ["b", "c"] and pm.discarded_keys == {"ab", "a"}
    out = pm.evaluate({}, {"a": np.ones(2), "b": np.ones(2), "c": np.ones(2)})  # a discarded input is ignored
    np.testing.assert_allclose(out["bc"], [2.0, 2.0])


def test_discarding_a_loss_keeps_the_output_it_consumes() -> None:
    # Mithril: 'output' still feeds the loss, so discarding it does not reach the model's parameters
    train = TrainModel(Linear(1))
    train.add_loss(SquaredError(), [Mean()], input="output", target="target")
    train.finalize()
    pm = ml.compile(train, _numpy(), discard_keys=["final_cost", "output"], inference=True, jit=False)
    assert pm.output_keys == []
    assert sorted(pm.input_keys) == ["bias", "input", "weight"]
    assert "target" in pm.discarded_keys and "final_cost" in pm.discarded_keys


def test_partial_output_gradients_mean_no_gradient_from_the_others() -> None:
    model = Model()
    model |= Linear(2)(input="input", weight="weight", bias="bias", output="out1")
    model |= Relu()(input=model.out1, output="out2")
    pm = ml.compile(model, _numpy(), jit=False)  # batch size unknown before the call
    rng = np.random.default_rng(2)
    x, w, b = rng.normal(size=(5, 3)), rng.normal(size=(2, 3)), rng.normal(size=2)
    g = rng.normal(size=(5, 2))
    _, grads = pm.evaluate({"weight": w, "bias": b}, {"input": x}, output_gradients={"out1": g})
    np.testing.assert_allclose(grads["weight"], g.T @ x, rtol=1e-12)
    np.testing.assert_allclose(grads["bias"], g.sum(0), rtol=1e-12)


def test_tensor_in_a_concat_list_and_set_types() -> None:
    from mithril.models import Concat

    model = Model()
    model |= Concat(axis=0)(input=["x", ml.Tensor([10.0, 20.0])], output="joined")
    model.set_types(x=ml.Tensor[float])
    model.set_types(joined=ml.Tensor)  # a tensor of any kind: no constraint
    pm = ml.compile(model, _numpy(), shapes={"x": [1]}, jit=False)
    np.testing.assert_allclose(pm.evaluate({}, {"x": np.array([1.0])})["joined"], [1.0, 10.0, 20.0])


@pytest.mark.parametrize("name", ["NumpyBackend", "TorchBackend", "JaxBackend"])
def test_hinge_loss_gradient_at_the_hinge_is_half(name):
    """Mithril's HingeLoss at margin exactly 1: half of each side's gradient (``torch.maximum``'s rule)."""
    from mithril.models import HingeLoss

    try:
        backend = getattr(ml, name)(dtype=ml.float64)
    except Exception:
        pytest.skip(f"{name} is not installed")
    pm = ml.compile(HingeLoss(), backend, shapes={"input": [3, 1], "target": [3, 1]}, trainable_keys={"input"})
    params = {"input": backend.array(np.array([[1.0], [-1.0], [0.25]]))}
    data = {"target": backend.array(np.array([[1.0], [-1.0], [1.0]]))}
    out, grads = pm.evaluate(params, data, output_gradients={"output": backend.ones(3, 1)})
    np.testing.assert_allclose(backend.to_numpy(out["output"]), [[0.0], [0.0], [0.75]])
    np.testing.assert_allclose(backend.to_numpy(grads["input"]), [[-0.5], [0.5], [-1.0]])
