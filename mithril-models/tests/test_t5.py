"""T5 (``t5_encode``, ``t5_decode``) against ``transformers.T5ForConditionalGeneration`` with random weights.

Every installed backend in float32 (max relative error <= 1e-4) and NumPy in float64 against the
reference run in float64 (<= 1e-9). Sequences longer than ``relative_attention_max_distance`` (20) put
offsets in the saturated outermost buckets. Nothing is downloaded: the reference is built from a config.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from typing import Any
from unittest import mock

import mithril as ml
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.models.t5 import modeling_t5  # noqa: E402

from mithril_models import CheckpointError, from_hf_config, load_hf, save_safetensors  # noqa: E402
from mithril_models.t5 import T5Decoder, T5Encoder, relative_position_bucket, t5_decode, t5_encode  # noqa: E402
from mithril_models.testing import assert_matches, backend_params, make_backend  # noqa: E402

SIZES = dict(
    d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=64,
    relative_attention_num_buckets=8, relative_attention_max_distance=20, dropout_rate=0.0,
)  # fmt: skip
VARIANTS = {
    "relu": {"feed_forward_proj": "relu"},  # original T5: tied embeddings, decoder output scaled by d_model**-0.5
    "gated-gelu": {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},  # T5 v1.1: own lm_head, unscaled
}
LONG = (2, 25, 23)  # batch, encoder and decoder lengths; beyond max_distance = 20: saturated buckets
SHORT = (1, 6, 5)  # the same compiled model (Python backends) at another batch size and lengths
SLOW_BACKENDS = ("c", "jax")  # C compiles with cc -O3; JAX traces once per sequence length


def _marked(params: Any) -> list[Any]:
    slow = pytest.mark.slow
    return [pytest.param(*p.values, id=p.id, marks=slow) if p.values[0] in SLOW_BACKENDS else p for p in params]


FLOAT32 = _marked(backend_params())
FLOAT64_NUMPY = [p for p in backend_params(dtypes=(ml.float64,)) if p.values[0] == "numpy"]


def _float64_layer_norm(self: Any, hidden_states: Any) -> Any:
    """T5LayerNorm without its float32 upcast of the variance, which would cap a float64 run at ~1e-7."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


class Reference:
    """One random-weight ``T5ForConditionalGeneration`` and its outputs (float32, or float64 copied)."""

    def __init__(self, variant: str, **overrides: Any) -> None:
        torch.manual_seed(0)
        self.config = transformers.T5Config(**{**SIZES, **VARIANTS[variant], **overrides})
        self.model = transformers.T5ForConditionalGeneration(self.config).eval()
        self.state_dict = self.model.state_dict()
        self._double: Any = None

    def model_in(self, dtype: Any) -> Any:
        if dtype != ml.float64:
            return self.model
        if self._double is None:
            self._double = copy.deepcopy(self.model).double()
        return self._double

    @contextlib.contextmanager
    def precise(self, dtype: Any) -> Iterator[None]:
        if dtype != ml.float64:
            yield
            return
        with mock.patch.object(modeling_t5.T5LayerNorm, "forward", _float64_layer_norm):
            yield

    def run(self, ids: np.ndarray, decoder_ids: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(encoder output, logits)`` for ``ids`` and ``decoder_ids``."""
        with torch.no_grad(), self.precise(dtype):
            out = self.model_in(dtype)(input_ids=torch.from_numpy(ids), decoder_input_ids=torch.from_numpy(decoder_ids))
        return out.encoder_last_hidden_state.numpy(), out.logits.numpy()


@functools.cache
def reference(variant: str) -> Reference:
    return Reference(variant)


def token_ids(batch: int, encoder_length: int, decoder_length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + encoder_length)
    vocab = SIZES["vocab_size"]
    return rng.integers(0, vocab, (batch, encoder_length)), rng.integers(0, vocab, (batch, decoder_length))


def _static(backend: Any) -> bool:
    return type(backend).codegen != "python"  # C and GGML compile for fixed shapes


def _lengths(backend: Any) -> list[tuple[int, int, int]]:
    return [LONG] if _static(backend) else [SHORT, LONG]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(("backend_name", "dtype"), FLOAT32 + FLOAT64_NUMPY)
def test_encoder_matches_transformers(variant: str, backend_name: str, dtype: Any) -> None:
    ref, backend = reference(variant), make_backend(backend_name, dtype)
    shapes = {"input": list(LONG[:2])} if _static(backend) else None
    pm = ml.compile(t5_encode(ref.config), backend, data_keys={"input"}, shapes=shapes)
    params = load_hf(pm, ref.state_dict)
    for lengths in _lengths(backend):  # one compiled model, several sequence lengths
        ids, decoder_ids = token_ids(*lengths)
        expected, _ = ref.run(ids, decoder_ids, dtype)
        got = backend.to_numpy(pm.evaluate(params, {"input": ids})["output"])
        assert_matches(got, expected, dtype, f"{variant} encoder on {backend_name}, batch and length {lengths[:2]}")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(("backend_name", "dtype"), FLOAT32 + FLOAT64_NUMPY)
def test_decoder_matches_transformers(variant: str, backend_name: str, dtype: Any) -> None:
    ref, backend = reference(variant), make_backend(backend_name, dtype)
    batch, encoder_length, decoder_length = LONG
    shapes = {"input": [batch, decoder_length], "memory": [batch, encoder_length, SIZES["d_model"]]}
    pm = ml.compile(
        t5_decode(ref.config), backend, data_keys={"input", "memory"}, shapes=shapes if _static(backend) else None
    )
    params = load_hf(pm, ref.state_dict)
    for lengths in _lengths(backend):
        ids, decoder_ids = token_ids(*lengths)
        memory, expected = ref.run(ids, decoder_ids, dtype)  # the reference encoder's output feeds the decoder
        got = backend.to_numpy(pm.evaluate(params, {"input": decoder_ids, "memory": memory})["output"])
        assert_matches(got, expected, dtype, f"{variant} decoder on {backend_name}, batch and lengths {lengths}")


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_encoder_on_jax_decoder_on_torch(variant: str) -> None:
    """The manual's split: no shapes given, the encoder's output passed through NumPy into the decoder."""
    pytest.importorskip("jax")
    ref = reference(variant)
    encoder, decoder = t5_encode(ref.config), t5_decode(ref.config)
    jax_encoder = ml.compile(encoder, ml.JaxBackend(), data_keys={"input"})
    torch_decoder = ml.compile(decoder, ml.TorchBackend(), data_keys={"input", "memory"})
    enc_params, dec_params = load_hf(jax_encoder, ref.state_dict), load_hf(torch_decoder, ref.state_dict)
    for lengths in (SHORT, LONG):
        ids, decoder_ids = token_ids(*lengths, seed=1)
        _, expected = ref.run(ids, decoder_ids, ml.float32)
        memory = np.asarray(jax_encoder.evaluate(enc_params, {"input": ids})["output"])
        logits = torch_decoder.evaluate(dec_params, {"input": decoder_ids, "memory": memory})["output"]
        assert_matches(
            logits.detach().numpy(), expected, ml.float32, f"{variant} jax encoder -> torch decoder, {lengths}"
        )


_ATTENTION = "block.0.layer.0.SelfAttention"
GRADIENT_PARAMS = {
    "encoder": [
        "shared.weight", f"{_ATTENTION}.relative_attention_bias.weight", "block.1.layer.0.SelfAttention.q.weight",
        "block.1.layer.1.DenseReluDense.wi.weight", "final_layer_norm.weight",
    ],
    "decoder": [
        "shared.weight", f"{_ATTENTION}.relative_attention_bias.weight", "block.1.layer.1.EncDecAttention.k.weight",
        "block.0.layer.2.DenseReluDense.wo.weight", "block.1.layer.0.layer_norm.weight",
    ],
}  # fmt: skip


def _reference_gradients(
    ref: Reference, part: str, ids: np.ndarray, decoder_ids: np.ndarray, cotangent: np.ndarray, dtype: Any
) -> dict[str, np.ndarray]:
    """d sum(output * cotangent) / d param from PyTorch autograd; the decoder gets the encoder's output detached."""
    model = ref.model_in(dtype)
    model.zero_grad()
    with ref.precise(dtype):
        memory = model.encoder(input_ids=torch.from_numpy(ids)).last_hidden_state
        if part == "encoder":
            output = memory
        else:
            output = model(encoder_outputs=(memory.detach(),), decoder_input_ids=torch.from_numpy(decoder_ids)).logits
        (output * torch.from_numpy(cotangent)).sum().backward()
    named = dict(model.named_parameters())
    grads = {
        path: named[f"{part}.{path}" if path != "shared.weight" else path].grad.numpy().copy()
        for path in GRADIENT_PARAMS[part]
    }
    model.zero_grad()
    return grads


@pytest.mark.slow
@pytest.mark.parametrize("part", ["encoder", "decoder"])
@pytest.mark.parametrize(("backend_name", "dtype"), [("torch", ml.float32), ("numpy", ml.float64)])
def test_gradients_match_autograd(part: str, backend_name: str, dtype: Any) -> None:
    ref = reference("relu")
    backend = make_backend(backend_name, dtype)
    build, data_keys = (t5_encode, {"input"}) if part == "encoder" else (t5_decode, {"input", "memory"})
    pm = ml.compile(build(ref.config), backend, data_keys=data_keys, use_short_namings=False)
    params = load_hf(pm, ref.state_dict)
    ids, decoder_ids = token_ids(*LONG, seed=2)
    memory, logits = ref.run(ids, decoder_ids, dtype)
    expected_output = memory if part == "encoder" else logits
    cotangent = np.random.default_rng(3).standard_normal(expected_output.shape).astype(expected_output.dtype)
    data = {"input": ids} if part == "encoder" else {"input": decoder_ids, "memory": memory}
    outputs, grads = pm.evaluate(params, data, output_gradients={"output": backend.array(cotangent)})
    assert_matches(backend.to_numpy(outputs["output"]), expected_output, dtype, f"{part} output")
    expected = _reference_gradients(ref, part, ids, decoder_ids, cotangent, dtype)
    by_path = {path: name for name, path in pm.input_paths.items()}
    for path, grad in expected.items():
        assert_matches(
            backend.to_numpy(grads[by_path[path]]), grad, dtype, f"{part} d loss / d {path} on {backend_name}"
        )


def test_shapes_differ_from_t5_defaults() -> None:
    """inner_dim = num_heads * d_kv != d_model, and unequal encoder/decoder depths (NumPy, float64)."""
    ref = Reference("relu", d_kv=6, num_heads=3, num_layers=1, num_decoder_layers=3, relative_attention_num_buckets=6)
    ids, decoder_ids = token_ids(*LONG)
    memory, logits = ref.run(ids, decoder_ids, ml.float64)
    backend = ml.NumpyBackend(dtype=ml.float64)
    encoder = ml.compile(t5_encode(ref.config), backend, data_keys={"input"})
    decoder = ml.compile(t5_decode(ref.config), backend, data_keys={"input", "memory"})
    state = {k: v.double() for k, v in ref.state_dict.items()}
    got_memory = encoder.evaluate(load_hf(encoder, state), {"input": ids})["output"]
    got_logits = decoder.evaluate(load_hf(decoder, state), {"input": decoder_ids, "memory": memory})["output"]
    assert_matches(got_memory, memory, ml.float64, "encoder")
    assert_matches(got_logits, logits, ml.float64, "decoder")


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(8, 20), (32, 128), (16, 33), (6, 7)])
def test_buckets_equal_transformers(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    offsets = np.arange(-3 * max_distance, 3 * max_distance + 1)
    expected = modeling_t5.T5Attention._relative_position_bucket(
        torch.from_numpy(offsets), bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    ).numpy()
    got = relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    np.testing.assert_array_equal(got, expected)


def _paths(model: Any) -> set[str]:
    pm = ml.compile(
        model, ml.NumpyBackend(), data_keys={"input"} | ({"memory"} if isinstance(model, T5Decoder) else set())
    )
    return set(pm.input_paths.values()) - {"input", "memory"}


def test_parameter_paths_follow_transformers() -> None:
    ref = reference("gated-gelu")
    hf = set(ref.state_dict)
    encoder_paths, decoder_paths = _paths(t5_encode(ref.config)), _paths(t5_decode(ref.config))
    assert {f"encoder.{p}" for p in encoder_paths - {"shared.weight"}} == {
        k for k in hf if k.startswith("encoder.")
    } - {"encoder.embed_tokens.weight"}
    assert {f"decoder.{p}" for p in decoder_paths - {"shared.weight", "lm_head.weight"}} == {
        k for k in hf if k.startswith("decoder.")
    } - {"decoder.embed_tokens.weight"}
    assert "lm_head.weight" in decoder_paths  # untied (v1.1): an own head
    assert "lm_head.weight" not in _paths(t5_decode(reference("relu").config))  # tied: the head reuses shared.weight


def test_t5_encoder_model_checkpoint_and_safetensors(tmp_path: Any) -> None:
    ref = reference("gated-gelu")
    encoder_only = transformers.T5EncoderModel(ref.config).eval()
    encoder_only.load_state_dict(
        {k: v for k, v in ref.state_dict.items() if not k.startswith(("decoder.", "lm_head."))}
    )
    pm = ml.compile(t5_encode(ref.config), ml.NumpyBackend(), data_keys={"input"})
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {k: v.numpy() for k, v in encoder_only.state_dict().items()})
    ids, _ = token_ids(*SHORT)
    with torch.no_grad():
        expected = encoder_only(input_ids=torch.from_numpy(ids)).last_hidden_state.numpy()
    for source in (encoder_only.state_dict(), path):
        got = pm.evaluate(load_hf(pm, source), {"input": ids})["output"]
        assert_matches(got, expected, ml.float32, f"T5EncoderModel checkpoint from {type(source).__name__}")


def test_builders_and_from_hf_config() -> None:
    config = reference("relu").config
    encoder, decoder = from_hf_config(config)
    assert isinstance(encoder, T5Encoder) and isinstance(decoder, T5Decoder)
    assert encoder.family == decoder.family == "t5"
    from mithril.models import t5_decode as registered

    assert isinstance(registered(dict(SIZES)), T5Decoder)  # through the plugin registry, from a plain dict


def test_missing_config_field_is_named() -> None:
    config = {k: v for k, v in SIZES.items() if k != "d_kv"}
    with pytest.raises(KeyError, match="d_kv"):
        t5_encode(config)


@pytest.mark.parametrize("proj", ["swish-gelu", "gated-tanh", "gelu_fast", 3])
def test_unsupported_feed_forward_proj_is_refused(proj: Any) -> None:
    with pytest.raises(ValueError, match=r"feed_forward_proj .*expected one of|feed_forward_proj must be"):
        t5_decode({**SIZES, "feed_forward_proj": proj})


def test_bad_config_values_are_refused() -> None:
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        t5_encode({**SIZES, "num_heads": 0})
    with pytest.raises(ValueError, match="relative_attention_max_distance"):
        t5_encode({**SIZES, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 2})


def test_strict_load_reports_checkpoint_of_another_size() -> None:
    ref = reference("relu")
    pm = ml.compile(
        t5_encode({**SIZES, "d_ff": 48, "num_layers": 3}),
        ml.NumpyBackend(),
        data_keys={"input"},
        use_short_namings=False,
    )
    with pytest.raises(CheckpointError) as info:
        load_hf(pm, ref.state_dict)
    message = str(info.value)
    assert "shape mismatch" in message and "DenseReluDense.wi.weight" in message and "[64, 32]" in message
    assert "missing" in message and "block.2.layer.0.SelfAttention.q.weight" in message
    # the decoder half of the full checkpoint is ignorable, never reported as unexpected
    assert "unexpected" not in message
    pm = ml.compile(t5_encode({**SIZES, "num_layers": 1}), ml.NumpyBackend(), data_keys={"input"})
    with pytest.raises(CheckpointError, match=r"unexpected[^\n]*\n(\s+encoder\.block\.1\.\S+\n?)+"):
        load_hf(pm, ref.state_dict)


def test_tied_checkpoint_with_a_different_head_conflicts() -> None:
    ref = reference("relu")
    state = dict(ref.state_dict)
    state["lm_head.weight"] = state["lm_head.weight"] + 1.0
    pm = ml.compile(t5_decode(ref.config), ml.NumpyBackend(), data_keys={"input", "memory"})
    with pytest.raises(CheckpointError, match=r"lm_head\.weight and shared\.weight both fill .* hold different values"):
        load_hf(pm, state)


def test_untied_head_uses_its_own_weights() -> None:
    """A T5 v1.1 checkpoint whose ``lm_head`` differs from ``shared`` (transformers >= 5 always ties them
    in a model built from a config, so the expected logits come from its decoder states and that head)."""
    ref = reference("gated-gelu")
    state = dict(ref.state_dict)
    head = torch.from_numpy(
        np.random.default_rng(4).standard_normal((SIZES["vocab_size"], SIZES["d_model"]), np.float32)
    )
    state["lm_head.weight"] = head
    ids, decoder_ids = token_ids(*LONG)
    with torch.no_grad():
        memory = ref.model.encoder(input_ids=torch.from_numpy(ids)).last_hidden_state
        states = ref.model.decoder(
            input_ids=torch.from_numpy(decoder_ids), encoder_hidden_states=memory
        ).last_hidden_state
        expected = (states @ head.T).numpy()  # no d_model**-0.5 scaling without tied embeddings
    pm = ml.compile(t5_decode(ref.config), ml.NumpyBackend(), data_keys={"input", "memory"})
    got = pm.evaluate(load_hf(pm, state), {"input": decoder_ids, "memory": memory.numpy()})["output"]
    assert_matches(got, expected, ml.float32, "decoder with its own lm_head")
