"""Each family's ``randomize_params`` draws its parameters as the reference implementation initialises them
(``transformers``' ``_init_weights``): the reference model's fresh weights, loaded into the compiled Mithril
model with ``load_hf``, and Mithril's own random parameters have the same constants and, parameter by
parameter, the same spread."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mithril_models import from_hf_config, load_hf  # noqa: E402


def _compare(pm: ml.PhysicalModel, reference: dict) -> list[str]:
    """Keys whose statistics disagree (the message says how); both dicts map Mithril names to arrays."""
    ours = {k: np.asarray(v, np.float64) for k, v in pm.randomize_params(seed=0).items()}
    theirs = {k: np.asarray(v, np.float64) for k, v in load_hf(pm, reference).items()}
    assert ours.keys() == theirs.keys()
    problems = []
    for key, expected in theirs.items():
        got = ours[key]
        if np.all(expected == expected.reshape(-1)[0]):  # a constant: ones, zeros, logit_scale
            if not np.allclose(got, expected.reshape(-1)[0], rtol=1e-6):
                problems.append(f"{key}: expected the constant {expected.reshape(-1)[0]}, got mean {got.mean():.3g}")
            continue
        if expected.size < 64:
            continue
        ratio = got.std() / expected.std()
        if not 0.85 < ratio < 1.18 or abs(got.mean()) > 0.25 * got.std() + 1e-3:
            problems.append(
                f"{key}: std {got.std():.4g} vs {expected.std():.4g} (ratio {ratio:.2f}), mean {got.mean():.3g}"
            )
    return problems


def _state(model: object) -> dict:
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}  # type: ignore[attr-defined]


def test_gpt2_matches_transformers_initialisation() -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=300, n_positions=64, n_embd=128, n_layer=4, n_head=4)
    reference = transformers.GPT2LMHeadModel(config)
    pm = ml.compile(from_hf_config(config), ml.NumpyBackend(), shapes={"input": [1, 8]}, inference=True)
    assert _compare(pm, _state(reference)) == []


def test_resnet_matches_transformers_initialisation() -> None:
    torch.manual_seed(0)
    config = transformers.ResNetConfig(
        embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type="basic", num_labels=10
    )
    reference = transformers.ResNetForImageClassification(config)
    pm = ml.compile(from_hf_config(config), ml.NumpyBackend(), shapes={"input": [1, 3, 32, 32]}, inference=True)
    assert _compare(pm, _state(reference)) == []


@pytest.mark.parametrize(
    "variant", [{}, {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}], ids=["t5", "t5-v1.1"]
)
def test_t5_matches_transformers_initialisation(variant: dict) -> None:
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=200, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4, **variant)
    reference = _state(transformers.T5ForConditionalGeneration(config))
    encoder, decoder = from_hf_config(config)
    for model, data in ((encoder, {"input"}), (decoder, {"input", "memory"})):
        pm = ml.compile(model, ml.NumpyBackend(), data_keys=data, inference=True)
        assert _compare(pm, reference) == []


def test_clip_matches_transformers_initialisation() -> None:
    torch.manual_seed(0)
    config = transformers.CLIPConfig(
        text_config={
            "vocab_size": 300,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "max_position_embeddings": 16,
        },
        vision_config={
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=64,
    )
    reference = transformers.CLIPModel(config)
    pm = ml.compile(
        from_hf_config(config), ml.NumpyBackend(), shapes={"image": [1, 3, 32, 32], "text": [1, 16]}, inference=True
    )
    assert _compare(pm, _state(reference)) == []


def test_core_blocks_keep_pytorch_defaults() -> None:
    """Blocks without a family initialiser draw as torch.nn.Linear/Conv2d do (uniform +-1/sqrt(fan_in))."""
    from mithril.models import Conv2d, Linear, Model

    model = Model()
    model |= Conv2d(16, 3, in_channels=8)(input="input")
    model += Linear(32)
    pm = ml.compile(model, ml.NumpyBackend(), shapes={"input": [1, 8, 6, 6]}, inference=True)
    params = pm.randomize_params(seed=0)
    bound = 1 / np.sqrt(8 * 9)
    assert np.abs(params["weight"]).max() <= bound and np.abs(params["weight"]).max() > 0.9 * bound
    assert np.abs(params["bias"]).max() <= bound
    with pytest.raises(ml.errors.ArgumentError, match=r"Linear\(weight_init=...\) must be an initialiser"):
        Linear(4, weight_init="normal(-1)")
