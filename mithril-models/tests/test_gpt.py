"""GPT-2 against ``transformers.GPT2LMHeadModel`` with random weights (every parameter, biases and layer
norms included, drawn at random so that a misplaced or untransposed tensor changes the logits)."""

from __future__ import annotations

import copy
import re
from typing import Any

import mithril as ml
import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from _hf_references import GPT2_SIZES, gpt2_reference
from mithril_models import from_hf_config, load_hf
from mithril_models.checkpoints import CheckpointError, to_checkpoint
from mithril_models.gpt import GPT, GPTConfig, create_gpt
from mithril_models.gpt import from_hf_config as gpt_from_hf_config
from mithril_models.testing import assert_matches, backend_names, backend_params, make_backend

BATCH, LENGTH = 2, 16


def reference_logits(model: GPT2LMHeadModel, ids: np.ndarray, double: bool = False) -> np.ndarray:
    model = copy.deepcopy(model).double() if double else model  # .double() converts in place
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


def token_ids(batch: int = BATCH, length: int = LENGTH, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, GPT2_SIZES["vocab_size"], (batch, length))


def compile_gpt(gpt: GPT, backend: Any, shapes: Any = ((BATCH, LENGTH),), **options: Any) -> Any:
    given = {"input": list(shapes[0])} if shapes else None
    return ml.compile(gpt, backend, shapes=given, data_keys={"input"}, **options)


def logits_of(pm: Any, params: dict[str, Any], ids: np.ndarray) -> np.ndarray:
    return pm.backend.to_numpy(pm.evaluate(params, {"input": pm.backend.array(ids, "int")})["output"])


def require(backend_name: str) -> None:
    if backend_name not in backend_names():
        pytest.skip(f"the {backend_name} backend is not installed")


@pytest.fixture(scope="module")
def tied() -> GPT2LMHeadModel:
    return gpt2_reference()


@pytest.mark.slow
@pytest.mark.parametrize("backend_name, dtype", [*backend_params(), *backend_params(dtypes=(ml.float64,))])
def test_hf_state_dict_gives_the_reference_logits(tied: GPT2LMHeadModel, backend_name: str, dtype: Any) -> None:
    pm = compile_gpt(from_hf_config(tied.config), make_backend(backend_name, dtype), use_short_namings=False)
    ids = token_ids()
    got = logits_of(pm, load_hf(pm, tied.state_dict()), ids)
    assert_matches(got, reference_logits(tied, ids, double=dtype == ml.float64), dtype, f"{backend_name} logits")


@pytest.mark.parametrize("short_names", [True, False])
def test_both_naming_modes_load_and_match(tied: GPT2LMHeadModel, short_names: bool) -> None:
    pm = compile_gpt(from_hf_config(tied.config), make_backend("numpy", ml.float64), use_short_namings=short_names)
    ids = token_ids()
    assert_matches(
        logits_of(pm, load_hf(pm, tied.state_dict()), ids), reference_logits(tied, ids, double=True), ml.float64
    )
    assert set(pm.input_paths.values()) >= {"transformer.h.1.attn.c_attn.weight", "transformer.wte.weight"}
    if not short_names:  # long names are the checkpoint's keys (lm_head.weight is tied to wte)
        assert set(pm.param_keys) == set(tied.state_dict()) - {"lm_head.weight"}


def test_safetensors_file_and_base_model_state_dict(tied: GPT2LMHeadModel, tmp_path: Any) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "model.safetensors"
    save_file({k: v.detach().clone().contiguous() for k, v in tied.state_dict().items()}, str(path))
    pm = compile_gpt(from_hf_config(tied.config), make_backend("numpy", ml.float64))
    ids = token_ids()
    want = reference_logits(tied, ids, double=True)
    assert_matches(logits_of(pm, load_hf(pm, path), ids), want, ml.float64, "from .safetensors")
    assert_matches(logits_of(pm, load_hf(pm, str(tmp_path)), ids), want, ml.float64, "from a save_pretrained directory")
    base = tied.transformer.state_dict()  # GPT2Model: no "transformer." prefix, no lm_head
    assert not any(key.startswith("transformer.") for key in base)
    assert_matches(logits_of(pm, load_hf(pm, base), ids), want, ml.float64, "from GPT2Model's state dict")


def test_parameters_written_back_in_hf_names_load_into_transformers(tied: GPT2LMHeadModel) -> None:
    pm = compile_gpt(from_hf_config(tied.config), make_backend("numpy", ml.float64))
    exported = to_checkpoint(pm, load_hf(pm, tied.state_dict()))
    assert set(exported) == set(tied.state_dict()) - {"lm_head.weight"}  # tied: written once, as save_pretrained
    fresh = gpt2_reference(seed=9).double()
    result = fresh.load_state_dict({key: torch.from_numpy(value) for key, value in exported.items()}, strict=False)
    assert result.missing_keys == ["lm_head.weight"] and not result.unexpected_keys
    assert fresh.lm_head.weight is fresh.transformer.wte.weight
    ids = token_ids()
    assert_matches(reference_logits(fresh, ids), reference_logits(tied, ids, double=True), ml.float64)


def test_attention_mask_buffers_of_older_files_are_ignored(tied: GPT2LMHeadModel) -> None:
    state = dict(tied.state_dict())
    for i in range(GPT2_SIZES["n_layer"]):
        state[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 16, 16))
        state[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    pm = compile_gpt(from_hf_config(tied.config), make_backend("numpy", ml.float64))
    ids = token_ids()
    assert_matches(logits_of(pm, load_hf(pm, state), ids), reference_logits(tied, ids, double=True), ml.float64)


def test_untied_head_loads_lm_head_weight() -> None:
    untied = gpt2_reference(seed=3, tie_word_embeddings=False)
    assert not torch.equal(untied.lm_head.weight, untied.transformer.wte.weight)
    gpt = from_hf_config(untied.config)
    assert not gpt.config.tie_word_embeddings
    pm = compile_gpt(gpt, make_backend("numpy", ml.float64), use_short_namings=False)
    assert "lm_head.weight" in pm.param_keys
    ids = token_ids()
    assert_matches(
        logits_of(pm, load_hf(pm, untied.state_dict()), ids), reference_logits(untied, ids, double=True), ml.float64
    )
    with pytest.raises(CheckpointError, match=r"missing.*\n.*lm_head\.weight"):
        load_hf(pm, untied.transformer.state_dict())  # a base model has no head


def test_tied_head_reports_a_checkpoint_whose_lm_head_differs(tied: GPT2LMHeadModel) -> None:
    state = {k: v.clone() for k, v in tied.state_dict().items()}
    state["lm_head.weight"] += 1.0
    pm = compile_gpt(from_hf_config(tied.config), make_backend("numpy"), use_short_namings=False)
    with pytest.raises(
        CheckpointError, match=r"tied tensors that differ.*\n.*lm_head\.weight and transformer\.wte\.weight"
    ):
        load_hf(pm, state)


def test_wrong_sizes_and_extra_layers_are_listed(tied: GPT2LMHeadModel) -> None:
    bigger = gpt2_reference(n_layer=3, n_positions=20)  # one layer more, four positions more
    pm = compile_gpt(from_hf_config(tied.config), make_backend("numpy"), use_short_namings=False)
    with pytest.raises(CheckpointError) as error:
        load_hf(pm, bigger.state_dict())
    message = str(error.value)
    extra = [key for key in bigger.state_dict() if key.startswith("transformer.h.2.")]
    assert len(extra) == 12 and all(key in message for key in extra), message
    assert re.search(r"shape mismatch: 1\n.*transformer\.wpe\.weight.*\[20, 32\].*\[16, 32\]", message), message
    with pytest.warns(UserWarning, match="transformer.h.2.ln_1.weight"):
        params = load_hf(pm, bigger.state_dict(), strict=False)
    assert set(params) == set(pm.param_keys)
    np.testing.assert_array_equal(
        params["transformer.h.1.mlp.c_fc.weight"], bigger.transformer.h[1].mlp.c_fc.weight.detach().numpy().T
    )
    assert params["transformer.wpe.weight"].shape == (16, 32)  # kept from the model, not the mis-shaped tensor


def test_bias_false_drops_every_bias() -> None:
    gpt = create_gpt(bias=False, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=50)
    pm = compile_gpt(gpt, make_backend("numpy", ml.float64), use_short_namings=False)
    assert not [key for key in pm.param_keys if key.endswith("bias")]
    with torch.no_grad():  # the same network as HF's with every bias zero
        zeroed = gpt2_reference()
        for name, parameter in zeroed.named_parameters():
            if name.endswith("bias"):
                parameter.zero_()
    state = {k: v for k, v in zeroed.state_dict().items() if not k.endswith("bias")}
    ids = token_ids()
    assert_matches(logits_of(pm, load_hf(pm, state), ids), reference_logits(zeroed, ids, double=True), ml.float64)
    with pytest.raises(CheckpointError, match=r"unexpected.*: 13"):  # 6 per layer + ln_f
        load_hf(pm, zeroed.state_dict())


@pytest.mark.parametrize(
    "options",
    [
        {"activation_function": "gelu"},
        {"activation_function": "gelu_pytorch_tanh"},
        {"n_inner": 48},
        {"layer_norm_epsilon": 1e-3},
    ],
    ids=["gelu-exact", "gelu-pytorch-tanh", "n_inner", "epsilon"],
)
def test_hf_config_options(options: dict[str, Any]) -> None:
    model = gpt2_reference(seed=5, **options)
    pm = compile_gpt(from_hf_config(model.config), make_backend("numpy", ml.float64))
    ids = token_ids()
    assert_matches(
        logits_of(pm, load_hf(pm, model.state_dict()), ids), reference_logits(model, ids, double=True), ml.float64
    )


@pytest.mark.parametrize("backend_name", ["numpy", "torch", "jax", "mlx"])
def test_symbolic_batch_and_length_on_python_backends(tied: GPT2LMHeadModel, backend_name: str) -> None:
    require(backend_name)
    pm = compile_gpt(from_hf_config(tied.config), make_backend(backend_name), shapes=None)
    params = load_hf(pm, tied.state_dict())
    for batch, length in ((1, 5), (3, 16)):
        ids = token_ids(batch, length, seed=length)
        assert_matches(
            logits_of(pm, params, ids), reference_logits(tied, ids), ml.float32, f"batch {batch}, length {length}"
        )


@pytest.mark.parametrize(
    "backend_name, dtype", [("numpy", ml.float64), ("numpy", ml.float32), ("torch", ml.float32), ("jax", ml.float32)]
)
def test_gradients_match_torch_autograd(backend_name: str, dtype: Any) -> None:
    require(backend_name)
    double = dtype == ml.float64
    model = gpt2_reference().double() if double else gpt2_reference()
    ids = token_ids()
    cotangent = np.random.default_rng(7).normal(size=(BATCH, LENGTH, GPT2_SIZES["vocab_size"]))
    logits = model(torch.tensor(ids)).logits
    (logits * torch.tensor(cotangent, dtype=logits.dtype)).sum().backward()
    parameters = dict(model.named_parameters())
    backend = make_backend(backend_name, dtype)
    pm = compile_gpt(from_hf_config(model.config), backend, use_short_namings=False)
    params = load_hf(pm, model.state_dict())
    _, grads = pm.evaluate(
        params, {"input": backend.array(ids, "int")}, output_gradients={"output": backend.array(cotangent)}
    )
    assert set(grads) == set(pm.param_keys)
    for name in pm.param_keys:  # wte gets the embedding's and the tied head's gradient
        want = parameters[name].grad.numpy()
        if name.endswith(("c_attn.weight", "c_fc.weight", "c_proj.weight")):
            want = want.T  # HF's Conv1D stores [in, out]
        assert_matches(backend.to_numpy(grads[name]), want, dtype, f"d loss / d {name}")


def test_builders_are_registered_and_dispatched() -> None:
    from mithril.models import create_gpt as registered

    assert registered is create_gpt
    config = GPT2Config(**GPT2_SIZES)
    for built in (from_hf_config(config), gpt_from_hf_config(config), gpt_from_hf_config(config.to_dict())):
        assert isinstance(built, GPT) and built.family == "gpt2"
        assert built.config == GPTConfig(bias=True, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=50)


def test_bad_configurations_say_what_was_expected() -> None:
    with pytest.raises(ValueError, match="dims=30 is not divisible by num_heads=4"):
        create_gpt(bias=True, block_size=16, dims=30, num_heads=4, num_layers=2, vocab_size=50)
    with pytest.raises(ValueError, match="num_layers must be a positive int, got 0"):
        create_gpt(bias=True, block_size=16, dims=32, num_heads=4, num_layers=0, vocab_size=50)
    with pytest.raises(ValueError, match="activation_function 'relu' is not supported; supported: gelu_new"):
        from_hf_config(GPT2Config(**GPT2_SIZES, activation_function="relu"))
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx=True is not supported"):
        from_hf_config(GPT2Config(**GPT2_SIZES, scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(TypeError, match="GPT needs a GPTConfig, got dict"):
        GPT({"dims": 32})  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="has no field 'n_positions'"):
        from_hf_config({"model_type": "gpt2"})
