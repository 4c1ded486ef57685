"""Buffer reuse in the NumPy backend's generated code: elementwise ops write into intermediates nothing
reads afterwards, and never into inputs, parameters, returned values or arrays that something else still
reads."""

import mithril as ml
import numpy as np
from mithril.models import Add, BatchNorm2d, Conv2d, IOKey, Model, Multiply, Relu, Reshape, Subtract
from mithril_testing.references import REFERENCES as R


def _conv_bn_relu() -> Model:
    model = Model()
    model |= Conv2d(6, 3, padding=1, in_channels=4)(input="input")
    model += BatchNorm2d(6, use_batch_stats=False)
    model += Relu()(output=IOKey("output"))
    return model


def test_conv_batchnorm_relu_runs_in_the_convolutions_buffer():
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(_conv_bn_relu(), backend, shapes={"input": [2, 4, 5, 5]}, inference=True, use_short_namings=False)
    assert "subtract__into_left" in pm.source and "relu__into_input" in pm.source
    rng = np.random.default_rng(0)
    params = {k: rng.standard_normal(np.shape(v)) for k, v in pm.randomize_params(seed=0).items()}
    params = {k: np.abs(v) + 0.5 if k.endswith("running_var") else v for k, v in params.items()}
    x = rng.standard_normal((2, 4, 5, 5))
    kept = {k: v.copy() for k, v in params.items()}, x.copy()
    out = pm.evaluate(params, {"input": x})["output"]
    y = R["conv2d"](x, params["conv2d_0.weight"], params["conv2d_0.bias"], stride=1, padding=1, dilation=1, groups=1)
    bn = {k: params[f"batch_norm2d_0.{k}"].reshape(-1, 1, 1) for k in ("running_mean", "running_var", "weight", "bias")}
    expected = np.maximum((y - bn["running_mean"]) / np.sqrt(bn["running_var"] + 1e-5) * bn["weight"] + bn["bias"], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    # nothing the caller passed was written to
    assert all(np.array_equal(params[k], v) for k, v in kept[0].items()) and np.array_equal(x, kept[1])


def test_no_reuse_of_inputs_returned_values_or_values_read_later():
    model = Model()
    model |= (a := Multiply())(left="x", right=2.0)  # fresh, but also returned below
    model |= Add()(left=a.output, right="y", output=IOKey("first"))
    model |= (b := Subtract())(left="x", right="y")  # fresh; read by a view (reshape) and by an add
    model |= (view := Reshape(shape=(-1,)))(input=b.output)
    model |= Add()(left=b.output, right=1.0, output=IOKey("second"))
    model |= Relu()(input=view.output, output=IOKey("flat"))
    model.expose(a.output, "doubled")
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes={"x": [3, 4], "y": [3, 4]})
    assert "__into_" not in pm.source, pm.source
    x, y = np.arange(12.0).reshape(3, 4) - 5, np.ones((3, 4))
    got = pm.evaluate({}, {"x": x, "y": y})
    np.testing.assert_array_equal(got["doubled"], 2 * x)
    np.testing.assert_array_equal(got["first"], 2 * x + y)
    np.testing.assert_array_equal(got["second"], x - y + 1)
    np.testing.assert_array_equal(got["flat"], np.maximum((x - y).ravel(), 0))


def test_training_graph_gradients_unchanged_by_reuse():
    """Forward values the backward pass reads are never overwritten."""
    model = _conv_bn_relu()
    pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes={"input": [2, 4, 5, 5]})
    params = pm.randomize_params(seed=0)
    x = np.random.default_rng(0).standard_normal((2, 4, 5, 5))
    g = np.random.default_rng(1).standard_normal((2, 6, 5, 5))
    _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})
    key = "weight" if "weight" in params else next(k for k in params if np.ndim(params[k]) == 4)
    eps, w = 1e-6, params[key]
    index = (1, 2, 0, 1)
    shifted = [
        {**params, key: w + s * eps * (np.arange(w.size) == np.ravel_multi_index(index, w.shape)).reshape(w.shape)}
        for s in (1, -1)
    ]
    losses = [float((pm.evaluate(p, {"input": x})["output"] * g).sum()) for p in shifted]
    np.testing.assert_allclose(grads[key][index], (losses[0] - losses[1]) / (2 * eps), rtol=1e-6, atol=1e-8)
