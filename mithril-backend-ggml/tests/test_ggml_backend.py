"""GGML-specific behaviour: the seeds' MLP and CNN examples, errors, threads, version check."""

import mithril as ml
import numpy as np
import pytest
from mithril.demo import build_cnn
from mithril.errors import ShapeError
from mithril.models import Flatten, Linear, Model, Relu
from mithril_testing.references import REFERENCES as R


def _mlp(sizes):
    model = Model()
    for i, out in enumerate(sizes[1:]):
        model += Linear(dimension=out)(input="input") if i == 0 else Linear(dimension=out)
        if i < len(sizes) - 2:
            model += Relu()
    return model


def test_seed_mlp_forward_and_gradients_match_numpy():
    backend = ml.GGMLBackend(threads=2)
    compiled = ml.compile(_mlp([784, 64, 32, 10]), backend, shapes={"input": [8, 784]})
    params = compiled.randomize_params(seed=0)
    x = np.random.default_rng(1).standard_normal((8, 784)).astype(np.float32)
    g = np.random.default_rng(2).standard_normal((8, 10)).astype(np.float32)
    out, grads = compiled.evaluate(params, {"input": x}, output_gradients={"output": g})
    h1 = np.maximum(x @ params["weight"].T + params["bias"], 0)
    h2 = np.maximum(h1 @ params["weight_1"].T + params["bias_1"], 0)
    y = h2 @ params["weight_2"].T + params["bias_2"]
    np.testing.assert_allclose(out["output"], y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["weight_2"], g.T @ h2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        grads["bias"],
        (((g @ params["weight_2"]) * (h2 > 0)) @ params["weight_1"] * (h1 > 0)).sum(0),
        rtol=1e-4,
        atol=1e-4,
    )
    # linear is native ggml; relu is a C kernel split over the threads (ggml_relu maps NaN to 0)
    ops = [line for line in compiled.source.splitlines() if "# ggml:" in line]
    assert all("ggml: native" in line for line in ops if "= linear(" in line), compiled.source
    assert all("custom op (C kernel, on 2 threads)" in line for line in ops if "= relu(" in line), compiled.source


def test_seed_cnn_matches_reference_with_split_conv_kernels():
    """The convolutions (with the ReLU after them fused into their epilogue) are C kernels split over
    ggml's threads (im2col blocks + BLAS, several times faster than ggml's F32 mul_mat); the rest of the
    forward is native ggml."""
    model = build_cnn(channels=(4, 8))
    backend = ml.GGMLBackend(threads=2)
    compiled = ml.compile(model, backend, shapes={"input": [2, 3, 8, 8]})
    params = compiled.randomize_params(seed=0)
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    out = compiled.evaluate(params, {"input": x})["output"]
    names = sorted(params)
    conv = dict(stride=1, padding="same", dilation=1, groups=1)
    pool = dict(kernel_size=2, stride=2, padding=0, dilation=1)
    w = {k: params[k].astype(np.float64) for k in names}
    conv_w = [k for k in names if w[k].ndim == 4]
    conv_b = [k.replace("weight", "bias") for k in conv_w]
    h = x.astype(np.float64)
    for cw, cb in zip(conv_w, conv_b, strict=True):
        h = R["max_pool2d"](np.maximum(R["conv2d"](h, w[cw], w[cb], **conv), 0), **pool)
    lin_w = next(k for k in names if w[k].ndim == 2)
    y = h.reshape(2, -1) @ w[lin_w].T + w[lin_w.replace("weight", "bias")]
    np.testing.assert_allclose(out, y, rtol=1e-4, atol=1e-4)
    forward = compiled.source.split("def evaluate_gradients")[0].split("def evaluate(")[1]
    built = [line for line in forward.splitlines() if "# ggml:" in line]
    assert sum("fused[conv2d, relu]" in line and "on 2 threads" in line for line in built) == 2, forward
    assert all("ggml: native" in line or "fused[conv2d, relu]" in line for line in built), forward
    _, grads = compiled.evaluate(params, {"input": x}, output_gradients={"output": np.ones_like(out)})
    assert set(grads) == set(params)


def test_threads_do_not_change_results():
    x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
    results = []
    for threads in (1, 2):
        compiled = ml.compile(_mlp([32, 64, 8]), ml.GGMLBackend(threads=threads), shapes={"input": [16, 32]})
        results.append(compiled.evaluate(compiled.randomize_params(seed=0), {"input": x})["output"])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_two_compiled_models_share_no_state():
    backend = ml.GGMLBackend(threads=2)
    a = ml.compile(_mlp([4, 3]), backend, shapes={"input": [2, 4]})
    b = ml.compile(_mlp([4, 5]), backend, shapes={"input": [2, 4]})
    pa, pb = a.randomize_params(seed=0), b.randomize_params(seed=1)
    x = np.ones((2, 4), np.float32)
    first = a.evaluate(pa, {"input": x})["output"].copy()
    b.evaluate(pb, {"input": x})
    np.testing.assert_array_equal(a.evaluate(pa, {"input": x})["output"], first)


def test_non_static_shape_is_a_clear_error():
    with pytest.raises(ShapeError, match="static shapes"):
        ml.compile(_mlp([4, 3]), ml.GGMLBackend(), shapes={"input": [None, 4]})


def test_float64_is_refused():
    with pytest.raises(TypeError, match="float32"):
        ml.GGMLBackend(dtype=ml.float64)


def test_bad_threads():
    with pytest.raises(ValueError, match="threads"):
        ml.GGMLBackend(threads=0)


def test_version_is_checked():
    from mithril_backend_ggml._lib import REQUIRED_GGML_VERSION, ggml_versions

    assert ggml_versions()["ggml"] == REQUIRED_GGML_VERSION


def test_capability_table_covers_every_core_primitive():
    from mithril_backend_ggml.capabilities import UNSUPPORTED, capability_table

    table = capability_table()
    assert {name for name, how in table.items() if how == "unsupported"} == set(UNSUPPORTED)
    assert table["linear"] == table["conv2d"] == table["softmax"] == "native"
    assert table["relu"] == table["sign"] == table["leaky_relu"] == "c custom op"  # NaN-preserving


def _ops(compiled, name="evaluate_gradients"):
    import ggml

    f = compiled.program.functions[name]
    return [ggml.ggml_op_desc(ggml.ggml_graph_node(f.gf, i)).decode() for i in range(f.n_graph_nodes)]


def test_mlp_backward_graph_copies_only_the_transposes_mul_mat_needs():
    """2-layer MLP: the hand-built ggml graph's 22 nodes. Five transposed copies (g1^T, W1^T, g0^T, h^T,
    x^T); bias gradients are ggml_sum_rows results returned as they are (no reshape view, no copy)."""
    compiled = ml.compile(_mlp([16, 32, 8]), ml.GGMLBackend(threads=2), shapes={"input": [4, 16]})
    ops = _ops(compiled)
    assert ops.count("CONT") == 5 and "RESHAPE" not in ops, ops
    assert len(ops) <= 22, ops
    params = compiled.randomize_params(seed=0)
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    g = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    _, grads = compiled.evaluate(params, {"input": x}, output_gradients={"output": g})
    h = np.maximum(x @ params["weight"].T + params["bias"], 0)
    np.testing.assert_allclose(grads["bias_1"], g.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["weight_1"], g.T @ h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["bias"], ((g @ params["weight_1"]) * (h > 0)).sum(0), rtol=1e-5, atol=1e-5)


def test_matmul_gradient_reads_the_untransposed_operand():
    """``dA = g @ swapaxes(B)``: mul_mat wants B^T transposed, i.e. B itself, so no copy is made of it."""
    from mithril.models import MatrixMultiply

    model = Model()
    model |= MatrixMultiply()(left="a", right="b", output="y")
    shapes = {"a": [6, 5], "b": [5, 7]}
    compiled = ml.compile(model, ml.GGMLBackend(threads=2), shapes=shapes, trainable_keys={"a", "b"})
    params = compiled.randomize_params(seed=0)
    g = np.random.default_rng(0).standard_normal((6, 7)).astype(np.float32)
    out, grads = compiled.evaluate(params, {}, output_gradients={"y": g})
    np.testing.assert_allclose(out["y"], params["a"] @ params["b"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["a"], g @ params["b"].T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["b"], params["a"].T @ g, rtol=1e-5, atol=1e-5)
    assert _ops(compiled).count("CONT") == 3  # B^T (forward), A^T and g^T (dB contracts over rows)


def test_outputs_that_are_views_of_inputs_are_copied():
    """Reshapes (and transposes moving only size-1 axes, which are reshapes) of inputs are still copied
    into fresh output tensors."""
    from mithril.models import SwapAxes, Transpose

    model = Model()
    model |= Flatten()(input="input", output="flat")
    model |= Transpose()(input="input", output="t")
    model |= SwapAxes(axis1=0, axis2=1)(input="input", output="s")
    compiled = ml.compile(model, ml.GGMLBackend(threads=1), shapes={"input": [2, 1, 3]})
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    out = compiled.evaluate({}, {"input": x})
    np.testing.assert_array_equal(out["flat"], x.reshape(2, 3))
    np.testing.assert_array_equal(out["t"], x.T)
    np.testing.assert_array_equal(out["s"], x.swapaxes(0, 1))


def _custom_kinds(compiled):
    return {kind for f in compiled.program.functions.values() for _, kind in f.custom_ops}


@pytest.mark.parametrize("name", ["gelu-tanh", "conv1d", "erf"])
def test_fallback_primitives_run_as_c_kernels_without_the_gil(name):
    """Primitives without a ggml op are custom ops whose callback is a C function (the C backend's emitter),
    never a Python callback: forward and backward graphs record only "c" custom ops."""
    from mithril.models import Conv1d, Erf, Gelu

    model = Model()
    if name == "gelu-tanh":
        model |= Gelu(approximate=True)(input="input", output="output")
        shapes = {"input": [4, 6]}
    elif name == "conv1d":
        model |= Conv1d(out_channels=3, kernel_size=3)(input="input", output="output")
        shapes = {"input": [2, 2, 9]}
    else:
        model |= Erf()(input="input", output="output")
        shapes = {"input": [4, 6]}
    compiled = ml.compile(model, ml.GGMLBackend(threads=2), shapes=shapes, trainable_keys={"input"})
    assert _custom_kinds(compiled) == {"c"}, compiled.source
    assert "custom op (C kernel" in compiled.source and "Python callback" not in compiled.source
    params = compiled.randomize_params(seed=0)
    params["input"] = np.random.default_rng(0).standard_normal(shapes["input"]).astype(np.float32)
    cotangent = np.ones_like(compiled.evaluate(params, {})["output"])
    out, grads = compiled.evaluate(params, {}, output_gradients={"output": cotangent})
    assert np.isfinite(out["output"]).all() and set(grads) == set(params)


def test_c_kernel_matches_reference_and_lambda_is_the_only_python_op():
    from mithril.models import Gelu, Lambda

    model = Model()
    model |= Gelu(approximate=True)(input="input", output="g")
    model |= Lambda(fn=lambda x: x * 2)(input="g", output="output")
    compiled = ml.compile(model, ml.GGMLBackend(threads=2), shapes={"input": [3, 5]})
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    out = compiled.evaluate({}, {"input": x})["output"]
    expected = 2 * R["gelu"](x.astype(np.float64), approximate=True)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    kinds = compiled.program.functions["evaluate"].custom_ops
    assert sorted(kinds) == [("gelu", "c"), ("lambda", "python")]


def test_native_compositions_have_no_custom_ops():
    """Exact gelu (ggml_gelu_erf), log_softmax (pool max + sum_rows), cross-entropy from logits and
    attention (mul_mat + soft_max_ext) are built from ggml ops only."""
    from mithril.models import Gelu

    model = Model()
    model |= Gelu()(input="input", output="output")
    compiled = ml.compile(model, ml.GGMLBackend(threads=2), shapes={"input": [3, 5]})
    assert _custom_kinds(compiled) == set() and "custom op" not in compiled.source


def test_package_does_not_import_the_testing_module():
    import pathlib

    import mithril_backend_ggml

    root = pathlib.Path(mithril_backend_ggml.__file__).parent
    for path in root.glob("*.py"):
        assert "mithril_testing" not in path.read_text(), path
