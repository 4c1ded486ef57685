"""``from_pretrained`` on folders written by ``save_pretrained`` of random-weight ``transformers`` models (and
tokenizers trained here on the docs): every family, sharded weights, the local Hugging Face cache, and the
errors. Nothing is downloaded.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import mithril as ml
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from mithril.errors import ArgumentError  # noqa: E402

from _hf_references import tiny_clip_config  # noqa: E402
from mithril_models import Pretrained, Tokenizer, from_pretrained  # noqa: E402
from mithril_models.pretrained import PretrainedError, detect_family  # noqa: E402
from mithril_models.testing import assert_matches  # noqa: E402

IMAGES = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
PROMPT = "The compiler turns a logical model"


def randomized(model: Any, seed: int = 0) -> Any:
    """``model`` in eval mode with every parameter random (norm scales around 1)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            norm = any(part in name for part in ("norm", "ln_", "layernorm", "layer_norm")) and name.endswith("weight")
            parameter.normal_(1.0 if norm else 0.0, 0.1)
    return model.eval()


def greedy(model: Any, ids: list[int], new: int, **options: Any) -> np.ndarray:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False, **options)
    return out[0, -new:].numpy()


@pytest.fixture(scope="module")
def llama_folder(
    tmp_path_factory: pytest.TempPathFactory, trained_tokenizers: dict[str, Any], hf_tokenizer_folder: Any
) -> tuple[Path, Any]:
    folder = tmp_path_factory.mktemp("llama")
    config = transformers.LlamaConfig(
        vocab_size=trained_tokenizers["llama"].get_vocab_size(), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    model = randomized(transformers.LlamaForCausalLM(config))
    model.save_pretrained(folder)
    hf_tokenizer_folder("llama", trained_tokenizers["llama"], folder)
    return folder, model


def test_llama_folder_generates_the_tokens_of_transformers(llama_folder: tuple[Path, Any]) -> None:
    folder, model = llama_folder
    llama = from_pretrained(folder, "numpy")
    assert isinstance(llama, Pretrained) and llama.family == "llama" and isinstance(llama.tokenizer, Tokenizer)
    assert llama.config.num_key_value_heads == 2 and llama.eos_token_id == 2
    ids = llama.tokenizer.encode(PROMPT)
    assert ids[0] == 1  # <s>
    want = greedy(model, ids, 12, eos_token_id=None)
    np.testing.assert_array_equal(llama.generate([ids], max_new_tokens=12)[0], want)
    text = llama.generate(PROMPT, max_new_tokens=12)
    cut = list(want[: list(want).index(2)]) if 2 in want else list(want)
    assert text == llama.tokenizer.decode(cut, skip_special_tokens=True)
    assert llama.generate([PROMPT, PROMPT + " into code"], max_new_tokens=4)[0] == llama.generate(
        PROMPT, max_new_tokens=4
    )
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits.numpy()
    assert_matches(
        llama.pm.evaluate(llama.parameters, {"input": np.array([ids])})["output"], logits, ml.float32, "logits"
    )


def test_sharded_weights_and_a_backend_object(llama_folder: tuple[Path, Any], tmp_path: Path) -> None:
    model = llama_folder[1]
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="50KB")
    assert (sharded / "model.safetensors.index.json").is_file() and len(list(sharded.glob("*.safetensors"))) > 2
    llama = from_pretrained(sharded, ml.TorchBackend(), use_short_namings=False)
    assert llama.tokenizer is None  # no tokenizer.json in this folder
    ids = [1, 5, 9, 40, 7]
    np.testing.assert_array_equal(llama.generate(ids, max_new_tokens=6)[0], greedy(model, ids, 6, eos_token_id=None))
    assert "model.layers.1.mlp.down_proj.weight" in llama.parameters
    with pytest.raises(ArgumentError, match="text needs a tokenizer"):
        llama.generate("words", max_new_tokens=2)


def test_gpt2_folder(tmp_path: Path, trained_tokenizers: dict[str, Any], hf_tokenizer_folder: Any) -> None:
    vocab = trained_tokenizers["gpt2"].get_vocab_size()
    config = transformers.GPT2Config(
        vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    model = randomized(transformers.GPT2LMHeadModel(config))
    model.save_pretrained(tmp_path)
    hf_tokenizer_folder("gpt2", trained_tokenizers["gpt2"], tmp_path)
    gpt = from_pretrained(tmp_path, "torch")
    assert gpt.family == "gpt2" and gpt.tokenizer.eos_token == "<|endoftext|>"
    ids = gpt.tokenizer.encode(PROMPT)
    np.testing.assert_array_equal(gpt.generate(ids, max_new_tokens=8)[0], greedy(model, ids, 8, eos_token_id=None))
    sampled = gpt.generate(ids, max_new_tokens=8, do_sample=True, top_k=5, seed=3)
    np.testing.assert_array_equal(sampled, gpt.generate(ids, max_new_tokens=8, do_sample=True, top_k=5, seed=3))


def test_t5_folder(tmp_path: Path, trained_tokenizers: dict[str, Any], hf_tokenizer_folder: Any) -> None:
    hf_tokenizer_folder("t5", trained_tokenizers["t5"], tmp_path)
    vocab = len(transformers.AutoTokenizer.from_pretrained(tmp_path))
    config = transformers.T5Config(
        vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0
    )
    model = randomized(transformers.T5ForConditionalGeneration(config))
    model.save_pretrained(tmp_path)
    t5 = from_pretrained(tmp_path, "numpy")
    assert t5.family == "t5" and sorted(t5.models) == ["decoder", "encoder"]
    ids = t5.tokenizer.encode(PROMPT)
    assert ids[-1] == t5.tokenizer.eos_token_id
    want = greedy(model, ids, 8, eos_token_id=None)
    np.testing.assert_array_equal(t5.generate(ids, max_new_tokens=8)[0], want)
    with pytest.raises(ArgumentError, match=r"Pretrained\.pm: a t5 checkpoint has parts"):
        _ = t5.pm


def test_clip_folder(tmp_path: Path) -> None:
    model = randomized(transformers.CLIPModel(tiny_clip_config(vocab_size=99, context=16, projection_dim=16)))
    model.save_pretrained(tmp_path)
    clip = from_pretrained(tmp_path, "numpy")
    tokens = np.random.default_rng(1).integers(0, 99, (2, 7))
    with torch.no_grad():
        image = model.get_image_features(pixel_values=torch.tensor(IMAGES))
        words = model.get_text_features(input_ids=torch.tensor(tokens))
    image, words = getattr(image, "pooler_output", image), getattr(words, "pooler_output", words)
    assert_matches(clip.encode_image(IMAGES), image.numpy(), ml.float32, "image features")
    assert_matches(clip.encode_text(tokens), words.numpy(), ml.float32, "text features")
    with pytest.raises(
        ArgumentError, match=r"Pretrained.generate: not available for a clip checkpoint \(only gpt2, llama, t5\)"
    ):
        clip.generate("a photo")


def test_resnet_folder(tmp_path: Path) -> None:
    labels = {0: "cat", 1: "dog", 2: "fish"}
    config = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=3, id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )  # fmt: skip
    model = randomized(transformers.ResNetForImageClassification(config))
    model.save_pretrained(tmp_path)
    net = from_pretrained(tmp_path, "numpy")
    with torch.no_grad():
        want = model(torch.tensor(IMAGES)).logits.numpy()
    assert_matches(net.classify(IMAGES), want, ml.float32, "logits")
    top = net.classify(IMAGES, top_k=2)
    assert [label for label, _ in top[0]] == [["cat", "dog", "fish"][i] for i in np.argsort(-want[0])[:2]]


def _hub_cache(cache: Path, repo: str, source: Path) -> None:
    """``source``'s files laid out as ``huggingface_hub`` caches repository ``repo``."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    shutil.copytree(source, root / "snapshots" / commit)


def test_names_are_looked_up_in_the_local_cache(llama_folder: tuple[Path, Any], tmp_path: Path) -> None:
    pytest.importorskip("huggingface_hub")
    _hub_cache(tmp_path, "mithril/tiny-llama", llama_folder[0])
    llama = from_pretrained("mithril/tiny-llama", "numpy", cache_dir=tmp_path, local_files_only=True)
    assert llama.family == "llama" and llama.path.parent.name == "snapshots"
    with pytest.raises(
        PretrainedError, match=r"'mithril/absent' is not a folder on disk and not in .*downloads are off"
    ):
        from_pretrained("mithril/absent", "numpy", cache_dir=tmp_path, local_files_only=True)


def test_without_huggingface_hub_a_name_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(PretrainedError, match=r"not a folder on disk.*pip install huggingface_hub"):
        from_pretrained("mithril/tiny-llama", "numpy")


def test_folders_that_cannot_be_opened(tmp_path: Path, llama_folder: tuple[Path, Any]) -> None:
    with pytest.raises(PretrainedError, match=r"the folder .*nowhere does not exist"):
        from_pretrained(tmp_path / "nowhere", "numpy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PretrainedError, match=r"has no config.json \(found: nothing\)"):
        from_pretrained(tmp_path / "empty", "numpy")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(llama_folder[0] / "config.json", pickled)
    (pickled / "pytorch_model.bin").write_bytes(b"never opened")
    with pytest.raises(
        PretrainedError, match=r"has only pytorch_model\.bin, which are refused.*expected model\.safetensors"
    ):
        from_pretrained(pickled, "numpy")
    (pickled / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(
        PretrainedError, match=r"no Mithril family for model_type 'bert' \(architectures \['BertModel'\]\)"
    ):
        from_pretrained(pickled, "numpy")
    assert detect_family({"architectures": ["MistralForCausalLM"]}) == "llama"
    with pytest.raises(ArgumentError, match="differs from the backend's dtype"):
        from_pretrained(llama_folder[0], ml.NumpyBackend(), dtype=ml.float64)
    with pytest.raises(ArgumentError, match="backend 'tpu' is not installed"):
        from_pretrained(llama_folder[0], "tpu")
