"""Mithril's published model examples (``examples/gpt/model.py``, ``examples/clip/model.py``,
``examples/t5.py``) imported unchanged from a checkout, built at small and documented sizes, compiled on
NumPy, JAX and PyTorch without input shapes (batch and sequence lengths stay symbolic), and evaluated with
outputs and gradients: equal to ``mithril_models`` given the same weights. Skipped without
``MITHRIL_CHECKOUT`` (see :mod:`tests.published.checkout`)."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest

from .checkout import published

mithril_models = pytest.importorskip("mithril_models")

GPT_SMALL = {"bias": True, "block_size": 16, "dims": 16, "num_heads": 2, "num_layers": 2, "vocab_size": 40}
def gpt_reference(sizes: dict):
    """The builder's GPT-2 with the example's choices: exact (erf) GELU, an untied LM head."""
    from mithril_models.gpt import from_hf_config

    hf = {"n_embd": sizes["dims"], "n_layer": sizes["num_layers"], "n_head": sizes["num_heads"], "n_positions": sizes["block_size"],
          "vocab_size": sizes["vocab_size"], "activation_function": "gelu", "tie_word_embeddings": False}  # fmt: skip
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


@pytest.mark.parametrize("backend", _backends(), ids=lambda b: type(b).__name__)
def test_published_gpt_matches_the_builder_with_gradients_at_any_length(backend):
    example = published("gpt.model")
    ours = ml.compile(example.create_gpt(**GPT_SMALL), backend, use_short_namings=False)
    reference = ml.compile(gpt_reference(GPT_SMALL), backend, use_short_namings=False)
    assert ours.output_keys == ["output"]
    params = reference.randomize_params(seed=0)
    assert sorted(ours.param_keys) == sorted(params), "the published example's names are Hugging Face's, as the builder's"
    rng = np.random.default_rng(0)
    for batch, length in ((1, 5), (2, 9)):  # one compiled model, two lengths
        ids = backend.array(rng.integers(0, GPT_SMALL["vocab_size"], size=(batch, length)))
        seed = {"output": backend.array(rng.normal(size=(batch, length, GPT_SMALL["vocab_size"])))}
        got, got_grads = ours.evaluate(params, {"input": ids}, output_gradients=seed)
        want, want_grads = reference.evaluate(params, {"input": ids}, output_gradients=seed)
        assert _numpy(backend, got)["output"].shape == (batch, length, GPT_SMALL["vocab_size"])
        np.testing.assert_allclose(_numpy(backend, got)["output"], _numpy(backend, want)["output"], rtol=1e-9, atol=1e-10)
        got_grads, want_grads = _numpy(backend, got_grads), _numpy(backend, want_grads)
        assert sorted(got_grads) == sorted(want_grads)
        for key in want_grads:
            np.testing.assert_allclose(got_grads[key], want_grads[key], rtol=1e-8, atol=1e-10, err_msg=key)
    ids = rng.integers(0, GPT_SMALL["vocab_size"], size=(1, 6))
    changed = ids.copy()
    changed[0, -1] = (changed[0, -1] + 1) % GPT_SMALL["vocab_size"]
    first, second = (_numpy(backend, ours.evaluate(params, {"input": backend.array(i)}))["output"] for i in (ids, changed))
    np.testing.assert_allclose(first[0, :-1], second[0, :-1], rtol=1e-12)  # causal: earlier positions unchanged
    assert not np.allclose(first[0, -1], second[0, -1])


def test_published_gpt_builds_at_its_documented_size():
    """GPT-2 small (the example's run_sample sizes): 124M parameters once the vocabulary head is counted."""
    example = published("gpt.model")
    pm = ml.compile(example.create_gpt(**GPT2_SMALL), ml.NumpyBackend(), shapes={"input": [1, 8]}, use_short_namings=False, inference=True)
    reference = ml.compile(gpt_reference(GPT2_SMALL), ml.NumpyBackend(), shapes={"input": [1, 8]}, use_short_namings=False, inference=True)
    assert pm.shapes["output"] == [1, 8, GPT2_SMALL["vocab_size"]]
    assert {k: pm.shapes[k] for k in pm.param_keys} == {k: reference.shapes[k] for k in reference.param_keys}
