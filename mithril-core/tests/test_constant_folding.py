"""Constant folding keeps the dtypes the unfolded program would give."""

import mithril as ml
import numpy as np
from mithril.models import IOKey, Model, Primitive


def _evaluate(model: Model, **compile_options: object) -> dict:
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float32), jit=False, **compile_options)
    return pm.evaluate({})


def test_a_folded_creation_primitive_keeps_the_backend_dtype() -> None:
    model = Model()
    model |= Primitive("ones", shape=())(output=IOKey("one", expose=False))
    model |= Primitive("add")(left="one", right="one", output=IOKey("two"))
    two = _evaluate(model)["two"]
    assert np.asarray(two).dtype == np.float32 and float(two) == 2.0


def test_a_folded_reduction_of_a_constant_array_stays_an_array() -> None:
    # sum of a NumPy array gives np.float64/np.float32, which subclasses float: it must not become a Python number
    model = Model()
    model |= Primitive("sum", axis=None, keepdim=False)(input="x", output=IOKey("total", expose=False))
    model |= Primitive("neg")(input="total", output=IOKey("negated", expose=False))
    model |= Primitive("index", key=())(input="negated", output=IOKey("out"))
    out = _evaluate(model, constant_keys={"x": np.array([0.25, 0.5], dtype=np.float32)})["out"]
    assert float(out) == -0.75
    assert np.asarray(out).dtype == np.float32


def test_a_folded_python_scalar_does_not_promote_a_float32_parameter() -> None:
    model = Model()
    model |= Primitive("subtract")(left=1.0, right=IOKey("rate", value=0.25), output=IOKey("shrink", expose=False))
    model |= Primitive("multiply")(left="w", right="shrink", output=IOKey("out"))
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float32), jit=False, shapes={"w": [2]}, trainable_keys={"w"})
    out = pm.evaluate({"w": np.ones(2, dtype=np.float32)})["out"]
    assert out.dtype == np.float32 and out.tolist() == [0.75, 0.75]
