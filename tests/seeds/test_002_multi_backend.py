"""Seed 002 "Multi-Backend Deployment": one test per Mithril code block (all blocks are Mithril code).
Blocks 00, 01, 05, 06 need the model builders (resnet18, create_gpt, clip, t5) of mithril-models."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from _seed_helpers import assert_option_rejected, check_against_numpy, requires_models, to_np


def test_002_multi_backend_block00_same_model_multiple_backends(backend_or_numpy):
    # As written, except device="cuda" -> CPU; the block only compiles, the test also evaluates every
    # compiled model with the same parameters and compares the logits.
    resnet18 = requires_models("resnet18")
    model = resnet18(num_classes=1000)
    compiled = []
    for name, opts in [("torch", {}), ("jax", {}), ("mlx", {})]:
        backend = backend_or_numpy(name, **opts)
        compiled.append(
            (backend, ml.compile(model, backend=backend, shapes={"input": [1, 3, 224, 224]}, data_keys={"input"}))
        )
    image = np.random.default_rng(0).normal(size=(1, 3, 224, 224)).astype(np.float32)
    reference = compiled[0][1].randomize_params(seed=0)
    outs = []
    for backend, pm in compiled:
        params = {k: backend.array(compiled[0][0].to_numpy(v)) for k, v in reference.items()}
        outs.append(to_np(backend, pm.evaluate(params, {"input": backend.array(image)})["output"]))
    assert outs[0].shape == (1, 1000)
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-4, atol=1e-5)


def test_002_multi_backend_block01_benchmarking(backend_class_or_numpy):
    # Changes: `evaluate({}, ...)` has no parameters -> `randomize_params()`; `from examples.gpt.model` ->
    # `mithril.models`; the "transformer" branch is run too (1 layer instead of 12); 2 runs instead of 100.
    requires_models("resnet18", "create_gpt")
    import time

    def benchmark_model(model_name, input_shape, backends, num_runs=2):
        if model_name == "resnet18":
            from mithril.models import resnet18

            model = resnet18(num_classes=1000)
        elif model_name == "transformer":
            from mithril.models import create_gpt

            model = create_gpt(bias=True, block_size=128, dims=768, num_heads=12, num_layers=1, vocab_size=50304)
        numpy_input = np.random.randn(*input_shape).astype(np.float32)
        if model_name == "transformer":
            numpy_input = np.random.randint(0, 50304, input_shape)
        results = {}
        for backend_name, backend_class in backends.items():
            backend = backend_class()
            compiled_model = ml.compile(
                model, backend=backend, shapes={"input": input_shape}, data_keys={"input"}, jit=True
            )
            params = compiled_model.randomize_params()
            backend_input = backend.array(numpy_input)
            compiled_model.evaluate(params, {"input": backend_input})
            start_time = time.time()
            for _ in range(num_runs):
                compiled_model.evaluate(params, {"input": backend_input})
            results[backend_name] = (time.time() - start_time) / num_runs
        return results

    backends = {name: backend_class_or_numpy(name) for name in ["torch", "jax", "numpy"]}
    for model_name, shape in (("resnet18", [1, 3, 224, 224]), ("transformer", [1, 128])):
        results = benchmark_model(model_name, shape, backends)
        assert set(results) == {"torch", "jax", "numpy"} and all(t > 0 for t in results.values())


def test_002_multi_backend_block02_cross_backend_transfer(backend_or_numpy):
    # Changes: `model`/`train_model`/`training_data` are undefined in the seed (a small MLP and a few SGD
    # steps here); `v.cpu().numpy()` (torch only) -> `torch_backend.to_numpy(v)`; device="cuda" -> CPU.
    model = ml.models.MLP(input_size=6, hidden_sizes=[8], output_size=2)
    torch_backend = backend_or_numpy("torch")
    torch_model = ml.compile(model, backend=torch_backend, shapes={"input": [5, 6]}, data_keys={"input"})
    torch_params = torch_model.randomize_params(seed=1)
    x = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
    for _ in range(3):
        _out, grads = torch_model.evaluate(
            torch_params, {"input": torch_backend.array(x)}, output_gradients={"output": torch_backend.ones(5, 2)}
        )
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
    # As written (the ResNet-50 CLIP of the block) except `from examples.clip.model` -> `mithril.models` and
    # `device="cuda" if ...` -> CPU; the block only compiles. The test also runs a small CLIP on each
    # backend with the same parameters and compares the outputs.
    clip = requires_models("clip")
    clip_model = clip(
        embed_dim=512,
        image_resolution=224,
        vision_layers=(3, 4, 6, 3),
        vision_width=64,
        vision_patch_size=0,
        context_length=77,
        vocab_size=49408,
        transformer_width=512,
        transformer_heads=8,
        transformer_layers=12,
    )
    shapes = {"image": [1, 3, 224, 224], "text": [1, 77]}
    for name in ["torch", "jax", "mlx"]:
        pm = ml.compile(clip_model, backend_or_numpy(name), shapes=shapes, data_keys={"image", "text"})
        assert pm.shapes["logits_per_image"] == [1, 1]
    small = clip(embed_dim=32, image_resolution=32, vision_layers=(1, 1, 1, 1), vision_width=8, vision_patch_size=0,
                 context_length=8, vocab_size=64, transformer_width=16, transformer_heads=2, transformer_layers=1)
    rng = np.random.default_rng(0)
    data = {"image": rng.normal(size=(2, 3, 32, 32)).astype(np.float32), "text": rng.integers(0, 63, (2, 8))}
    data["text"][:, -1] = 63  # the end-of-text token: the highest id of each row
    outs, reference = [], None
    for name in ["torch", "jax", "mlx"]:
        backend = backend_or_numpy(name)
        pm = ml.compile(small, backend, shapes={"image": [2, 3, 32, 32], "text": [2, 8]}, data_keys={"image", "text"})
        reference = reference or {k: np.asarray(backend.to_numpy(v)) for k, v in pm.randomize_params(seed=0).items()}
        params = {k: backend.array(v) for k, v in reference.items()}
        outs.append(
            to_np(backend, pm.evaluate(params, {k: backend.array(v) for k, v in data.items()})["logits_per_image"])
        )
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-4, atol=1e-5)


def test_002_multi_backend_block06_t5_gpt(backend_or_numpy):
    # As written except the imports (`examples...` -> `mithril.models`) and `config`, which the block leaves
    # undefined (a small transformers T5Config, or the same fields as a dict). The test also runs the
    # encoder on JAX and the decoder on PyTorch end to end, and evaluates the GPT once.
    t5_encode, t5_decode, create_gpt = requires_models("t5_encode", "t5_decode", "create_gpt")
    try:
        from transformers import T5Config

        config = T5Config(
            vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=8
        )
    except ImportError:
        config = {
            "vocab_size": 64,
            "d_model": 32,
            "d_kv": 8,
            "d_ff": 64,
            "num_layers": 2,
            "num_decoder_layers": 2,
            "num_heads": 4,
            "relative_attention_num_buckets": 8,
            "relative_attention_max_distance": 128,
            "feed_forward_proj": "relu",
        }
    encoder_lm = t5_encode(config)
    decoder_lm = t5_decode(config)
    jax_backend, torch_backend = backend_or_numpy("jax"), backend_or_numpy("torch")
    encoder = ml.compile(encoder_lm, jax_backend, data_keys={"input"})
    decoder = ml.compile(decoder_lm, torch_backend, data_keys={"input", "memory"})

    rng = np.random.default_rng(0)
    source, target = rng.integers(0, 64, (2, 7)), rng.integers(0, 64, (2, 5))
    enc_params = {k: jax_backend.array(v) for k, v in _numpy_params(encoder).items()}
    dec_params = {k: torch_backend.array(v) for k, v in _numpy_params(decoder).items()}
    memory = to_np(jax_backend, encoder.evaluate(enc_params, {"input": jax_backend.array(source)})["output"])
    logits = to_np(
        torch_backend,
        decoder.evaluate(dec_params, {"input": torch_backend.array(target), "memory": torch_backend.array(memory)})[
            "output"
        ],
    )
    assert logits.shape == (2, 5, 64)
    numpy_backend = ml.NumpyBackend()
    ref_memory = ml.compile(encoder_lm, numpy_backend, data_keys={"input"}).evaluate(
        _numpy_params(encoder), {"input": source}
    )["output"]
    ref_logits = ml.compile(decoder_lm, numpy_backend, data_keys={"input", "memory"}).evaluate(
        _numpy_params(decoder), {"input": target, "memory": ref_memory}
    )["output"]
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5)

    gpt = create_gpt(bias=True, block_size=100, dims=768, num_heads=12, num_layers=12, vocab_size=50304)
    mlx_backend = backend_or_numpy("mlx")
    mlx_gpt = ml.compile(gpt, mlx_backend, data_keys={"input"})
    out = mlx_gpt.evaluate(
        mlx_gpt.randomize_params(seed=0), {"input": mlx_backend.array(rng.integers(0, 50304, (1, 4)))}
    )
    assert tuple(out["output"].shape) == (1, 4, 50304)


def _numpy_params(pm) -> dict:
    """Parameters drawn with NumPy (seed 0) for ``pm``: the same numbers whatever backend compiled it."""
    return {k: np.asarray(pm.backend.to_numpy(v)) for k, v in pm.randomize_params(seed=0).items()}

