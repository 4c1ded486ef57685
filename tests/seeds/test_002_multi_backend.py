"""Seed 002 "Multi-Backend Deployment": one test per Mithril code block (all blocks are Mithril code).
Blocks 00, 01, 05, 06 need the model builders (resnet18, create_gpt, clip, t5) of mithril-models."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from _seed_helpers import assert_option_rejected, check_against_numpy, requires_models, to_np


def test_002_multi_backend_block00_same_model_multiple_backends(backend_or_numpy):
    resnet18 = requires_models("resnet18")
    model = resnet18(num_classes=10)
    outs = []
    for name, opts in [("torch", {}), ("jax", {}), ("mlx", {})]:
        backend = backend_or_numpy(name, **opts)
        pm = ml.compile(model, backend=backend, shapes={"input": [1, 3, 32, 32]}, data_keys={"input"})
        params = pm.randomize_params(seed=0)
        outs.append(to_np(backend, pm.evaluate(params, {"input": backend.array(np.ones((1, 3, 32, 32), np.float32))})["output"]))
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-3, atol=1e-4)


def test_002_multi_backend_block01_benchmarking(backend_class_or_numpy):
    resnet18 = requires_models("resnet18")
    model = resnet18(num_classes=10)
    for name in ["torch", "jax", "numpy"]:
        backend = backend_class_or_numpy(name)()
        pm = ml.compile(model, backend=backend, shapes={"input": [1, 3, 32, 32]}, data_keys={"input"}, jit=True)
        params = pm.randomize_params()  # the seed's evaluate({}, ...) would be missing the parameters
        pm.evaluate(params, {"input": backend.array(np.ones((1, 3, 32, 32), np.float32))})


def test_002_multi_backend_block02_cross_backend_transfer(backend_or_numpy):
    # Changes: `model`/`train_model`/`training_data` are undefined in the seed (a small MLP and a few SGD
    # steps here); `v.cpu().numpy()` (torch only) -> `torch_backend.to_numpy(v)`; device="cuda" -> CPU.
    model = ml.models.MLP(input_size=6, hidden_sizes=[8], output_size=2)
    torch_backend = backend_or_numpy("torch")
    torch_model = ml.compile(model, backend=torch_backend, shapes={"input": [5, 6]}, data_keys={"input"})
    torch_params = torch_model.randomize_params(seed=1)
    x = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
    for _ in range(3):
        out, grads = torch_model.evaluate(torch_params, {"input": torch_backend.array(x)}, output_gradients={"output": torch_backend.ones(5, 2)})
        torch_params = {k: torch_params[k] - 0.1 * grads[k] for k in torch_params}
    numpy_params = {k: torch_backend.to_numpy(v) for k, v in torch_params.items()}
    jax_backend = backend_or_numpy("jax")
    jax_model = ml.compile(model, backend=jax_backend, data_keys={"input"})
    jax_params = {k: jax_backend.array(v) for k, v in numpy_params.items()}
    outputs = jax_model.evaluate(jax_params, {"input": jax_backend.array(x)})
    want = torch_model.evaluate(torch_params, {"input": torch_backend.array(x)})["output"]
    np.testing.assert_allclose(to_np(jax_backend, outputs["output"]), to_np(torch_backend, want), rtol=1e-5, atol=1e-6)


def test_002_multi_backend_block03_backend_specific_options(backend_or_numpy):
    model = ml.models.MLP(input_size=6, hidden_sizes=[8], output_size=2)
    with pytest.raises(TypeError) as exc:
        ml.compile(model, backend=backend_or_numpy("jax"), data_keys={"input"}, jit=True, auto_scalar_promotion=True)
    assert_option_rejected(exc, "auto_scalar_promotion")
    for name in ["jax", "torch", "mlx"]:
        backend = backend_or_numpy(name)
        pm = ml.compile(model, backend=backend, data_keys={"input"}, jit=True)
        params = pm.randomize_params(seed=0)
        data = {"input": backend.ones(3, 6)}
        assert tuple(pm.evaluate(params, data)["output"].shape) == (3, 2)
        check_against_numpy(model, backend, params, data, data_keys={"input"})


def test_002_multi_backend_block04_multi_device(backend_class_or_numpy):
    cls = backend_class_or_numpy("torch")
    for strategy in ["data_parallel", "model_parallel"]:
        with pytest.raises(TypeError) as exc:
            cls(parallel_strategy=strategy, devices=["cuda:0", "cuda:1"])
        assert_option_rejected(exc, "parallel_strategy", "devices")


def test_002_multi_backend_block05_clip(backend_or_numpy):
    clip = requires_models("clip")
    clip_model = clip(embed_dim=32, image_resolution=32, vision_layers=(1, 1, 1, 1), vision_width=8, vision_patch_size=0,
                      context_length=8, vocab_size=64, transformer_width=16, transformer_heads=2, transformer_layers=1)
    shapes = {"image": [1, 3, 32, 32], "text": [1, 8]}
    for name in ["torch", "jax", "mlx"]:
        ml.compile(clip_model, backend_or_numpy(name), shapes=shapes, data_keys={"image", "text"})


def test_002_multi_backend_block06_t5_gpt(backend_or_numpy):
    t5_encode, t5_decode, create_gpt = requires_models("t5_encode", "t5_decode", "create_gpt")
    gpt = create_gpt(bias=True, block_size=16, dims=32, num_heads=2, num_layers=1, vocab_size=64)
    ml.compile(gpt, backend_or_numpy("mlx"), data_keys={"input"}, shapes={"input": [1, 16]})
