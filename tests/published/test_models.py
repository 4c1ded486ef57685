"""Mithril's published model examples (``examples/gpt/model.py``, ``examples/clip/model.py``,
``examples/t5.py``) imported unchanged from a checkout, built at small and documented sizes, compiled on
NumPy, JAX and PyTorch without input shapes (batch and sequence lengths stay symbolic), and evaluated with
outputs and gradients: equal to ``mithril_models`` given the same weights. Skipped without
``MITHRIL_CHECKOUT`` (see :mod:`tests.published.checkout`)."""

from __future__ import annotations

import re

import mithril as ml
import numpy as np
import pytest

from .checkout import published
from .clip_reference import openai_params

mithril_models = pytest.importorskip("mithril_models")

GPT_SMALL = {"bias": True, "block_size": 16, "dims": 16, "num_heads": 2, "num_layers": 2, "vocab_size": 40}
def gpt_reference(sizes: dict):
    """The builder's GPT-2 with the example's choices: exact (erf) GELU, an untied LM head."""
    from mithril_models.gpt import from_hf_config

    hf = {"n_embd": sizes["dims"], "n_layer": sizes["num_layers"], "n_head": sizes["num_heads"],
          "n_positions": sizes["block_size"], "vocab_size": sizes["vocab_size"], "activation_function": "gelu",
          "tie_word_embeddings": False}  # fmt: skip
    return from_hf_config(hf)


GPT2_SMALL = {"bias": True, "block_size": 1024, "dims": 768, "num_heads": 12, "num_layers": 12, "vocab_size": 50257}


def _backends() -> list:
    backends = []
    for name in ("NumpyBackend", "JaxBackend", "TorchBackend"):
        try:
            backends.append(getattr(ml, name)(dtype=ml.float64))
        except Exception:  # plugin not installed in this environment
            continue
    return backends


def _numpy(backend, tree):
    return {k: np.asarray(backend.to_numpy(v)) for k, v in tree.items()}


def assert_same_results(backend, ours, reference, params: tuple, data: dict, seed: dict, *, rename=lambda key: key,
                        rtol: float = 1e-10, atol: float = 1e-12, grad_rtol: float = 1e-9) -> dict:  # fmt: skip
    """Outputs and gradients of ``ours`` equal ``reference``'s (``params``: each one's; ``rename``: our
    parameter name -> the reference's). Returns the reference's outputs."""
    got, got_grads = ours.evaluate(params[0], data, output_gradients=seed)
    want, want_grads = reference.evaluate(params[1], data, output_gradients=seed)
    for key in seed:
        np.testing.assert_allclose(
            _numpy(backend, got)[key], _numpy(backend, want)[key], rtol=rtol, atol=atol, err_msg=key
        )
    got_grads, want_grads = _numpy(backend, got_grads), _numpy(backend, want_grads)
    assert sorted(rename(k) for k in got_grads) == sorted(want_grads)
    for key, value in got_grads.items():
        np.testing.assert_allclose(value, want_grads[rename(key)], rtol=grad_rtol, atol=atol * 100, err_msg=key)
    return _numpy(backend, want)


@pytest.mark.parametrize("backend", _backends(), ids=lambda b: type(b).__name__)
def test_published_gpt_matches_the_builder_with_gradients_at_any_length(backend):
    example = published("gpt.model")
    ours = ml.compile(example.create_gpt(**GPT_SMALL), backend, use_short_namings=False)
    reference = ml.compile(gpt_reference(GPT_SMALL), backend, use_short_namings=False)
    assert ours.output_keys == ["output"]
    params = reference.randomize_params(seed=0)
    assert sorted(ours.param_keys) == sorted(params), (
        "the published example's names are Hugging Face's, as the builder's"
    )
    rng = np.random.default_rng(0)
    for batch, length in ((1, 5), (2, 9)):  # one compiled model, two lengths
        ids = backend.array(rng.integers(0, GPT_SMALL["vocab_size"], size=(batch, length)))
        seed = {"output": backend.array(rng.normal(size=(batch, length, GPT_SMALL["vocab_size"])))}
        got, got_grads = ours.evaluate(params, {"input": ids}, output_gradients=seed)
        want, want_grads = reference.evaluate(params, {"input": ids}, output_gradients=seed)
        assert _numpy(backend, got)["output"].shape == (batch, length, GPT_SMALL["vocab_size"])
        np.testing.assert_allclose(
            _numpy(backend, got)["output"], _numpy(backend, want)["output"], rtol=1e-9, atol=1e-10
        )
        got_grads, want_grads = _numpy(backend, got_grads), _numpy(backend, want_grads)
        assert sorted(got_grads) == sorted(want_grads)
        for key in want_grads:
            np.testing.assert_allclose(got_grads[key], want_grads[key], rtol=1e-8, atol=1e-10, err_msg=key)
    ids = rng.integers(0, GPT_SMALL["vocab_size"], size=(1, 6))
    changed = ids.copy()
    changed[0, -1] = (changed[0, -1] + 1) % GPT_SMALL["vocab_size"]
    first, second = (
        _numpy(backend, ours.evaluate(params, {"input": backend.array(i)}))["output"] for i in (ids, changed)
    )
    np.testing.assert_allclose(first[0, :-1], second[0, :-1], rtol=1e-12)  # causal: earlier positions unchanged
    assert not np.allclose(first[0, -1], second[0, -1])


def test_published_gpt_builds_at_its_documented_size():
    """GPT-2 small (the example's run_sample sizes): 124M parameters once the vocabulary head is counted."""
    example = published("gpt.model")
    pm = ml.compile(
        example.create_gpt(**GPT2_SMALL),
        ml.NumpyBackend(),
        shapes={"input": [1, 8]},
        use_short_namings=False,
        inference=True,
    )
    reference = ml.compile(
        gpt_reference(GPT2_SMALL), ml.NumpyBackend(), shapes={"input": [1, 8]}, use_short_namings=False, inference=True
    )
    assert pm.shapes["output"] == [1, 8, GPT2_SMALL["vocab_size"]]
    assert {k: pm.shapes[k] for k in pm.param_keys} == {k: reference.shapes[k] for k in reference.param_keys}


# -- CLIP (examples/clip/model.py, the ViT configuration) -----------------------------------------------
# The example's attention mask is 77 x 77 (``build_attention_mask``), so texts have its context length; its
# ViT path takes the image by name, without the channel count, which ml.compile is given.
CLIP_SMALL = {"embed_dim": 16, "image_resolution": 16, "vision_layers": 2, "vision_width": 64, "vision_patch_size": 8,
              "context_length": 77, "vocab_size": 50, "transformer_width": 64, "transformer_heads": 2,
              "transformer_layers": 2}  # fmt: skip
CLIP_OUTPUTS = ("logits_per_image", "logits_per_text")
# the example's names for three of OpenAI's parameters
CLIP_NAMES = {"visual.class_embedding": "visual_class_embedding",
              "visual.positional_embedding": "visual_positional_embedding", "visual.proj": "visual_proj"}  # fmt: skip


def _clip_names(tree: dict) -> dict:
    return {CLIP_NAMES.get(k, k): v for k, v in tree.items()}


def _texts(rng, count: int) -> np.ndarray:
    """Token ids below the end-of-text id (the vocabulary's last), which ends each row at a random place."""
    length, vocab = CLIP_SMALL["context_length"], CLIP_SMALL["vocab_size"]
    text = rng.integers(1, vocab - 1, size=(count, length))
    text[np.arange(count), rng.integers(1, length, size=count)] = vocab - 1
    return text


@pytest.mark.parametrize("backend", _backends(), ids=lambda b: type(b).__name__)
def test_published_clip_matches_the_builder_with_gradients_at_any_batch(backend):
    example = published("clip.model")
    res = CLIP_SMALL["image_resolution"]
    ours = ml.compile(
        example.clip(**CLIP_SMALL), backend, shapes={"image": [None, 3, res, res]}, use_short_namings=False
    )
    reference = ml.compile(
        mithril_models.clip(**{k: v for k, v in CLIP_SMALL.items()}), backend, use_short_namings=False
    )
    assert sorted(ours.output_keys) == sorted(CLIP_OUTPUTS)
    ref_params = reference.randomize_params(seed=0)
    ref_params["logit_scale"] = backend.array(np.float64(0.7))  # random, so every parameter matters
    numpy_ref = _numpy(backend, ref_params)
    params = {k: backend.array(v) for k, v in _clip_names(openai_params(numpy_ref, CLIP_SMALL)).items()}
    params["logit_scale"] = backend.array(np.full((1,), 0.7))  # the example declares it with shape (1,)
    assert sorted(params) == sorted(ours.param_keys)
    rng = np.random.default_rng(0)
    for images, texts in ((2, 3), (1, 2)):  # one compiled model, several batch sizes
        data = {
            "image": backend.array(rng.normal(size=(images, 3, res, res))),
            "text": backend.array(_texts(rng, texts)),
        }
        seed = {"logits_per_image": backend.array(rng.normal(size=(images, texts)))}
        got, got_grads = ours.evaluate(params, data, output_gradients=seed)
        want, want_grads = reference.evaluate(
            ref_params,
            data,
            output_gradients={
                **seed,
                **{
                    k: backend.zeros(*v.shape)
                    for k, v in reference.evaluate(ref_params, data).items()
                    if k != "logits_per_image"
                },
            },
        )
        got, want = _numpy(backend, got), _numpy(backend, want)
        assert got["logits_per_image"].shape == (images, texts)
        for key in CLIP_OUTPUTS:  # the example's layer norms run in float32 (it casts to ml.float32 and back)
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-7, err_msg=key)
        expected = _clip_names(openai_params(_numpy(backend, want_grads), CLIP_SMALL))
        expected["logit_scale"] = _numpy(backend, want_grads)["logit_scale"].reshape(1)
        got_grads = _numpy(backend, got_grads)
        for key, value in expected.items():
            np.testing.assert_allclose(got_grads[key], value, rtol=1e-4, atol=1e-6, err_msg=key)


# -- T5 (examples/t5.py) ----------------------------------------------------------------------------------
# The example's RMSNorm adds 1e-5 under the root (the builder: layer_norm_epsilon); its decoder has no causal
# mask (its generation loop re-runs the whole target), so it equals the builder's causal decoder for one
# target position, and the encoder at any length. Its attention softmax runs in float32 (it casts the scores
# to ml.float32), hence float32 tolerances in float64.
# Its "gated-gelu" is the exact GELU (transformers' is the tanh one), so the gated configuration here is
# "gated-silu"; without "feed_forward_proj" it is the original ReLU T5 with tied embeddings.
T5_BASE = {"vocab_size": 40, "d_model": 16, "d_kv": 4, "d_ff": 24, "num_layers": 2, "num_heads": 3,
           "relative_attention_num_buckets": 8, "relative_attention_max_distance": 20,
           "layer_norm_epsilon": 1e-5}  # fmt: skip
T5_CONFIGS = {
    "gated-silu": {**T5_BASE, "feed_forward_proj": "gated-silu", "tie_word_embeddings": False},
    "relu-tied": T5_BASE,
}
_T5_LAYER = {"attention": "layer.0.SelfAttention", "self_attention": "layer.0.SelfAttention",
             "cross_attention": "layer.1.EncDecAttention", "ln1": "layer.0.layer_norm"}  # fmt: skip
_T5_PROJ = {"query_proj": "q", "key_proj": "k", "value_proj": "v", "out_proj": "o"}


def t5_reference_name(name: str, *, decoder: bool) -> str:
    """The example's parameter name -> ``mithril_models``' (Hugging Face's)."""
    fixed = {"wte.weight": "shared.weight", "lm_head.linear.weight": "lm_head.weight",
             "encoder.ln.weight": "final_layer_norm.weight", "decoder.ln.weight": "final_layer_norm.weight",
             "encoder.relative_attention_bias.embeddings.weight":
                 "block.0.layer.0.SelfAttention.relative_attention_bias.weight",
             "decoder.relative_attention_bias.embeddings.weight":
                 "block.0.layer.0.SelfAttention.relative_attention_bias.weight"}  # fmt: skip
    if name in fixed:
        return fixed[name]
    match = re.fullmatch(r"(?:encoder|decoder)\.layers_(\d+)\.(\w+)\.(?:(\w+)\.)?weight", name)
    assert match is not None, name
    block, part, proj = match.groups()
    dense = "layer.2" if decoder else "layer.1"
    norms = {"ln2": "layer.1.layer_norm", "ln3": "layer.2.layer_norm"}
    if part == "dense":
        return f"block.{block}.{dense}.DenseReluDense.{proj}.weight"
    if part in norms or part == "ln1":
        return f"block.{block}.{norms.get(part, _T5_LAYER.get(part))}.weight"
    return f"block.{block}.{_T5_LAYER[part]}.{_T5_PROJ[proj]}.weight"


def _t5_params(ours, reference_params: dict, *, decoder: bool) -> dict:
    names = {k: t5_reference_name(k, decoder=decoder) for k in ours.param_keys}
    assert sorted(names.values()) == sorted(reference_params)
    return {k: reference_params[v] for k, v in names.items()}


@pytest.mark.parametrize("config", sorted(T5_CONFIGS))
@pytest.mark.parametrize("backend", _backends(), ids=lambda b: type(b).__name__)
def test_published_t5_matches_the_builder_with_gradients_at_any_length(backend, config):
    T5_SMALL = T5_CONFIGS[config]
    example = published("t5")
    encoder = ml.compile(example.t5_encode(T5_SMALL), backend, shapes={"input": [None, None]}, use_short_namings=False)
    # the cross-attention reshapes keys by the query's batch: the shared symbol says they are one batch
    decoder = ml.compile(example.t5_decode(T5_SMALL), backend,
                         shapes={"input": ["B", None], "memory": ["B", None, T5_SMALL["d_model"]]},
                         data_keys={"memory"}, use_short_namings=False)  # fmt: skip
    ref_encoder = ml.compile(mithril_models.t5_encode(T5_SMALL), backend, use_short_namings=False)
    ref_decoder = ml.compile(mithril_models.t5_decode(T5_SMALL), backend, data_keys={"memory"}, use_short_namings=False)
    ref_enc, ref_dec = ref_encoder.randomize_params(seed=0), ref_decoder.randomize_params(seed=1)
    enc_params, dec_params = _t5_params(encoder, ref_enc, decoder=False), _t5_params(decoder, ref_dec, decoder=True)
    rng = np.random.default_rng(0)
    for batch, source in ((1, 5), (2, 12)):  # one compiled model; offsets below max_distance (no bucket ties)
        ids = backend.array(rng.integers(0, T5_SMALL["vocab_size"], size=(batch, source)))
        seed = {"output": backend.array(rng.normal(size=(batch, source, T5_SMALL["d_model"])))}
        want = assert_same_results(backend, encoder, ref_encoder, (enc_params, ref_enc), {"input": ids}, seed,
                                   rename=lambda key: t5_reference_name(key, decoder=False),
                                   rtol=1e-5, atol=1e-6, grad_rtol=1e-4)  # fmt: skip
        memory = backend.array(want["output"])
        target = backend.array(rng.integers(0, T5_SMALL["vocab_size"], size=(batch, 1)))
        data = {"input": target, "memory": memory}
        logits = _numpy(backend, decoder.evaluate(dec_params, data))["output"]
        np.testing.assert_allclose(
            logits, _numpy(backend, ref_decoder.evaluate(ref_dec, data))["output"], rtol=1e-5, atol=1e-6
        )
        longer = {"input": backend.array(rng.integers(0, T5_SMALL["vocab_size"], size=(batch, 4))), "memory": memory}
        assert _numpy(backend, decoder.evaluate(dec_params, longer))["output"].shape == (
            batch,
            4,
            T5_SMALL["vocab_size"],
        )


def test_published_clip_and_t5_build_at_their_documented_sizes():
    """CLIP ViT-B/32 and t5-small as the examples' loaders configure them: the same parameter shapes as the
    builders' (in OpenAI's and Hugging Face's layouts)."""
    vit_b32 = {"embed_dim": 512, "image_resolution": 224, "vision_layers": 12, "vision_width": 768,
               "vision_patch_size": 32, "context_length": 77, "vocab_size": 49408, "transformer_width": 512,
               "transformer_heads": 8, "transformer_layers": 12}  # fmt: skip
    clip = ml.compile(published("clip.model").clip(**vit_b32), ml.NumpyBackend(),
                      shapes={"image": [1, 3, 224, 224], "text": [1, 77]}, use_short_namings=False,
                      inference=True)  # fmt: skip
    reference = ml.compile(mithril_models.clip(**vit_b32), ml.NumpyBackend(),
                           shapes={"image": [1, 3, 224, 224], "text": [1, 77]}, use_short_namings=False,
                           inference=True)  # fmt: skip
    want = {k: np.zeros(reference.shapes[k]) for k in reference.param_keys}
    assert {k: list(v.shape) for k, v in _clip_names(openai_params(want, vit_b32)).items() if k != "logit_scale"} == {
        k: clip.shapes[k] for k in clip.param_keys if k != "logit_scale"}
    t5_small = {"vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
                "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
                "layer_norm_epsilon": 1e-5}  # fmt: skip
    encoder = ml.compile(
        published("t5").t5_encode(t5_small),
        ml.NumpyBackend(),
        shapes={"input": [1, 8]},
        use_short_namings=False,
        inference=True,
    )
    ref_encoder = ml.compile(
        mithril_models.t5_encode(t5_small),
        ml.NumpyBackend(),
        shapes={"input": [1, 8]},
        use_short_namings=False,
        inference=True,
    )
    assert {t5_reference_name(k, decoder=False): encoder.shapes[k] for k in encoder.param_keys} == {
        k: ref_encoder.shapes[k] for k in ref_encoder.param_keys
    }


@pytest.mark.parametrize("backend", _backends(), ids=lambda b: type(b).__name__)
def test_published_functional_gpt_equals_the_published_gpt(backend):
    """``examples/gpt/functional_model.py`` writes GPT-2 in Mithril's functional style (models called with
    their inputs, ``Model.create``): same parameters, same outputs and gradients as ``examples/gpt/model.py``."""
    functional = ml.compile(published("gpt.functional_model").create_gpt(**GPT_SMALL), backend, use_short_namings=False)
    composed = ml.compile(published("gpt.model").create_gpt(**GPT_SMALL), backend, use_short_namings=False)
    assert sorted(functional.param_keys) == sorted(composed.param_keys) and functional.output_keys == ["output"]
    params = ml.compile(gpt_reference(GPT_SMALL), backend, use_short_namings=False).randomize_params(seed=3)
    rng = np.random.default_rng(3)
    for batch, length in ((1, 4), (2, 7)):
        ids = backend.array(rng.integers(0, GPT_SMALL["vocab_size"], size=(batch, length)))
        seed = {"output": backend.array(rng.normal(size=(batch, length, GPT_SMALL["vocab_size"])))}
        assert_same_results(backend, functional, composed, (params, params), {"input": ids}, seed)


def test_published_segformer_encoder_builds_and_runs():
    """The Segformer encoder (functional style: ``Model.create`` with several outputs unpacked, dims as model
    outputs read by reshapes) builds, compiles with an image size and runs on NumPy, JAX and PyTorch."""
    from types import SimpleNamespace

    config = SimpleNamespace(num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2], hidden_sizes=[8, 16],
                             num_attention_heads=[1, 2], depths=[1, 1], sr_ratios=[2, 1], mlp_ratios=[2, 2],
                             reshape_last_stage=True)  # fmt: skip
    encoder = published("segformer.segformer_encoder").segformer_encoder(config, name="encoder")
    assert encoder.output_keys == ["output", "hidden_states"]
    outputs = []
    for backend in _backends():
        pm = ml.compile(encoder, backend, shapes={"input": [2, 3, 32, 32]}, inference=True)
        float64_pm = ml.compile(
            encoder, ml.NumpyBackend(dtype=ml.float64), shapes={"input": [2, 3, 32, 32]}, inference=True
        )
        params = {k: backend.array(v) for k, v in float64_pm.randomize_params(seed=0).items()}
        image = backend.array(np.random.default_rng(0).normal(size=(2, 3, 32, 32)))
        out = pm.evaluate(params, {"input": image})
        assert tuple(out["output"].shape) == (2, 16, 4, 4)  # stride 4 then 2: 32 -> 8 -> 4
        assert [tuple(h.shape) for h in out["hidden_states"]] == [(2, 8, 8, 8), (2, 16, 4, 4)]
        outputs.append(np.asarray(backend.to_numpy(out["output"])))
    for other in outputs[1:]:
        np.testing.assert_allclose(other, outputs[0], rtol=1e-8, atol=1e-10)


def test_published_clip_modified_resnet_runs_alike_on_every_backend():
    """The example's ModifiedResNet image tower (attention pooling slices ``in_proj_bias[0:embed_dim]`` by a
    symbolic dim) runs at any batch on NumPy, JAX and PyTorch with the same numbers. The builder has no
    ModifiedResNet, so the backends are compared with each other."""
    sizes = {**CLIP_SMALL, "image_resolution": 64, "vision_layers": (2, 2, 2, 2), "vision_width": 64}
    model = published("clip.model").clip(**sizes)
    rng = np.random.default_rng(0)
    images, texts = rng.normal(size=(2, 3, 64, 64)), _texts(rng, 3)
    params, results = None, []
    for backend in _backends():
        pm = ml.compile(model, backend, shapes={"image": [None, 3, 64, 64]}, use_short_namings=False)
        if params is None:
            params = {k: np.asarray(backend.to_numpy(v)) for k, v in pm.randomize_params(seed=0).items()}
        out = pm.evaluate(
            {k: backend.array(v) for k, v in params.items()},
            {"image": backend.array(images), "text": backend.array(texts)},
        )
        results.append(np.asarray(backend.to_numpy(out["logits_per_image"])))
        assert results[-1].shape == (2, 3)
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], rtol=1e-6, atol=1e-8)
