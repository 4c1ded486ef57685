"""An ``Primitive`` subclass with ``compute`` (Mithril's published way to write a custom operator) becomes
a primitive on every Python backend; ``compute_grad`` gives the symbolic backends its gradient."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError
from mithril.models import Linear, Model, Primitive
from mithril.plugins.manager import reset


@pytest.fixture(autouse=True)
def _forget_in_process_primitives():
    yield
    reset()


def _cube_class(backend):
    class CubePlusX(Primitive):
        def compute(self, inputs):
            x = inputs["input"]
            return {"output": x * x * x + x}

        def compute_grad(self, inputs, grad):
            x = inputs["input"]
            return grad * (3 * x * x + 1)

    return CubePlusX


def test_subclass_is_a_primitive_with_outputs_and_gradients_on_numpy() -> None:
    backend = ml.NumpyBackend(dtype=ml.float64)
    CubePlusX = _cube_class(backend)
    model = Model()
    model |= Linear(dimension=3)
    operator = CubePlusX()
    assert operator.primitive_name == "cube_plus_x" and operator.input_keys == ["input"]
    model += operator
    pm = ml.compile(model, backend, shapes={"input": [2, 4]})
    params = pm.randomize_params(seed=0)
    x, cot = np.random.default_rng(0).standard_normal((2, 4)), np.random.default_rng(1).standard_normal((2, 3))
    out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": cot})
    hidden = x @ params["weight"].T + params["bias"]
    np.testing.assert_allclose(out["output"], hidden**3 + hidden, rtol=1e-12)
    np.testing.assert_allclose(grads["bias"], (cot * (3 * hidden**2 + 1)).sum(0), rtol=1e-12)


def test_a_second_class_with_the_same_name_is_refused() -> None:
    _cube_class(None)()
    with pytest.raises(ArgumentError, match=r"'cube_plus_x'.*already defined.*rename the class"):
        _cube_class(None)()


def test_an_operator_without_a_name_or_compute_says_what_it_needs() -> None:
    class Nothing(Primitive):
        pass

    with pytest.raises(ArgumentError, match=r"Nothing\(\) needs a primitive name.*compute\(self, inputs\)"):
        Nothing()
