"""Shapes computed when the model runs, as Mithril's published examples write them: reshapes by other tensors'
dims and their products (``x.reshape((1, B, L, 3, d))``, ``y.reshape((B * L, d))``), noise of a run-time shape
(``Randn().connect(shape=(B, 1, d))``), ``Arange`` bounds given as int keys connected to ``x.shape[1]``, and
``Cast(dtype=x.dtype())`` of a key whose type is known only at compile time.

Compiled once without shapes, each runs at several sizes on NumPy, JAX (jitted: the dims stay Python ints)
and PyTorch with values equal to NumPy's; given static shapes, the shape arithmetic folds and the C backend
runs the same model."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.errors import UnsupportedPrimitiveError
from mithril.models import TBD, Arange, Buffer, Cast, IOKey, Linear, Model, Randn, ZerosLike


def _backends() -> list:
    found = []
    for name in ("NumpyBackend", "JaxBackend", "TorchBackend"):
        try:
            found.append(getattr(ml, name)(dtype=ml.float64))
        except Exception:  # plugin not installed here
            continue
    return found


BACKENDS = pytest.mark.parametrize("backend", _backends(), ids=lambda b: type(b).__name__)


def attention_like() -> Model:
    """Reshapes whose dims come from another tensor, at other positions and multiplied."""
    model = Model()
    model |= Linear(12)(input=IOKey("input"), output="proj")
    batch, length = model.proj.shape[0], model.proj.shape[1]
    packed = model.proj.reshape((1, batch, length, 3, 4))  # dims of proj at positions 1 and 2
    model |= Buffer()(input=packed, output=IOKey("packed"))
    model |= Linear(5)(input=model.proj.reshape((batch * length, 12)), output="rows")
    model |= Buffer()(input=model.rows.reshape((batch, length, 5)), output=IOKey("output"))  # rows has B * L rows
    return model


def _numpy_reference(params: dict, x: np.ndarray) -> dict:
    proj = x @ params["weight"].T + params["bias"]
    batch, length = x.shape[:2]
    rows = proj.reshape(batch * length, 12) @ params["weight_1"].T + params["bias_1"]
    return {"packed": proj.reshape(1, batch, length, 3, 4), "output": rows.reshape(batch, length, 5)}


@BACKENDS
def test_reshapes_by_other_tensors_dims_run_at_any_size(backend):
    model = attention_like()
    assert model.shapes["output"][2] == 5 and model.shapes["packed"][0] == 1
    pm = ml.compile(model, backend, shapes={"input": [None, None, 6]})
    params = {k: backend.array(v) for k, v in pm.randomize_params(seed=0).items()}
    numpy_params = {k: np.asarray(backend.to_numpy(v)) for k, v in params.items()}
    rng = np.random.default_rng(0)
    for shape in ((2, 3, 6), (1, 7, 6)):  # one compiled model (jitted on JAX), several sizes
        x = rng.normal(size=shape)
        got = pm.evaluate(params, {"input": backend.array(x)})
        want = _numpy_reference(numpy_params, x)
        for key, value in want.items():
            np.testing.assert_allclose(np.asarray(backend.to_numpy(got[key])), value, rtol=1e-12, err_msg=key)
    assert "host_index" in pm.source and "reshape_to" in pm.source  # the dims are Python ints, also inside jax.jit


def test_run_time_reshape_gradients_equal_autograd():
    numpy, torch = (
        ml.NumpyBackend(dtype=ml.float64),
        pytest.importorskip("mithril_backend_torch").TorchBackend(dtype=ml.float64),
    )
    model = attention_like()
    manual, auto = (ml.compile(model, b, shapes={"input": [None, None, 6]}, jit=False) for b in (numpy, torch))
    params = manual.randomize_params(seed=1)
    x = np.random.default_rng(1).normal(size=(2, 3, 6))
    seeds = {"output": np.ones((2, 3, 5)), "packed": np.linspace(-1, 1, 72).reshape(1, 2, 3, 3, 4)}
    _, want = manual.evaluate(params, {"input": x}, output_gradients=seeds)
    _, got = auto.evaluate({k: torch.array(v) for k, v in params.items()}, {"input": torch.array(x)},
                           output_gradients={k: torch.array(v) for k, v in seeds.items()})  # fmt: skip
    for key in want:
        np.testing.assert_allclose(torch.to_numpy(got[key]), want[key], rtol=1e-10, err_msg=key)


def test_static_shapes_fold_the_shape_arithmetic_and_c_runs_it():
    model = attention_like()
    numpy = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes={"input": [2, 3, 6]}, jit=False)
    assert "= host_" not in numpy.source and "= reshape_to(" not in numpy.source  # folded: plain reshapes
    c = ml.compile(model, ml.CBackend(dtype=ml.float64), shapes={"input": [2, 3, 6]})
    params = numpy.randomize_params(seed=2)
    x = np.random.default_rng(2).normal(size=(2, 3, 6))
    want = numpy.evaluate(params, {"input": x})
    got = c.evaluate(params, {"input": x})
    for key in want:
        np.testing.assert_allclose(np.asarray(got[key]), want[key], rtol=1e-12, err_msg=key)


def test_c_refuses_run_time_shapes_with_a_clear_error():
    with pytest.raises(UnsupportedPrimitiveError, match=r"host_shape|reshape_to"):
        ml.compile(attention_like(), ml.CBackend(), shapes={"input": [None, None, 6]})


@BACKENDS
def test_randn_of_a_run_time_shape(backend):
    """Mithril's CLIP draws its class-token noise as ``Randn().connect(shape=(B, 1, width))``."""
    model = Model()
    model |= Linear(4)(input=IOKey("input"), output="h")
    shape = model.h.shape
    model |= Randn().connect(shape=(shape[0], 1, shape[-1]), output="noise")
    model |= ZerosLike().connect(input=model.noise, output=IOKey("zeros"))
    model |= Buffer()(input=model.noise, output=IOKey("noise_out"))
    assert model.shapes["noise_out"][1:] == [1, 4]
    pm = ml.compile(model, backend, shapes={"input": [None, 3]}, inference=True)
    params = pm.randomize_params(seed=0)
    for batch in (2, 5):
        out = pm.evaluate(params, {"input": backend.ones(batch, 3)})
        assert tuple(out["noise_out"].shape) == (batch, 1, 4)
        assert np.all(np.asarray(backend.to_numpy(out["zeros"])) == 0)
        assert np.std(np.asarray(backend.to_numpy(out["noise_out"]))) > 0


def relative_positions(offset) -> Model:
    """T5's relative positions: an ``Arange`` whose bounds are int keys, connected by the parent to a dim."""
    inner = Model()
    inner |= Arange(start=TBD).connect(
        start=IOKey("offset", type=int), stop=IOKey("length", type=int), output="positions"
    )
    inner |= Buffer()(input=inner.positions[:, None] - inner.positions[None, :], output=IOKey("output"))
    outer = Model()
    source = IOKey("input")
    outer |= inner.connect(length=source.shape[1], offset=offset, output="relative")
    outer |= Buffer()(input=outer.relative, output=IOKey("output"))
    outer |= Linear(2)(input="input", output=IOKey("projected"))
    return outer


@BACKENDS
@pytest.mark.parametrize("offset", [0, 3])
def test_arange_bounds_connected_to_a_dim(backend, offset):
    pm = ml.compile(relative_positions(offset), backend, shapes={"input": [1, None, 4]})
    if offset == 0:  # arange(0, x.shape[1]) is positions(x): its length is known to be that dim
        assert "positions(" in pm.source
        assert pm.shapes["output"] == [pm.shapes["input"][1]] * 2
    params = pm.randomize_params(seed=0)
    for length in (3, 6):
        got = np.asarray(backend.to_numpy(pm.evaluate(params, {"input": backend.ones(1, length, 4)})["output"]))
        positions = np.arange(offset, length)
        np.testing.assert_array_equal(got, positions[:, None] - positions[None, :])


@BACKENDS
def test_cast_to_the_dtype_of_a_key_typed_later(backend):
    """Mithril's CLIP layer norm: ``Cast().connect(dtype=input.dtype())`` inside a block built before the
    input's type is known casts back to that type when it runs."""
    block = Model()
    source = IOKey("input")
    block |= Cast().connect(input=source, dtype=ml.float32, output="as_float")
    block |= Cast().connect(input=block.as_float * 2, dtype=source.dtype(), output=IOKey("output"))
    assert block.input_keys == ["input"]  # the dtype is read from the input itself
    model = Model()
    model |= block.connect(input=IOKey("x", type=int), output=IOKey("doubled"))
    pm = ml.compile(model, backend, shapes={"x": [3]})
    got = backend.to_numpy(pm.evaluate({}, {"x": backend.array(np.array([1, 2, 3]))})["doubled"])
    assert np.asarray(got).dtype.kind == "i"
    np.testing.assert_array_equal(got, [2, 4, 6])


def test_broadcast_keeps_the_dims_it_can_tell():
    """``[B, 3, L, S] + [3, q, k]``: the batch and head dims are known though ``L`` vs ``q`` is not yet."""
    model = Model()
    model |= Buffer()(input=IOKey("scores", shape=["B", 3, "L", "S"]), output="s")
    model |= Buffer()(input=IOKey("bias", shape=[3, "q", "k"]), output="b")
    model |= Buffer()(input=model.s + model.b, output=IOKey("output"))
    assert model.shapes["output"][:2] == ["B", 3] or model.shapes["output"][1] == 3
    assert model.shapes["output"][0] == model.shapes["scores"][0]


@BACKENDS
def test_slice_bounded_by_a_dim_known_when_it_runs(backend):
    """Mithril's CLIP attention pooling: ``in_proj_bias[0:embed_dim]`` with ``embed_dim = query.shape[2]``."""
    model = Model.create(cut=IOKey("table")[0 : IOKey("input").shape[1]], name="pool")
    pm = ml.compile(model, backend, shapes={"input": [None, None], "table": [10, 2]})
    table = np.arange(20.0).reshape(10, 2)
    for width in (3, 7):
        got = pm.evaluate({}, {"input": backend.ones(2, width), "table": backend.array(table)})["cut"]
        np.testing.assert_array_equal(backend.to_numpy(got), table[:width])
    with pytest.raises(ml.errors.ArgumentError, match="slice bounded by a symbolic dim"):
        Model.create(bad=IOKey("table")[0 : IOKey("input").shape[1] : 2])
