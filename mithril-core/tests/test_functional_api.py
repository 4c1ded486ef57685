"""Mithril's functional style: a model called with its inputs stands for its output (``Linear(8)(input=x)``),
takes part in connection arithmetic and symbolic shapes, unpacks into several outputs, and ``Model.create``
makes a model of such values (IOKeys become its inputs)."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ModelConnectionError
from mithril.models import Buffer, Conv2d, Convolution1D, Convolution2D, IOKey, Linear, Model, Relu, Split

RNG = np.random.default_rng(0)


def _numpy(model: Model, **compile_options):
    return ml.compile(model, ml.NumpyBackend(dtype=ml.float64), **compile_options)


def test_create_equals_the_same_model_composed_with_connect():
    x = IOKey("input")
    hidden = Relu()(input=Linear(8, name="fc1")(input=x))
    functional = Model.create(Linear(3, name="fc2")(input=hidden) + x.sum(axis=-1, keepdim=True), name="mlp")
    assert functional.input_keys[:1] == ["input"] and functional.output_keys == ["output"]
    composed = Model(name="mlp")
    composed |= Linear(8, name="fc1")(input="input", output="h")
    composed |= Relu()(input="h", output="r")
    composed |= Linear(3, name="fc2")(input="r", output="o")
    composed |= Buffer()(input=composed.o + IOKey("input").sum(axis=-1, keepdim=True), output=IOKey("output"))
    a, b = (_numpy(m, use_short_namings=False, shapes={"input": [None, 5]}) for m in (functional, composed))
    assert sorted(a.param_keys) == sorted(b.param_keys)
    params = b.randomize_params(seed=0)
    data = {"input": RNG.normal(size=(4, 5))}
    np.testing.assert_allclose(a.evaluate(params, data)["output"], b.evaluate(params, data)["output"], rtol=1e-12)


def test_several_outputs_unpack_in_order_and_dims_are_outputs_too():
    x = IOKey("input")
    hidden = Linear(6)(input=x)
    block = Model.create(hidden=hidden, width=hidden.shape[1], name="block")
    assert block.output_keys == ["hidden", "width"]
    h, width = block(input=IOKey("input"))
    outer = Model.create(out=h.reshape((width, -1)))  # a dim given by another model's output
    pm = _numpy(outer, shapes={"input": [None, 3]})
    params = pm.randomize_params(seed=1)
    got = pm.evaluate(params, {"input": RNG.normal(size=(4, 3))})["out"]
    assert got.shape == (6, 4)


def test_a_call_used_twice_is_built_once_and_belongs_to_one_model():
    call = Linear(4)(input=IOKey("input"))
    model = Model.create(a=call.exp(), b=call * 2.0)
    assert len(_numpy(model).param_keys) == 2  # one Linear: weight and bias
    with pytest.raises(ModelConnectionError, match="part of"):
        Model.create(c=call + 1.0)


def test_a_list_valued_output_is_indexed():
    parts = Split(3, axis=-1)(input=IOKey("input"))
    model = Model.create(first=parts[0], last=parts[2])
    x = RNG.normal(size=(2, 6))
    out = _numpy(model).evaluate({}, {"input": x})
    np.testing.assert_array_equal(out["first"], x[:, :2])
    np.testing.assert_array_equal(out["last"], x[:, 4:])


def test_mithril_keyword_spellings_of_reshape_and_transpose():
    x = IOKey("input")
    model = Model.create(out=x.transpose(axes=(1, 0)).reshape(shape=(-1,)))
    data = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(_numpy(model).evaluate({}, {"input": data})["out"], data.T.reshape(-1))


def test_convolution_classes_take_mithrils_argument_order():
    mithril_style = Convolution2D(3, 4, 2, 1, name="conv")  # kernel_size, out_channels, stride, padding
    ours = Conv2d(4, kernel_size=3, stride=2, padding=1, name="conv")
    a = _numpy(mithril_style, shapes={"input": [1, 2, 8, 8]})
    b = _numpy(ours, shapes={"input": [1, 2, 8, 8]})
    assert a.shapes == b.shapes and a.shapes["output"] == [1, 4, 4, 4]
    params = b.randomize_params(seed=2)
    image = {"input": RNG.normal(size=(1, 2, 8, 8))}
    np.testing.assert_allclose(a.evaluate(params, image)["output"], b.evaluate(params, image)["output"], rtol=1e-12)
    assert _numpy(Convolution1D(3, 5), shapes={"input": [1, 2, 9]}).shapes["output"] == [1, 5, 7]
    with pytest.raises(ml.errors.ArgumentError, match="kernel_size"):
        Convolution2D()
