"""CLIP against independent references with random weights: ``transformers.CLIPModel`` (ViT towers) and
OpenAI's own ``CLIP`` class from the openai-clip package (ModifiedResNet and ViT towers), loaded by file path
because that package's ``__init__`` imports torchvision, which is not installed. Nothing is downloaded."""

from __future__ import annotations

import copy
import importlib.util
import os
from types import ModuleType
from typing import Any

import mithril as ml
import numpy as np
import pytest
import torch
from transformers import CLIPConfig, CLIPModel

import mithril_models
from _hf_references import tiny_clip_config
from mithril_models import load_hf
from mithril_models.checkpoints import CheckpointError, to_checkpoint
from mithril_models.clip_family import CLIP, clip, encode_image, encode_text, from_hf_config
from mithril_models.testing import assert_matches, backend_params, make_backend

VOCAB, CONTEXT, EMBED = 100, 8, 16
EOS = VOCAB - 1  # the end-of-text token: the highest id, as in OpenAI's vocabulary
OUTPUTS = ("logits_per_image", "logits_per_text", "image_embeds", "text_embeds")
# OpenAI's CLIP(...) arguments: embed_dim, image_resolution, vision_layers, vision_width, vision_patch_size,
# context_length, vocab_size, transformer_width, transformer_heads, transformer_layers
RESNET_ARGS = (EMBED, 64, (1, 1, 1, 1), 16, None, CONTEXT, VOCAB, 32, 4, 2)
VIT_ARGS = (EMBED, 32, 2, 64, 8, CONTEXT, VOCAB, 32, 4, 2)  # OpenAI's ViT has vision_width // 64 heads


def _slow_compilers(params: list[Any]) -> list[Any]:
    """C and GGML compile native code (seconds when their cache is cold), JAX runs XLA: mark them slow."""
    return [
        pytest.param(*p.values, id=p.id, marks=pytest.mark.slow) if p.id.split("-")[0] in ("c", "ggml", "jax") else p
        for p in params
    ]


BACKENDS = _slow_compilers([*backend_params(), pytest.param("numpy", ml.float64, id="numpy-float64")])


def hf_config(*, eos: int = EOS, **sizes: Any) -> CLIPConfig:
    """The tests' small ``CLIPConfig`` (``_hf_references.tiny_clip_config``, ``sizes`` passed on) with
    OpenAI's token ids: end of text ``eos`` (the highest id), start 1, padding 0."""
    config: CLIPConfig = tiny_clip_config(
        vocab_size=VOCAB,
        context=CONTEXT,
        projection_dim=EMBED,
        eos_token_id=eos,
        bos_token_id=1,
        pad_token_id=0,
        **sizes,
    )
    return config


def token_ids(
    rng: np.random.Generator, rows: int = 3, length: int = CONTEXT, eos_at: tuple[int, ...] = (7, 3, 5)
) -> np.ndarray:
    """Random ids below ``EOS`` with one ``EOS`` per row (the unique highest id: both pooling rules agree)."""
    ids = rng.integers(2, EOS, (rows, length))
    for row, position in enumerate(eos_at[:rows]):
        ids[row, min(position, length - 1)] = EOS
    return ids


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "image32": rng.standard_normal((2, 3, 32, 32)),
        "image64": rng.standard_normal((2, 3, 64, 64)),
        "text": token_ids(rng),
    }


def _references(model: torch.nn.Module) -> dict[Any, torch.nn.Module]:
    return {ml.float32: model.float().eval(), ml.float64: copy.deepcopy(model).double().eval()}


@pytest.fixture(scope="module")
def hf_models() -> dict[Any, CLIPModel]:
    torch.manual_seed(0)
    return _references(CLIPModel(hf_config()))


@pytest.fixture(scope="module")
def openai_clip() -> ModuleType:
    """OpenAI's ``clip/model.py``, loaded on its own (``clip/__init__`` needs torchvision)."""
    spec = importlib.util.find_spec("clip")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("openai-clip is not installed")
    path = os.path.join(spec.submodule_search_locations[0], "model.py")
    module_spec = importlib.util.spec_from_file_location("_openai_clip_model", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    # its LayerNorm computes in float32 for fp16 weights; plain LayerNorm lets the reference run in float64
    module.LayerNorm.forward = torch.nn.LayerNorm.forward
    return module


def _calibrate_batch_norm(model: torch.nn.Module, image_size: int) -> None:
    """Random BatchNorm affine parameters and running statistics measured on random images, then perturbed.

    Random statistics alone let the signal fade through the stages (every image gives the same features);
    measured ones keep the activations normalised, so the test sees the image."""
    g = torch.Generator().manual_seed(1)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for m in norms:
            m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
            m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
            m.reset_running_stats()
            m.momentum = None  # cumulative average: the statistics of this one batch
        model.train()
        model.encode_image(torch.randn(4, 3, image_size, image_size, generator=g))
        for m in norms:
            m.running_mean.mul_(1 + 0.1 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.mul_(1 + 0.1 * torch.rand(m.running_var.shape, generator=g))
    model.eval()


@pytest.fixture(scope="module")
def openai_resnet(openai_clip: ModuleType) -> dict[Any, torch.nn.Module]:
    torch.manual_seed(0)
    model = openai_clip.CLIP(*RESNET_ARGS)
    _calibrate_batch_norm(model, RESNET_ARGS[1])
    return _references(model)


@pytest.fixture(scope="module")
def openai_vit(openai_clip: ModuleType) -> dict[Any, torch.nn.Module]:
    torch.manual_seed(0)
    return _references(openai_clip.CLIP(*VIT_ARGS))


def compiled(
    model: Any, name: str, dtype: Any, *, inference: bool = True, short: bool = True, **shapes: list[int]
) -> Any:
    keys = {key for key in ("image", "text") if key in model.input_keys}
    return ml.compile(
        model,
        make_backend(name, dtype),
        shapes=shapes or None,
        data_keys=keys,
        inference=inference,
        use_short_namings=short,
    )


def evaluate(pm: Any, params: dict[str, Any], data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    backend = pm.backend
    arrays = {
        k: backend.array(
            v.astype(np.float64 if backend.dtype == ml.float64 else np.float32) if v.dtype.kind == "f" else v
        )
        for k, v in data.items()
    }
    return {k: backend.to_numpy(v) for k, v in pm.evaluate(params, arrays).items()}


def _torch(array: np.ndarray, dtype: Any) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor.to(torch.float64 if dtype == ml.float64 else torch.float32) if array.dtype.kind == "f" else tensor


def openai_outputs(ref: torch.nn.Module, image: np.ndarray, text: np.ndarray, dtype: Any) -> dict[str, np.ndarray]:
    with torch.no_grad():
        image_t, text_t = _torch(image, dtype), _torch(text, dtype)
        per_image, per_text = ref(image_t, text_t)
        image_features, text_features = ref.encode_image(image_t), ref.encode_text(text_t)
    return {
        "logits_per_image": per_image.numpy(),
        "logits_per_text": per_text.numpy(),
        "image_embeds": (image_features / image_features.norm(dim=1, keepdim=True)).numpy(),
        "text_embeds": (text_features / text_features.norm(dim=1, keepdim=True)).numpy(),
        "image_features": image_features.numpy(),
        "text_features": text_features.numpy(),
    }


def hf_outputs(ref: CLIPModel, image: np.ndarray, text: np.ndarray, dtype: Any) -> dict[str, np.ndarray]:
    with torch.no_grad():
        out = ref(input_ids=_torch(text, dtype), pixel_values=_torch(image, dtype))
    return {key: getattr(out, key).numpy() for key in OUTPUTS}


def _assert_outputs(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], dtype: Any, what: str) -> None:
    # a reference whose logits do not depend on the inputs would let a wrong model pass
    assert np.ptp(ref["logits_per_image"], axis=0).max() > 0.1 and np.ptp(ref["logits_per_image"], axis=1).max() > 0.1
    for key in OUTPUTS:
        assert_matches(got[key], ref[key], dtype, f"{what} {key}")


# -- whole model against transformers and OpenAI, every backend --------------------------------------------
@pytest.mark.parametrize(("name", "dtype"), BACKENDS)
def test_hf_clip_matches_transformers(
    name: str, dtype: Any, hf_models: dict[Any, CLIPModel], inputs: dict[str, np.ndarray]
) -> None:
    ref = hf_models[dtype]
    image, text = inputs["image32"], inputs["text"]
    pm = compiled(from_hf_config(ref.config), name, dtype, image=list(image.shape), text=list(text.shape))
    got = evaluate(pm, load_hf(pm, ref.state_dict()), {"image": image, "text": text})
    _assert_outputs(got, hf_outputs(ref, image, text, dtype), dtype, f"HF CLIP on {name}")


@pytest.mark.parametrize(("name", "dtype"), BACKENDS)
def test_openai_resnet_clip_matches_openai(
    name: str, dtype: Any, openai_resnet: dict[Any, torch.nn.Module], inputs: dict[str, np.ndarray]
) -> None:
    ref = openai_resnet[dtype]
    image, text = inputs["image64"], inputs["text"]
    pm = compiled(clip(*RESNET_ARGS), name, dtype, image=list(image.shape), text=list(text.shape))
    got = evaluate(pm, load_hf(pm, ref.state_dict()), {"image": image, "text": text})
    _assert_outputs(got, openai_outputs(ref, image, text, dtype), dtype, f"OpenAI ModifiedResNet CLIP on {name}")


@pytest.mark.parametrize(
    ("name", "dtype"),
    [pytest.param("numpy", ml.float64, id="numpy-float64"), *[p for p in backend_params() if p.id == "torch-float32"]],
)
def test_openai_vit_clip_matches_openai(
    name: str, dtype: Any, openai_vit: dict[Any, torch.nn.Module], inputs: dict[str, np.ndarray]
) -> None:
    ref = openai_vit[dtype]
    image, text = inputs["image32"], inputs["text"]
    pm = compiled(clip(*VIT_ARGS), name, dtype)  # symbolic batch and sequence
    got = evaluate(pm, load_hf(pm, ref.state_dict()), {"image": image, "text": text})
    _assert_outputs(got, openai_outputs(ref, image, text, dtype), dtype, f"OpenAI ViT CLIP on {name}")


# -- one tower alone, loaded from a full checkpoint with strict=True ---------------------------------------
TOWER_BACKENDS = [
    pytest.param("numpy", ml.float64, id="numpy-float64"),
    *[p for p in backend_params() if p.id == "torch-float32"],
]


@pytest.mark.parametrize(("name", "dtype"), TOWER_BACKENDS)
def test_hf_towers_alone_from_full_checkpoint(name: str, dtype: Any, inputs: dict[str, np.ndarray]) -> None:
    # sizes OpenAI's signature can express: 4x MLP, ViT heads = width // 64
    torch.manual_seed(2)
    ref = _references(CLIPModel(hf_config(text_mlp=128, vision_width=64, vision_heads=1, vision_mlp=256)))[dtype]
    image, text = inputs["image32"], inputs["text"]
    with torch.no_grad():
        want_text = ref.get_text_features(input_ids=_torch(text, dtype)).pooler_output.numpy()
        want_image = ref.get_image_features(pixel_values=_torch(image, dtype)).pooler_output.numpy()
    text_pm = compiled(encode_text(EMBED, CONTEXT, VOCAB, 32, 4, 2), name, dtype)
    image_pm = compiled(encode_image(EMBED, 32, 2, 64, 8), name, dtype)
    assert_matches(
        evaluate(text_pm, load_hf(text_pm, ref.state_dict()), {"text": text})["output"], want_text, dtype, "text tower"
    )
    assert_matches(
        evaluate(image_pm, load_hf(image_pm, ref.state_dict()), {"image": image})["output"],
        want_image,
        dtype,
        "image tower",
    )


def test_openai_towers_alone_from_full_checkpoint(
    openai_resnet: dict[Any, torch.nn.Module], inputs: dict[str, np.ndarray]
) -> None:
    ref, dtype = openai_resnet[ml.float64], ml.float64
    image, text = inputs["image64"], inputs["text"]
    want = openai_outputs(ref, image, text, dtype)
    text_pm = compiled(encode_text(*RESNET_ARGS[:1], *RESNET_ARGS[5:]), "numpy", dtype)
    image_pm = compiled(encode_image(*RESNET_ARGS[:5]), "numpy", dtype)
    assert_matches(
        evaluate(text_pm, load_hf(text_pm, ref.state_dict()), {"text": text})["output"],
        want["text_features"],
        dtype,
        "text tower",
    )
    assert_matches(
        evaluate(image_pm, load_hf(image_pm, ref.state_dict()), {"image": image})["output"],
        want["image_features"],
        dtype,
        "ResNet tower",
    )


# -- gradients against PyTorch autograd --------------------------------------------------------------------
GRADIENT_PARAMS = (
    "logit_scale",
    "text_projection.weight",
    "visual_projection.weight",
    "text_model.embeddings.token_embedding.weight",
    "text_model.encoder.layers.0.self_attn.q_proj.weight",
    "text_model.encoder.layers.1.mlp.fc1.bias",
    "vision_model.embeddings.patch_embedding.weight",
    "vision_model.embeddings.class_embedding",
    "vision_model.encoder.layers.0.layer_norm1.weight",
)


def _hf_name(name: str) -> str:
    return name.split(".", 1)[1] if name.startswith(("text.", "vision.")) else name


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_gradients_match_autograd(name: str, hf_models: dict[Any, CLIPModel], inputs: dict[str, np.ndarray]) -> None:
    dtype = ml.float64
    ref = copy.deepcopy(hf_models[dtype])
    image, text = inputs["image32"], inputs["text"]
    cotangent = np.random.default_rng(3).standard_normal((image.shape[0], text.shape[0]))
    out = ref(input_ids=torch.from_numpy(text), pixel_values=torch.from_numpy(image))
    (out.logits_per_image * torch.from_numpy(cotangent)).sum().backward()
    want = dict(ref.named_parameters())

    shapes = {"image": list(image.shape), "text": list(text.shape)}
    pm = compiled(from_hf_config(ref.config), name, dtype, inference=False, short=False, **shapes)
    backend = pm.backend
    data = {"image": backend.array(image), "text": backend.array(text)}
    _, grads = pm.evaluate(
        load_hf(pm, ref.state_dict()), data, output_gradients={"logits_per_image": backend.array(cotangent)}
    )
    for param in pm.param_keys:
        if _hf_name(param) in GRADIENT_PARAMS:
            reference = want[_hf_name(param)].grad
            assert reference is not None and float(reference.abs().max()) > 0
            assert_matches(backend.to_numpy(grads[param]), reference.numpy(), dtype, f"d loss / d {param}")
    assert sum(_hf_name(p) in GRADIENT_PARAMS for p in pm.param_keys) == len(GRADIENT_PARAMS)


def test_resnet_gradients_match_autograd(
    openai_resnet: dict[Any, torch.nn.Module], inputs: dict[str, np.ndarray]
) -> None:
    dtype = ml.float64
    ref = copy.deepcopy(openai_resnet[dtype])
    image = inputs["image64"]
    cotangent = np.random.default_rng(4).standard_normal((image.shape[0], EMBED))
    (ref.encode_image(torch.from_numpy(image)) * torch.from_numpy(cotangent)).sum().backward()
    want = dict(ref.named_parameters())
    pm = compiled(encode_image(*RESNET_ARGS[:5]), "numpy", dtype, inference=False, short=False)
    _, grads = pm.evaluate(load_hf(pm, ref.state_dict()), {"image": image}, output_gradients={"output": cotangent})
    checked = (
        "visual.conv1.weight",
        "visual.bn2.weight",
        "visual.layer2.0.conv2.weight",
        "visual.layer3.0.downsample.1.bias",
        "visual.attnpool.positional_embedding",
        "visual.attnpool.k_proj.weight",
        "visual.attnpool.c_proj.bias",
    )
    for param in checked:
        assert_matches(grads[param], want[param].grad.numpy(), dtype, f"d loss / d {param}")


# -- loading: names, files, pooling rules, symbolic shapes ---------------------------------------------------
def test_parameter_names_are_the_checkpoints(
    hf_models: dict[Any, CLIPModel], openai_resnet: dict[Any, torch.nn.Module]
) -> None:
    hf_keys = {k for k in hf_models[ml.float32].state_dict() if not k.endswith("position_ids")}
    pm = compiled(from_hf_config(hf_models[ml.float32].config), "numpy", ml.float32, short=False)
    assert {_hf_name(k) for k in pm.param_keys} == hf_keys
    openai_keys = {
        k
        for k in openai_resnet[ml.float32].state_dict()
        if k.startswith("visual.") and not k.endswith("num_batches_tracked")
    }
    pm = compiled(encode_image(*RESNET_ARGS[:5]), "numpy", ml.float32, short=False)
    assert set(pm.param_keys) | set(pm.buffer_keys) == openai_keys
    assert all("running_" in k for k in pm.buffer_keys) and len(pm.buffer_keys) == 2 * sum(
        "running_mean" in k for k in openai_keys
    )


def test_loads_safetensors_files(tmp_path: Any, hf_models: dict[Any, CLIPModel], inputs: dict[str, np.ndarray]) -> None:
    """A ``save_pretrained`` directory and a single ``.safetensors`` file, both written by the reference libraries."""
    from safetensors.numpy import save_file

    ref = hf_models[ml.float32]
    ref.save_pretrained(tmp_path / "pretrained")
    save_file({k: v.numpy() for k, v in ref.state_dict().items()}, str(tmp_path / "model.safetensors"))
    pm = compiled(mithril_models.from_hf_config(ref.config), "numpy", ml.float32)
    from_dict = load_hf(pm, ref.state_dict())
    for source in (tmp_path / "pretrained", tmp_path / "model.safetensors"):
        loaded = load_hf(pm, source)
        assert all(np.array_equal(loaded[k], from_dict[k]) for k in pm.param_keys), source
    got = evaluate(pm, loaded, {"image": inputs["image32"], "text": inputs["text"]})
    want = hf_outputs(ref, inputs["image32"], inputs["text"], ml.float32)
    assert_matches(got["logits_per_image"], want["logits_per_image"], ml.float32, "from a file")


def test_to_checkpoint_inverts_both_layouts(
    hf_models: dict[Any, CLIPModel], openai_resnet: dict[Any, torch.nn.Module], openai_vit: dict[Any, torch.nn.Module]
) -> None:
    """Parameters written back under each format's names equal the original checkpoint (OpenAI's q/k/v re-packed)."""
    cases = [
        (from_hf_config(hf_models[ml.float32].config), hf_models[ml.float32], "Hugging Face transformers (CLIPModel)"),
        (clip(*RESNET_ARGS), openai_resnet[ml.float32], "OpenAI CLIP"),
        (clip(*VIT_ARGS), openai_vit[ml.float32], "OpenAI CLIP"),
        (encode_image(*VIT_ARGS[:5]), openai_vit[ml.float32], "OpenAI CLIP"),
    ]
    for model, ref, layout in cases:
        pm = compiled(model, "numpy", ml.float32)
        state = ref.state_dict()
        written = to_checkpoint(pm, load_hf(pm, state), layout=layout)
        wanted = {k for k in state if not k.endswith(("position_ids", "num_batches_tracked"))}
        if isinstance(model, CLIP):
            assert set(written) == wanted
        else:
            assert set(written) == {k for k in wanted if k.startswith("visual.")}
        for key, value in written.items():
            assert np.array_equal(value, state[key].numpy()), key


def test_short_text_and_symbolic_shapes(hf_models: dict[Any, CLIPModel], inputs: dict[str, np.ndarray]) -> None:
    """Compiled without shapes, one model takes any batch and any text length up to the context (as HF does)."""
    ref = hf_models[ml.float64]
    pm = compiled(from_hf_config(ref.config), "numpy", ml.float64)
    params = load_hf(pm, ref.state_dict())
    for rows, length in ((1, 5), (4, CONTEXT)):
        text = token_ids(np.random.default_rng(rows), rows, length, eos_at=(4, 1, 2, 6))
        got = evaluate(pm, params, {"image": inputs["image32"][:1], "text": text})
        want = hf_outputs(ref, inputs["image32"][:1], text, ml.float64)
        for key in OUTPUTS:
            assert_matches(got[key], want[key], ml.float64, f"{rows}x{length} {key}")


@pytest.mark.parametrize("eos", [2, 50])
def test_pooling_follows_transformers_eos_rule(eos: int, inputs: dict[str, np.ndarray]) -> None:
    """``eos_token_id == 2``: HF pools at argmax(ids) (the issue's rule); another id: at its first occurrence."""
    torch.manual_seed(5)
    ref = _references(CLIPModel(hf_config(eos=eos)))[ml.float64]
    text = np.array([[5, 98, 7, 50, 9, 50, 3, 4], [50, 6, 7, 8, 97, 10, 11, 12]])  # highest id before the 50s
    pm = compiled(from_hf_config(ref.config), "numpy", ml.float64)
    got = evaluate(pm, load_hf(pm, ref.state_dict()), {"image": inputs["image32"], "text": text})
    want = hf_outputs(ref, inputs["image32"], text, ml.float64)
    assert_matches(got["text_embeds"], want["text_embeds"], ml.float64, f"eos_token_id={eos}")
    assert pm.model.config.text.eos_token_id == (None if eos == 2 else eos)


def test_builders_are_registered_and_dispatched(hf_models: dict[Any, CLIPModel]) -> None:
    from mithril.models import clip as registered_clip
    from mithril.models import encode_image as registered_image

    assert registered_clip is clip and registered_image is encode_image
    model = mithril_models.from_hf_config(hf_models[ml.float32].config)
    assert isinstance(model, CLIP) and model.family == "clip"
    assert model.config.vision.heads == 4 and model.config.text.intermediate_size == 64
    assert sorted(model.output_keys) == sorted(OUTPUTS)


# -- bad input -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({2: "12"}, TypeError, "vision_layers must be an int"),
        ({2: 12.0}, TypeError, "vision_layers must be an int"),
        ({2: True}, TypeError, "vision_layers must be an int"),
        ({2: (1, 1, 1)}, ValueError, "4 positive integers"),
        ({2: 2, 3: 32, 4: 8}, ValueError, "vision_width // 64 = 0"),
        ({2: 2, 3: 64, 4: None}, ValueError, "vision_patch_size must be a positive integer"),
        ({3: 7}, ValueError, "cannot divide"),
        ({1: 16}, ValueError, "use a multiple of 32"),
        ({7: 30}, ValueError, "transformer_width=30 is not divisible by transformer_heads=4"),
        ({0: 16, 6: 0}, ValueError, "vocab_size must be a positive integer"),
    ],
)
def test_bad_arguments_raise_clear_errors(change: dict[int, Any], error: type[Exception], message: str) -> None:
    args = list(RESNET_ARGS)
    for index, value in change.items():
        args[index] = value
    with pytest.raises(error, match=message):
        clip(*args)


def test_bad_hf_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="hidden_act='gelu_new' is not supported"):
        from_hf_config(hf_config(act="gelu_new"))
    from transformers import GPT2Config

    with pytest.raises(ValueError, match="needs a CLIPConfig"):
        from_hf_config(GPT2Config())


def test_gelu_config_matches_transformers(inputs: dict[str, np.ndarray]) -> None:
    torch.manual_seed(6)
    ref = _references(CLIPModel(hf_config(act="gelu")))[ml.float64]
    pm = compiled(from_hf_config(ref.config), "numpy", ml.float64)
    got = evaluate(pm, load_hf(pm, ref.state_dict()), {"image": inputs["image32"], "text": inputs["text"]})
    _assert_outputs(got, hf_outputs(ref, inputs["image32"], inputs["text"], ml.float64), ml.float64, "gelu CLIP")


def test_strict_loading_reports_a_mismatched_config(
    hf_models: dict[Any, CLIPModel], openai_resnet: dict[Any, torch.nn.Module]
) -> None:
    bigger = CLIPModel(hf_config(text_layers=3, vision_width=64)).state_dict()
    pm = compiled(from_hf_config(hf_models[ml.float32].config), "numpy", ml.float32)
    with pytest.raises(CheckpointError) as caught:
        load_hf(pm, bigger)
    report = str(caught.value)
    assert "text_model.encoder.layers.2.self_attn.q_proj.weight" in report  # unexpected
    assert "vision_model.embeddings.class_embedding" in report and "[64]" in report  # shape mismatch
    # a tower alone skips the other tower's keys, never its own
    text_pm = compiled(encode_text(EMBED, CONTEXT, VOCAB, 32, 4, 2), "numpy", ml.float32)
    with pytest.raises(CheckpointError, match=r"layers\.2\.mlp\.fc1\.weight"):
        load_hf(text_pm, bigger)
    # the whole model refuses a checkpoint holding only one tower
    text_only = {k: v for k, v in openai_resnet[ml.float32].state_dict().items() if not k.startswith("visual.")}
    resnet_pm = compiled(clip(*RESNET_ARGS), "numpy", ml.float32, short=False)
    with pytest.raises(CheckpointError, match=r"missing.*\n(.*\n)*.*attnpool"):
        load_hf(resnet_pm, text_only)
    with pytest.warns(UserWarning, match="missing"):
        partial = load_hf(resnet_pm, text_only, strict=False)
    assert set(partial) == set(resnet_pm.param_keys) | set(resnet_pm.buffer_keys)
