"""Llama-style decoders (``create_llama``, ``from_hf_config``) against ``transformers.LlamaForCausalLM`` and
``MistralForCausalLM`` with random weights from small configs (nothing is downloaded).

Logits within 1e-4 relative (float32) on every installed backend for grouped-query attention (2 layers,
hidden 64, 4 heads, 2 key-value heads); the variants (multi-query, tied, biases, every rope scaling, Mistral's
sliding window) on NumPy; greedy tokens identical to ``transformers``' ``generate(do_sample=False)``.
"""

from __future__ import annotations

from typing import Any

import mithril as ml
import numpy as np
import pytest

from _hf_references import LLAMA3_SCALING, LLAMA_SIZES, compiled_reference, greedy_tokens, llama_reference

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mithril_models import CheckpointError, create_llama, from_hf_config, generate, load_hf  # noqa: E402
from mithril_models.llama import Llama, LlamaConfig, rope_frequencies  # noqa: E402
from mithril_models.llama import from_hf_config as llama_from_hf_config  # noqa: E402
from mithril_models.testing import assert_matches, backend_params, make_backend  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "mqa": {"num_key_value_heads": 1},
    "mha-tied": {"num_key_value_heads": 4, "tie_word_embeddings": True},
    "biases": {"attention_bias": True, "mlp_bias": True},
    "rope-linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "rope-llama3": {"rope_scaling": LLAMA3_SCALING, "rope_theta": 500000.0},
    "rope-dynamic": {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
    "rope-yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}},
    "head-dim-24": {"head_dim": 24},
    "mistral-window-5": {"mistral": True, "sliding_window": 5},
}
IDS = np.random.default_rng(0).integers(0, LLAMA_SIZES["vocab_size"], (2, 12))
PROMPT, NEW = IDS[:, :5], 16


def logits_of(model: Any, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


def compiled(model: Any, backend_name: str, shape: Any = IDS.shape, **options: Any) -> tuple[Any, dict[str, Any]]:
    return compiled_reference(model, backend_name, shape, **options)


def run(pm: Any, params: dict[str, Any], ids: np.ndarray) -> np.ndarray:
    backend = pm.backend
    return backend.to_numpy(pm.evaluate(params, {"input": backend.array(ids, "int")})["output"])


@pytest.fixture(scope="module")
def gqa() -> Any:
    return llama_reference()


@pytest.fixture(scope="module")
def greedy(gqa: Any) -> np.ndarray:
    return greedy_tokens(gqa, PROMPT, NEW, min_gap=1e-4, varied=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend_name, dtype", list(backend_params()))
def test_grouped_query_logits_match_transformers(gqa: Any, backend_name: str, dtype: Any) -> None:
    pm, params = compiled(gqa, backend_name)
    assert_matches(run(pm, params, IDS), logits_of(gqa, IDS), dtype, f"GQA logits on {backend_name}")


@pytest.mark.slow
@pytest.mark.parametrize("backend_name, dtype", list(backend_params()))
def test_greedy_tokens_are_those_of_transformers(gqa: Any, greedy: np.ndarray, backend_name: str, dtype: Any) -> None:
    pm, params = compiled(gqa, backend_name, shape=(2, PROMPT.shape[1] + NEW))
    got = generate(pm, params, PROMPT, NEW, top_k=1)
    np.testing.assert_array_equal(got, greedy, err_msg=f"greedy tokens on {backend_name}")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_match_transformers_on_numpy(variant: str) -> None:
    model = llama_reference(**VARIANTS[variant])
    pm, params = compiled(model, "numpy")
    assert_matches(run(pm, params, IDS), logits_of(model, IDS), ml.float32, variant)


def test_mistral_window_masks_and_generates_as_transformers() -> None:
    """The window changes the logits (so the test sees it), and cached decoding past the window matches."""
    mistral = llama_reference(mistral=True, sliding_window=4)
    unwindowed = llama_reference(mistral=True, sliding_window=None)
    assert np.abs(logits_of(mistral, IDS) - logits_of(unwindowed, IDS)).max() > 1e-3
    pm, params = compiled(mistral, "numpy")
    assert pm.model.config.sliding_window == 4
    with torch.no_grad():
        want = mistral.generate(torch.tensor(PROMPT), max_new_tokens=NEW, do_sample=False)[:, PROMPT.shape[1] :]
    np.testing.assert_array_equal(generate(pm, params, PROMPT, NEW, top_k=1), want.numpy())


def test_multi_query_greedy_tokens_on_numpy() -> None:
    model = llama_reference(num_key_value_heads=1, tie_word_embeddings=True)
    pm, params = compiled(model, "numpy")
    with torch.no_grad():
        want = model.generate(torch.tensor(PROMPT), max_new_tokens=NEW, do_sample=False)[:, PROMPT.shape[1] :]
    np.testing.assert_array_equal(generate(pm, params, PROMPT, NEW, top_k=1), want.numpy())


@pytest.mark.parametrize("backend_name", ["numpy", "torch", "jax", "mlx"])
def test_symbolic_batch_and_length_on_python_backends(gqa: Any, backend_name: str) -> None:
    if backend_name not in [p.values[0] for p in backend_params()]:
        pytest.skip(f"{backend_name} is not installed")
    pm, params = compiled(gqa, backend_name)
    for batch, length in ((1, 3), (3, 9)):
        ids = np.random.default_rng(length).integers(0, LLAMA_SIZES["vocab_size"], (batch, length))
        assert_matches(run(pm, params, ids), logits_of(gqa, ids), ml.float32, f"batch {batch}, length {length}")


@pytest.mark.parametrize("backend_name, dtype", [("numpy", ml.float32), ("torch", ml.float32)])
def test_gradients_match_torch_autograd(backend_name: str, dtype: Any) -> None:
    """float32 only: ``LlamaRMSNorm`` computes in float32 even in a float64 model."""
    model = llama_reference(tie_word_embeddings=True)
    cotangent = np.random.default_rng(3).normal(size=(*IDS.shape, LLAMA_SIZES["vocab_size"]))
    logits = model(torch.tensor(IDS)).logits
    (logits * torch.tensor(cotangent, dtype=logits.dtype)).sum().backward()
    want = dict(model.named_parameters())
    backend = make_backend(backend_name, dtype)
    pm = ml.compile(from_hf_config(model.config), backend, data_keys={"input"}, use_short_namings=False)
    params = load_hf(pm, model.state_dict())
    _, grads = pm.evaluate(
        params, {"input": backend.array(IDS, "int")}, output_gradients={"output": backend.array(cotangent)}
    )
    assert set(grads) == set(pm.param_keys) == set(want) - {"lm_head.weight"}  # tied: one embedding
    for name in pm.param_keys:
        assert_matches(backend.to_numpy(grads[name]), want[name].grad.numpy(), dtype, f"d loss / d {name}")


def test_parameter_names_are_those_of_the_checkpoint(gqa: Any) -> None:
    pm = ml.compile(from_hf_config(gqa.config), ml.NumpyBackend(), data_keys={"input"}, use_short_namings=False)
    assert set(pm.param_keys) == set(gqa.state_dict())
    base = {k.removeprefix("model."): v for k, v in gqa.state_dict().items() if k != "lm_head.weight"}
    with pytest.raises(CheckpointError, match=r"(?s)missing.*lm_head\.weight"):  # a LlamaModel file has no head
        load_hf(pm, base)
    tied = llama_reference(tie_word_embeddings=True)
    pm_tied = ml.compile(from_hf_config(tied.config), ml.NumpyBackend(), data_keys={"input"})
    base = {k.removeprefix("model."): v for k, v in tied.state_dict().items() if k != "lm_head.weight"}
    params = load_hf(pm_tied, {**base, "model.rotary_emb.inv_freq": np.ones(8, np.float32)})  # old buffer: ignored
    assert_matches(run(pm_tied, params, IDS), logits_of(tied, IDS), ml.float32, "LlamaModel names, tied head")


def test_configs_of_both_transformers_generations() -> None:
    """``rope_theta``/``rope_scaling`` (``transformers`` 4 ``config.json``) and ``rope_parameters`` (5)."""
    v4 = {"model_type": "llama", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 2, "rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 4.0},
          "pretraining_tp": 1, "tie_word_embeddings": True}  # fmt: skip
    config = LlamaConfig.from_hf(v4)
    assert (config.rope_theta, config.rope_scaling, config.num_key_value_heads, config.head_dim) == (
        500000.0, {"rope_type": "linear", "factor": 4.0}, 2, 8,
    )  # fmt: skip
    v5 = transformers.LlamaConfig(**{**LLAMA_SIZES, "rope_scaling": LLAMA3_SCALING, "rope_theta": 500000.0})
    config = LlamaConfig.from_hf(v5)
    assert config.rope_type == "llama3" and config.rope_theta == 500000.0
    assert LlamaConfig.from_dict(config.to_dict()) == config
    mistral = LlamaConfig.from_hf(transformers.MistralConfig(**LLAMA_SIZES, sliding_window=8))
    assert (mistral.model_type, mistral.sliding_window) == ("mistral", 8)
    inv_freq, scaling = rope_frequencies(16, 10000.0, None, 64)
    np.testing.assert_allclose(inv_freq, 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16), rtol=1e-6)
    assert scaling == 1.0


def test_builders_are_registered_and_dispatched(gqa: Any) -> None:
    from mithril.models import create_llama as registered

    assert registered is create_llama
    for built in (
        from_hf_config(gqa.config),
        llama_from_hf_config(gqa.config.to_dict()),
        create_llama(100, 64, 128, 2, 4),
    ):
        assert isinstance(built, Llama) and built.family == "llama"
    assert isinstance(from_hf_config(transformers.MistralConfig(**LLAMA_SIZES)), Llama)


def test_bad_configurations_say_what_was_expected() -> None:
    with pytest.raises(ValueError, match="num_attention_heads=4 is not a multiple of num_key_value_heads=3"):
        create_llama(100, 64, 128, 2, 4, num_key_value_heads=3)
    with pytest.raises(ValueError, match="rope_type 'longrope' is not supported; supported: default, linear"):
        create_llama(100, 64, 128, 2, 4, rope_scaling={"rope_type": "longrope", "factor": 2.0})
    with pytest.raises(ValueError, match="rope_scaling of type 'llama3' needs low_freq_factor"):
        create_llama(100, 64, 128, 2, 4, rope_scaling={"rope_type": "llama3", "factor": 8.0})
    with pytest.raises(ValueError, match="hidden_act 'gelu' is not supported"):
        create_llama(100, 64, 128, 2, 4, hidden_act="gelu")
    with pytest.raises(ValueError, match="model_type 'gpt2' is not a Llama-style decoder"):
        LlamaConfig.from_hf({"model_type": "gpt2"})
    with pytest.raises(KeyError, match="intermediate_size"):
        LlamaConfig.from_hf({"vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2})
    with pytest.raises(TypeError, match="Llama needs a LlamaConfig, got dict"):
        Llama({"hidden_size": 8})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown fields"):
        LlamaConfig.from_dict({"vocab_size": 8, "hidden": 8})
