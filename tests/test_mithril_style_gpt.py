"""GPT-2 written the way Mithril's published GPT example writes it (issue 12): symbolic shapes, ``Split``
with a list-valued output, ``ScaledDotProduct()`` causal by default, positional ``.connect``, ``Size`` and
``Arange`` for the positions. Compiled once without shapes, it runs at any batch and sequence length on
NumPy, JAX and PyTorch and equals ``mithril_models.create_gpt`` with the same weights."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril.models import (
    Add,
    Arange,
    Embedding,
    Gelu,
    IOKey,
    LayerNorm,
    Linear,
    Model,
    ScaledDotProduct,
    Size,
    Split,
)

mithril_models = pytest.importorskip("mithril_models")


def causal_attention(input_dim, num_heads, bias=True):
    if (input_dim % num_heads) != 0:
        raise ValueError("Requires input dims to be divisible by num_heads")
    model = Model(name="attn")
    model |= Linear(input_dim * 3, use_bias=bias, name="c_attn").connect(input="input", output="c_attn_out")
    t_axes = (0, 2, 1, 3)
    shp_con = model.input.shape
    reshape_con = (shp_con[0], shp_con[1], num_heads, -1)
    model |= Split(3, axis=-1).connect(model.c_attn_out, output="split_out")
    tq = model.split_out[0].reshape(reshape_con).transpose(t_axes)
    tk = model.split_out[1].reshape(reshape_con).transpose(t_axes)
    tv = model.split_out[2].reshape(reshape_con).transpose(t_axes)
    model |= ScaledDotProduct().connect(tq, tk, tv, output="sdp_out")
    t_sdp = model.sdp_out.transpose(t_axes).reshape(shp_con[:3])
    model |= Linear(input_dim, use_bias=bias, name="c_proj").connect(t_sdp, output=IOKey("output"))
    return model


def mlp(n_embd, bias=True):
    block = Model(name="mlp")
    block |= Linear(n_embd * 4, use_bias=bias, name="c_fc").connect(input="input", output="c_fc_output")
    block |= Gelu(approximate=True).connect(input="c_fc_output", output="c_fc_gelu_output")
    block |= Linear(n_embd, use_bias=bias, name="c_proj").connect(input="c_fc_gelu_output", output=IOKey("output"))
    return block


def create_block(name, dims, num_heads, bias=True, eps=1e-5):
    block = Model(name=name)
    block |= LayerNorm(use_bias=bias, eps=eps, name="ln_1").connect(input="input", output="ln1_out")
    block |= causal_attention(dims, num_heads, bias).connect(input="ln1_out", output="attn_out")
    block |= Add().connect(block.input, block.attn_out, output="residual")
    block |= LayerNorm(use_bias=bias, eps=eps, name="ln_2").connect(input="residual", output="ln2_out")
    block |= mlp(dims, bias).connect(input="ln2_out", output="mlp_output")
    block |= Add().connect(block.residual, block.mlp_output, output=IOKey("output"))
    block.expose_keys("output")
    return block


def create_gpt(bias, block_size, dims, num_heads, num_layers, vocab_size):
    transformer = Model(name="transformer")
    transformer |= Size(dim=1).connect("input")
    transformer |= Arange(start=0, step=1).connect(stop=transformer.cout)
    transformer |= Embedding(name="wpe", num_embeddings=block_size, dim=dims).connect(
        input=transformer.cout, output="pos_out"
    )
    transformer |= Embedding(name="wte", num_embeddings=vocab_size, dim=dims).connect(input="input", output="token_out")
    transformer |= Add().connect("pos_out", "token_out", output="embeddings")
    blocks = Model(name="h")
    for idx in range(num_layers):
        if idx == 0:
            blocks |= create_block(f"{idx}", dims, num_heads, bias).connect(input="input")
        else:
            blocks += create_block(f"{idx}", dims, num_heads, bias)
    transformer |= blocks.connect(input="embeddings", output="blocks_out")
    transformer |= LayerNorm(use_bias=bias, name="ln_f").connect(input="blocks_out", output=IOKey("output"))
    transformer.expose_keys("output")
    gpt = Model()
    gpt |= transformer.connect(input="input")
    gpt += Linear(vocab_size, use_bias=False, name="lm_head").connect(output=IOKey("output"))
    gpt.expose_keys("output")
    return gpt


def _backends():
    backends = [ml.NumpyBackend(dtype=ml.float64)]
    for name in ("JaxBackend", "TorchBackend"):
        try:
            backends.append(getattr(ml, name)(dtype=ml.float64))
        except Exception:  # plugin not installed in this environment
            continue
    return backends


@pytest.mark.slow
@pytest.mark.parametrize("backend", _backends(), ids=lambda b: type(b).__name__)
def test_mithril_style_gpt_runs_at_any_length_and_matches_the_builder(backend):
    sizes = {"bias": True, "block_size": 16, "dims": 16, "num_heads": 2, "num_layers": 2, "vocab_size": 40}
    ours = ml.compile(create_gpt(**sizes), backend, use_short_namings=False)
    reference = ml.compile(
        mithril_models.create_gpt(**sizes, tie_word_embeddings=False), backend, use_short_namings=False
    )
    assert ours.output_keys == ["output"]
    ref_params = reference.randomize_params(seed=0)
    params = {key: ref_params[key] for key in ours.param_keys}  # the published example's names are HF's too
    assert sorted(params) == sorted(ref_params)
    rng = np.random.default_rng(0)
    for batch, length in ((1, 5), (2, 9)):
        ids = rng.integers(0, sizes["vocab_size"], size=(batch, length))
        got = backend.to_numpy(ours.evaluate(params, {"input": backend.array(ids)})["output"])
        want = backend.to_numpy(reference.evaluate(ref_params, {"input": backend.array(ids)})["output"])
        assert np.asarray(got).shape == (batch, length, sizes["vocab_size"])
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-10)
    # causal: the logits of the first positions do not depend on later tokens
    ids = rng.integers(0, sizes["vocab_size"], size=(1, 6))
    changed = ids.copy()
    changed[0, -1] = (changed[0, -1] + 1) % sizes["vocab_size"]
    first = np.asarray(backend.to_numpy(ours.evaluate(params, {"input": backend.array(ids)})["output"]))
    second = np.asarray(backend.to_numpy(ours.evaluate(params, {"input": backend.array(changed)})["output"]))
    np.testing.assert_allclose(first[0, :-1], second[0, :-1], rtol=1e-12)
    assert not np.allclose(first[0, -1], second[0, -1])


@pytest.mark.slow
def test_train_model_trains_with_optax_on_jax():
    """Mithril's training scripts: TrainModel + evaluate(output_gradients=True) + optax, unchanged."""
    optax = pytest.importorskip("optax")
    try:
        backend = ml.JaxBackend(dtype=ml.float32)
    except Exception:
        pytest.skip("JAX backend not installed")
    from mithril.models import CrossEntropy, TrainModel

    gpt = create_gpt(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=12)
    train_model = TrainModel(gpt)
    logits = train_model.output.transpose((0, 2, 1))  # classes on axis 1, as CrossEntropy takes them
    train_model.add_loss(CrossEntropy(), input=logits, target="target", reduce_steps=[ml.Mean()])
    pm = ml.compile(train_model, backend, shapes={"input": [2, 6], "target": [2, 6]})
    params = pm.randomize_params(seed=0)
    optimizer = optax.adam(1e-2)
    state = optimizer.init(params)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 12, size=(2, 7))
    data = {"input": backend.array(ids[:, :-1]), "target": backend.array(ids[:, 1:])}
    costs = []
    for _ in range(30):
        outputs, grads = pm.evaluate(params, data, output_gradients=True)
        updates, state = optimizer.update(grads, state)
        params = optax.apply_updates(params, updates)
        costs.append(float(outputs["final_cost"]))
    assert costs[-1] < 0.5 * costs[0]
