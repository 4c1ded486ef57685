"""Composite blocks on the NumPy backend against hand-written PyTorch (float64): outputs and gradients."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.models import (
    MLP,
    BatchNorm2d,
    BinaryCrossEntropy,
    Conv2d,
    CrossEntropy,
    Dropout,
    Embedding,
    GroupNorm,
    IOKey,
    LayerNorm,
    Model,
    MultiHeadAttention,
    RMSNorm,
    SquaredError,
)

torch = pytest.importorskip("torch")
F = torch.nn.functional


def run(block, shapes, data, *, data_keys=(), grad_key="output"):
    """Compile ``block``, evaluate with random params and a ones cotangent; returns (params, out, grads)."""
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(block, backend, shapes=shapes, data_keys=set(data_keys) | set(data))
    params = pm.randomize_params(seed=0)
    out, grads = pm.evaluate(params, data, output_gradients={grad_key: np.ones(pm.shapes[grad_key])})
    return params, out[grad_key], grads


def _nth(key: str, i: int) -> str:
    """The short name of the ``i``-th input with ``key``, in order of first use: ``weight``, ``weight_1``, ..."""
    return key if i == 0 else f"{key}_{i}"


def t(array, grad=True):
    return torch.tensor(np.asarray(array), dtype=torch.float64, requires_grad=grad)


def check(out, grads, ref_out, ref_params):
    ref_out.backward(torch.ones_like(ref_out))
    np.testing.assert_allclose(out, ref_out.detach().numpy(), rtol=1e-9, atol=1e-10)
    for name, tensor in ref_params.items():
        np.testing.assert_allclose(grads[name], tensor.grad.numpy(), rtol=1e-8, atol=1e-9, err_msg=name)


def test_layer_norm():
    x = np.random.default_rng(0).normal(size=(2, 3, 8))
    params, _, _ = run(LayerNorm(), {"input": [2, 3, 8]}, {"input": x})
    w, b = t(params["weight"] + 0.5), t(params["bias"])  # off the ones initialisation, so the scale matters
    params["weight"] = w.detach().numpy()
    pm_out = _recompute(LayerNorm(), {"input": [2, 3, 8]}, {"input": x}, params)
    ref = F.layer_norm(t(x, False), (8,), w, b, 1e-5)
    check(pm_out[0], pm_out[1], ref, {"weight": w, "bias": b})


def _recompute(block, shapes, data, params):
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(block, backend, shapes=shapes, data_keys=set(data))
    out, grads = pm.evaluate(params, data, output_gradients={"output": np.ones(pm.shapes["output"])})
    return out["output"], grads


def test_rms_norm():
    x = np.random.default_rng(1).normal(size=(4, 6))
    params, out, grads = run(RMSNorm(), {"input": [4, 6]}, {"input": x})
    w = t(params["weight"])
    xt = t(x, False)
    ref = xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    check(out, grads, ref, {"weight": w})


def test_group_norm():
    x = np.random.default_rng(2).normal(size=(2, 6, 4, 4))
    rng = np.random.default_rng(3)
    params = {"weight": rng.normal(size=6), "bias": rng.normal(size=6)}
    out, grads = _recompute(GroupNorm(num_groups=3), {"input": [2, 6, 4, 4]}, {"input": x}, params)
    w, b = t(params["weight"]), t(params["bias"])
    check(out, grads, F.group_norm(t(x, False), 3, w, b, 1e-5), {"weight": w, "bias": b})


@pytest.mark.parametrize("use_batch_stats", [True, False])
def test_batch_norm(use_batch_stats):
    """Training mode (batch statistics, running statistics updated) and inference mode (running statistics,
    passed with the parameters as buffers) against ``F.batch_norm``."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 4, 5, 5))
    params = {
        "weight": rng.normal(size=4),
        "bias": rng.normal(size=4),
        "running_mean": rng.normal(size=4),
        "running_var": rng.uniform(0.5, 2, size=4),
    }
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(
        BatchNorm2d(use_batch_stats=use_batch_stats, momentum=0.2),
        backend,
        shapes={"input": [3, 4, 5, 5]},
        data_keys={"input"},
    )
    assert pm.param_keys == ["weight", "bias"] and pm.buffer_keys == ["running_mean", "running_var"]
    out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": np.ones(x.shape)})
    w, b = t(params["weight"]), t(params["bias"])
    stats = torch.tensor(params["running_mean"]), torch.tensor(params["running_var"])
    ref = F.batch_norm(t(x, False), *stats, w, b, training=use_batch_stats, momentum=0.2, eps=1e-5)
    check(out["output"], grads, ref, {"weight": w, "bias": b})
    if use_batch_stats:  # F.batch_norm updated ``stats`` in place
        updated = pm.update_buffers(params, out)
        np.testing.assert_allclose(updated["running_mean"], stats[0].numpy(), rtol=1e-12)
        np.testing.assert_allclose(updated["running_var"], stats[1].numpy(), rtol=1e-12)
    else:
        assert pm.buffer_updates == {}


def test_conv2d_groups_stride_padding():
    x = np.random.default_rng(5).normal(size=(2, 4, 9, 9))
    params, out, grads = run(Conv2d(6, 3, stride=2, padding=1, groups=2), {"input": [2, 4, 9, 9]}, {"input": x})
    w, b = t(params["weight"]), t(params["bias"])
    check(out, grads, F.conv2d(t(x, False), w, b, stride=2, padding=1, groups=2), {"weight": w, "bias": b})


def test_embedding():
    ids = np.array([[1, 3, 3], [0, 9, 1]])
    params, out, grads = run(Embedding(10, 4), {"input": [2, 3]}, {"input": ids})
    w = t(params["weight"])
    check(out, grads, F.embedding(torch.tensor(ids), w), {"weight": w})


def test_multi_head_attention_matches_torch():
    dims, heads = 8, 2
    x = np.random.default_rng(6).normal(size=(2, 5, dims))
    params, out, grads = run(MultiHeadAttention(dims, heads, causal=True), {"input": [2, 5, dims]}, {"input": x})
    mha = torch.nn.MultiheadAttention(dims, heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.tensor(np.concatenate([params[_nth("weight", i)] for i in range(3)])))
        mha.in_proj_bias.copy_(torch.tensor(np.concatenate([params[_nth("bias", i)] for i in range(3)])))
        mha.out_proj.weight.copy_(torch.tensor(params["weight_3"]))
        mha.out_proj.bias.copy_(torch.tensor(params["bias_3"]))
    xt = t(x, False)
    mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    ref, _ = mha(xt, xt, xt, attn_mask=mask, need_weights=False)
    ref.backward(torch.ones_like(ref))
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(grads["weight_3"], mha.out_proj.weight.grad.numpy(), rtol=1e-8, atol=1e-9)
    in_grad = np.concatenate([grads[_nth("weight", i)] for i in range(3)])
    np.testing.assert_allclose(in_grad, mha.in_proj_weight.grad.numpy(), rtol=1e-8, atol=1e-9)


def test_mlp_matches_torch_sequential():
    x = np.random.default_rng(7).normal(size=(3, 5))
    params, out, grads = run(MLP(input_size=5, hidden_sizes=[7], output_size=2), {"input": [3, 5]}, {"input": x})
    w0, b0, w1, b1 = (t(params[k]) for k in ("weight0", "bias0", "weight1", "bias1"))
    ref = F.linear(F.relu(F.linear(t(x, False), w0, b0)), w1, b1)
    check(out, grads, ref, {"weight0": w0, "bias0": b0, "weight1": w1, "bias1": b1})


@pytest.mark.parametrize(
    ("loss", "target", "ref"),
    [
        (CrossEntropy(reduction="mean"), np.array([0, 2, 1]), lambda x, y: F.cross_entropy(x, torch.tensor(y))),
        (
            BinaryCrossEntropy(reduction="mean"),
            np.array([[1.0, 0.0, 1.0]] * 3),
            lambda x, y: F.binary_cross_entropy_with_logits(x, torch.tensor(y)),
        ),
        (SquaredError(reduction="mean"), np.ones((3, 3)), lambda x, y: F.mse_loss(x, torch.tensor(y))),
    ],
)
def test_losses(loss, target, ref):
    logits = np.random.default_rng(8).normal(size=(3, 3))
    model = Model()
    model |= loss(input=IOKey("input", differentiable=True), target="target", output=IOKey("output"))
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(model, backend, shapes={"input": [3, 3]}, data_keys={"target"})
    out, grads = pm.evaluate({"input": logits}, {"target": target}, output_gradients=True)
    x = t(logits)
    expected = ref(x, target)
    expected.backward()
    np.testing.assert_allclose(out["output"], expected.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(grads["input"], x.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_dropout_is_identity_when_not_training_and_scaled_when_training():
    x = np.ones((200, 50))
    backend = ml.NumpyBackend(dtype=ml.float64, seed=0)
    for training, check_fn in (
        (False, lambda y: np.array_equal(y, x)),
        (True, lambda y: set(np.unique(y)) <= {0.0, 2.0}),
    ):
        model = Model()
        model |= Dropout(p=0.5)(input="input", training=training, output=IOKey("output"))
        pm = ml.compile(model, backend, inference=True)
        y = pm.evaluate({}, {"input": x})["output"]
        assert check_fn(y)
    assert abs(y.mean() - 1.0) < 0.05
