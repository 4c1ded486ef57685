"""Gradients of reductions and ``matmul`` compiled without shapes (the input's rank unknown at compile time)
on NumPy: one compiled model serves inputs of two different ranks, and its gradients equal central finite
differences of ``<output, cotangent>``. With the rank known, the backward graph stays the static one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.models import MatrixMultiply, Max, Mean, Min, Sum, Variance

BACKEND = ml.NumpyBackend(dtype=ml.float64)


def _finite_differences(
    pm: Any, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray, eps: float = 1e-6
) -> dict[str, np.ndarray]:
    """Central differences of ``sum(output * cotangent)`` with respect to every input."""
    grads = {}
    for key, value in inputs.items():
        grad = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            shifted = {}
            for sign in (1.0, -1.0):
                moved = value.copy()
                moved[index] += sign * eps
                out = np.asarray(pm.evaluate({**inputs, key: moved})["output"])
                shifted[sign] = float(np.sum(out * cotangent))
            grad[index] = (shifted[1.0] - shifted[-1.0]) / (2 * eps)
        grads[key] = grad
    return grads


def _check(pm: Any, inputs: Mapping[str, np.ndarray], rng: np.random.Generator) -> None:
    out = np.asarray(pm.evaluate(dict(inputs))["output"])
    cotangent = rng.standard_normal(out.shape)
    _, grads = pm.evaluate(dict(inputs), output_gradients={"output": cotangent})
    expected = _finite_differences(pm, inputs, cotangent)
    for key, value in expected.items():
        assert np.shape(grads[key]) == value.shape, key
        np.testing.assert_allclose(grads[key], value, rtol=1e-6, atol=1e-7, err_msg=key)


REDUCTIONS = {"sum": Sum, "mean": Mean, "max": Max, "min": Min, "var": Variance}
AXES = {  # axis -> two input shapes of different ranks it applies to
    None: ((2, 3), (2, 2, 3)),
    1: ((2, 3), (2, 3, 2)),
    -1: ((3, 2), (2, 1, 3, 2)),
    (0, -1): ((2, 3), (2, 3, 2, 2)),
    (0, 2): ((2, 1, 3), (2, 3, 2, 2)),
}


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", list(AXES), ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_gradient_without_shapes(name: str, axis: Any, keepdim: bool) -> None:
    pm = ml.compile(REDUCTIONS[name](axis=axis, keepdim=keepdim), BACKEND, trainable_keys=["input"], jit=False)
    rng = np.random.default_rng(7)
    for shape in AXES[axis]:
        _check(pm, {"input": rng.standard_normal(shape)}, rng)


def test_variance_with_correction_without_shapes() -> None:
    pm = ml.compile(Variance(axis=-1, correction=1), BACKEND, trainable_keys=["input"], jit=False)
    rng = np.random.default_rng(3)
    for shape in ((4,), (2, 3, 4)):
        _check(pm, {"input": rng.standard_normal(shape)}, rng)


MATMUL = {  # case -> two (left shape, right shape) pairs of different ranks
    "1d": (((4,), (4,)), ((3,), (3, 2))),
    "2d": (((3, 4), (4, 2)), ((2, 3, 4), (4, 2))),
    "batched": (((2, 3, 4), (2, 4, 5)), ((3, 4), (2, 2, 4, 1))),
    "vector-right": (((2, 3), (3,)), ((2, 2, 3), (3,))),
}


@pytest.mark.parametrize("case", list(MATMUL))
def test_matmul_gradient_without_shapes(case: str) -> None:
    pm = ml.compile(MatrixMultiply(), BACKEND, trainable_keys=["left", "right"], jit=False)
    rng = np.random.default_rng(11)
    for left, right in MATMUL[case]:
        _check(pm, {"left": rng.standard_normal(left), "right": rng.standard_normal(right)}, rng)


def _emitted_primitives(model: Any, shapes: Mapping[str, Any] | None, trainable: list[str]) -> set[str]:
    """The primitives ``ml.compile`` emits (forward and backward graphs) for ``model``."""
    from mithril.compiler.graph import Graph

    seen: set[str] = set()
    emit = Graph.emit

    def spy(self: Graph, primitive: str, *args: Any, **kwargs: Any) -> Any:
        seen.add(primitive)
        return emit(self, primitive, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Graph, "emit", spy)
        ml.compile(model, BACKEND, shapes=shapes, trainable_keys=trainable, jit=False)
    return seen


def test_static_rank_keeps_the_static_backward_graph() -> None:
    """Known ranks: matmul's gradient is composed of ordinary primitives (no run-time helper); unknown
    ranks: the run-time helpers."""
    helpers = {"matmul_grad_left", "matmul_grad_right"}
    static = _emitted_primitives(MatrixMultiply(), {"left": [3, 4], "right": [4]}, ["left", "right"])
    assert "swapaxes" in static and not static & helpers
    assert helpers <= _emitted_primitives(MatrixMultiply(), None, ["left", "right"])
