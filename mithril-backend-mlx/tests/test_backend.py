"""MlxBackend itself: registration, options, dtypes, devices, conversions, the PRNG key under
``mx.compile``, and ``vjp`` with int/bool outputs."""

from __future__ import annotations

import mithril as ml
import mlx.core as mx
import numpy as np
import pytest
from mithril.models import ArgMax, Dropout, IOKey, Linear, Model, Randn, Relu, Sum
from mithril.plugins import registry

from mithril_backend_mlx import MlxBackend


# -- registration --------------------------------------------------------------------------------
def test_registered_under_name_and_aliases():
    from mithril.backends import MLXBackend

    assert ml.MlxBackend is ml.MLXBackend is MLXBackend is MlxBackend
    assert registry().backend_name("mlx") == "mlx"


def test_every_primitive_is_implemented():
    from mithril_testing.conformance import required_primitives

    reg = registry()
    required = required_primitives(ml.MlxBackend())  # all but those with a decomposition (lstm_layer)
    missing = required - set(reg.impls("mlx")) - set(reg.impls("*"))
    assert not missing, f"primitives without an MLX implementation: {sorted(missing)}"
    assert set(reg.impls("mlx")) <= set(reg.primitives)


# -- options -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, expected",
    [
        (ml.float32, mx.float32),
        (ml.float16, mx.float16),
        ("bfloat16", mx.bfloat16),
        (mx.float16, mx.float16),
        (mx.bfloat16, mx.bfloat16),
    ],
)
def test_dtypes(dtype, expected):
    backend = MlxBackend(dtype=dtype)
    assert backend.array([1.5, 2.0]).dtype == expected
    assert backend.array([1, 2]).dtype == mx.int64
    assert backend.array([True]).dtype == mx.bool_
    assert backend.array(np.ones(3, dtype=np.float64)).dtype == expected


def test_default_dtype_is_a_synonym_of_dtype():
    assert MlxBackend(seed=42, default_dtype="float16").dtype is ml.float16
    with pytest.raises(TypeError, match="disagree"):
        MlxBackend(dtype=ml.bfloat16, default_dtype="float16")


@pytest.mark.parametrize("dtype", [ml.float64, "float64"])
def test_float64_is_refused_with_a_reason(dtype):
    with pytest.raises(TypeError, match=r"float64.*float32"):
        MlxBackend(dtype=dtype)


def test_float64_casts_are_refused():
    with pytest.raises(TypeError, match="float64"):
        MlxBackend().native_dtype(ml.float64)


@pytest.mark.parametrize(
    "option, value, reason",
    [
        ("use_ane", True, "Neural Engine"),
        ("enable_mps_optimization", True, "Metal Performance Shaders"),
        ("auto_free_tensors", False, "last reference"),  # True: mx.set_cache_limit(0); the other options of the
    ],  # MLX guide (memory_limit, compute_precision, use_graph, random_seed) run: tests/test_manual_options.py
)
def test_seed_options_without_meaning_are_refused(option, value, reason):
    with pytest.raises(TypeError, match=f"{option}=.*{reason}"):
        MlxBackend(**{option: value})


def test_unknown_option_names_the_accepted_ones():
    with pytest.raises(TypeError, match=r"\['colour'\].*dtype, device, seed"):
        MlxBackend(colour="blue")


def test_devices():
    assert MlxBackend(device="cpu").device == "cpu"
    assert MlxBackend(device=mx.cpu).device == "cpu"
    with pytest.raises(ValueError, match="not available"):
        MlxBackend(device="tpu")
    if not mx.is_available(mx.gpu):
        with pytest.raises(ValueError, match=r"no GPU.*device='cpu'"):
            MlxBackend(device="gpu")
        with pytest.raises(ValueError, match="no GPU"):
            MlxBackend().set_default_device("gpu")
    else:  # pragma: no cover - Apple silicon / CUDA builds
        assert MlxBackend(device=mx.gpu).device == "gpu"


# -- conversions ---------------------------------------------------------------------------------
def test_conversions():
    backend = MlxBackend()
    x = mx.random.normal((3, 4))
    assert backend.from_mlx(x) is x or mx.array_equal(backend.from_mlx(x), x)
    assert backend.to_mlx(x) is x
    assert backend.to_mlx(np.ones(2)).dtype == mx.float32
    with pytest.raises(TypeError, match=r"mlx\.core\.array"):
        backend.from_mlx(np.ones(3))
    assert backend.from_mlx(mx.ones(2, dtype=mx.float16)).dtype == mx.float32  # to the backend dtype
    np.testing.assert_array_equal(backend.to_numpy(backend.array([[1.0, 2.0]])), [[1.0, 2.0]])
    half = MlxBackend(dtype=ml.bfloat16)
    got = half.to_numpy(half.array([1.5, -2.0]))
    assert got.dtype == np.float32 and got.tolist() == [1.5, -2.0]
    assert backend.is_array(x) and not backend.is_array(np.ones(2))


def test_primitives_are_backend_methods():
    backend = MlxBackend()
    assert backend.relu(backend.array([-1.0, 2.0])).tolist() == [0.0, 2.0]
    assert backend.concat([backend.ones(2), backend.zeros(1)], axis=0).tolist() == [1.0, 1.0, 0.0]
    assert backend.divide(backend.array([1, 2]), backend.array([2, 4])).dtype == mx.float32


# -- randomness ----------------------------------------------------------------------------------
def test_seed_determinism_of_backend_draws():
    a, b = MlxBackend(seed=7), MlxBackend(seed=7)
    np.testing.assert_array_equal(np.array(a.randn(3, 4)), np.array(b.randn(3, 4)))
    first = np.array(a.randn(5))
    assert not np.array_equal(first, np.array(a.randn(5))), "successive draws must differ"
    a.set_seed(7)
    b.set_seed(7)
    np.testing.assert_array_equal(np.array(a.randint(0, 10, (20,))), np.array(b.randint(0, 10, (20,))))
    assert a.rand(2, 3).dtype == mx.float32
    assert not np.array_equal(np.array(MlxBackend(seed=1).randn(8)), np.array(MlxBackend(seed=2).randn(8)))


def _dropout_model(jit: bool, seed: int) -> ml.PhysicalModel:
    model = Model()
    model |= Linear(8)(input="input", output="hidden")
    model += Dropout(p=0.5)(output=IOKey("output"))
    backend = MlxBackend(seed=seed)
    return ml.compile(model, backend, shapes={"input": [4, 3]}, data_keys={"input"}, jit=jit)


@pytest.mark.parametrize("jit", [True, False], ids=["compiled", "eager"])
def test_random_ops_are_fresh_per_call_and_reproducible(jit):
    pm = _dropout_model(jit, seed=3)
    params = pm.randomize_params(seed=0)
    x = np.ones((4, 3), dtype=np.float32)
    runs = [np.array(pm.evaluate(params, {"input": x})["output"]) for _ in range(3)]
    assert not np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[1], runs[2])
    again = _dropout_model(jit, seed=3)
    for expected in runs:
        np.testing.assert_array_equal(np.array(again.evaluate(params, {"input": x})["output"]), expected)


def test_compiled_and_eager_draw_the_same_samples():
    compiled = _dropout_model(True, seed=11)
    eager = _dropout_model(False, seed=11)
    params = compiled.randomize_params(seed=0)
    x = np.ones((4, 3), dtype=np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(
            np.array(compiled.evaluate(params, {"input": x})["output"]),
            np.array(eager.evaluate(params, {"input": x})["output"]),
        )


def test_randn_primitive_under_compile_and_gradients():
    model = Model()
    model |= Randn(shape=(2, 3))(output="noise")
    model |= Linear(3)(input="input", output="hidden")
    model |= ml.Add()(left="hidden", right="noise", output=IOKey("output"))
    pm = ml.compile(model, MlxBackend(seed=0), shapes={"input": [2, 4]}, data_keys={"input"})
    params = pm.randomize_params(seed=0)
    x = np.ones((2, 4), dtype=np.float32)
    (o1, g1), (o2, g2) = (
        pm.evaluate(params, {"input": x}, output_gradients={"output": np.ones((2, 3))}) for _ in range(2)
    )
    assert not np.array_equal(np.array(o1["output"]), np.array(o2["output"]))
    for key in g1:  # the noise does not enter the gradients
        np.testing.assert_allclose(np.array(g1[key]), np.array(g2[key]))


# -- vjp -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("jit", [True, False], ids=["compiled", "eager"])
def test_vjp_with_int_and_bool_outputs(jit):
    model = Model()
    model |= Linear(3)(input="input", output=IOKey("logits"))
    model |= ArgMax(axis=-1)(input="logits", output=IOKey("label"))
    model |= ml.Greater()(left="logits", right=0.0, output=IOKey("positive"))
    model |= Relu()(input="logits", output="act")
    model |= Sum()(input="act", output=IOKey("loss"))
    backend = MlxBackend()
    pm = ml.compile(model, backend, shapes={"input": [5, 4]}, data_keys={"input"}, jit=jit)
    params = pm.randomize_params(seed=0)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    outputs, grads = pm.evaluate(params, {"input": x}, output_gradients=True)
    assert outputs["label"].dtype == mx.int64 and outputs["positive"].dtype == mx.bool_
    assert set(grads) == set(params)
    logits = x @ np.array(params["weight"]).T + np.array(params["bias"])
    np.testing.assert_allclose(np.array(grads["bias"]), (logits > 0).sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(np.array(grads["weight"]), (logits > 0).T.astype(np.float32) @ x, rtol=1e-5, atol=1e-6)


# -- special values ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "row",
    [[1e10, 1e10, 1e10], [3e38, 3e38, 1.0], [1e30, -1e30, 5.0], [float("inf"), 1.0, 2.0], [1.0, 2.0, 3.0]],
)
def test_log_softmax_of_large_values_matches_the_reference(row):
    """``x - logsumexp(x)`` lost ``log(3)`` to rounding for rows of large values (``[1e10] * 3`` gave 0, not
    -1.0986) and gave ``-inf`` where the reference gives NaN; a compiled model checks the whole path."""
    from mithril.models import LogSoftmax
    from mithril_testing.references import log_softmax

    data = np.array([row] * 40, dtype=np.float32)  # long enough for vectorised loops
    pm = ml.compile(LogSoftmax(axis=1), ml.MlxBackend(), shapes={"input": list(data.shape)}, jit=False)
    got = np.array(pm.evaluate({}, {"input": mx.array(data)})["output"])
    np.testing.assert_allclose(got, log_softmax(data.astype(np.float64), axis=1), rtol=1e-6, atol=1e-6)
