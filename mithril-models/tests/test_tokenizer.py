"""``load_tokenizer`` against ``transformers``' fast tokenizers on the same files: GPT-2 byte-level BPE, T5
unigram and Llama BPE with byte fallback, trained here on the repository's docs (see ``conftest.py``).

A file is compared with ``PreTrainedTokenizerFast(tokenizer_file=...)``, a folder saved by the family's
``transformers`` class with ``AutoTokenizer.from_pretrained``: ids with and without special tokens, decoded
text with and without special tokens, batches padded left and right, special token ids.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from mithril.errors import ArgumentError  # noqa: E402

from mithril_models import Tokenizer, load_tokenizer  # noqa: E402
from mithril_models.tokenizer import BatchEncoding, TokenizerError  # noqa: E402

KINDS = ["gpt2", "t5", "llama"]


def _agreement(ref: Any, mine: Tokenizer, texts: list[str]) -> dict[str, int]:
    """How many texts give identical ids / decoded text, per aspect."""
    counts = dict.fromkeys(("ids", "ids_plain", "decode", "decode_skip"), 0)
    for text in texts:
        ids = ref.encode(text)
        counts["ids"] += ids == mine.encode(text)
        counts["ids_plain"] += ref.encode(text, add_special_tokens=False) == mine.encode(text, add_special_tokens=False)
        counts["decode"] += ref.decode(ids) == mine.decode(ids)
        counts["decode_skip"] += ref.decode(ids, skip_special_tokens=True) == mine.decode(ids, skip_special_tokens=True)
    return counts


@pytest.fixture(scope="module")
def texts(corpus: list[str], edge_texts: list[str]) -> list[str]:
    return corpus + edge_texts


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_gives_the_ids_of_pretrained_tokenizer_fast(
    kind: str, trained_tokenizers: dict[str, Any], texts: list[str], tmp_path: Path
) -> None:
    file = tmp_path / "tokenizer.json"
    trained_tokenizers[kind].save(str(file))
    ref = transformers.PreTrainedTokenizerFast(tokenizer_file=str(file))
    mine = load_tokenizer(file)
    assert _agreement(ref, mine, texts) == dict.fromkeys(("ids", "ids_plain", "decode", "decode_skip"), len(texts))
    assert len(mine) == len(ref)
    expected = {
        "gpt2": ("<|endoftext|>", "<|endoftext|>", None),
        "t5": (None, "</s>", "<pad>"),
        "llama": ("<s>", "</s>", None),
    }
    assert (mine.bos_token, mine.eos_token, mine.pad_token) == expected[kind]  # inferred from the file alone


@pytest.mark.parametrize("kind", KINDS)
def test_a_folder_gives_the_ids_of_auto_tokenizer(
    kind: str, trained_tokenizers: dict[str, Any], hf_tokenizer_folder: Any, texts: list[str], tmp_path: Path
) -> None:
    folder = hf_tokenizer_folder(kind, trained_tokenizers[kind], tmp_path / kind)
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    mine = load_tokenizer(folder)
    assert _agreement(ref, mine, texts) == dict.fromkeys(("ids", "ids_plain", "decode", "decode_skip"), len(texts))
    assert len(mine) == len(ref)  # T5's <extra_id_*> tokens added from the configuration
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        assert getattr(mine, name) == getattr(ref, name), name
    assert mine.padding_side == ref.padding_side == ("left" if kind == "llama" else "right")
    assert set(mine.all_special_ids) == set(ref.all_special_ids)


def test_unigram_near_ties_follow_each_reader(tmp_path: Path) -> None:
    """ "000" splits as 0+00 or 00+0 with equal scores up to rounding, so the last bit of each score decides.

    ``T5Tokenizer`` (what ``AutoTokenizer`` gives for the folder) reads the scores with Python's ``json``;
    ``PreTrainedTokenizerFast(tokenizer_file=...)`` with the Rust library's reader, which is one unit in the last
    place off for ``-7.6676639225002186``. Each of our readers must make the same choice as its counterpart.
    """
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.520938417613145)]
    vocab += [("0", -5.016852976499964), ("00", -7.6676639225002186)]
    folder = tmp_path / "t5"
    transformers.T5Tokenizer(vocab=vocab, extra_ids=0).save_pretrained(folder)
    by_class = transformers.AutoTokenizer.from_pretrained(folder)
    by_file = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    for ref, mine in ((by_class, load_tokenizer(folder)), (by_file, load_tokenizer(folder / "tokenizer.json"))):
        for text in ("000", "1 000 00000"):
            assert mine.encode(text) == ref.encode(text), (type(ref).__name__, text)
    scores = [score for _, score in json.loads(load_tokenizer(folder).backend.to_str())["model"]["vocab"]]
    assert scores == [score for _, score in vocab]  # bit for bit

    # The class AutoTokenizer picks: named by tokenizer_config.json, else config.json's model_type, else generic.
    for config, model_type, want in [
        ({"tokenizer_class": "PreTrainedTokenizerFast"}, None, by_file),
        ({"eos_token": "</s>"}, None, by_file),
        ({"eos_token": "</s>"}, "t5", by_class),
    ]:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        (folder / "config.json").unlink(missing_ok=True)
        if model_type:
            (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
        assert (
            load_tokenizer(folder).encode("000")
            == want.encode("000")
            == transformers.AutoTokenizer.from_pretrained(folder).encode("000")
        ), (config, model_type)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batches_are_those_of_transformers(
    kind: str,
    side: str,
    trained_tokenizers: dict[str, Any],
    hf_tokenizer_folder: Any,
    corpus: list[str],
    edge_texts: list[str],
    tmp_path: Path,
) -> None:
    folder = hf_tokenizer_folder(kind, trained_tokenizers[kind], tmp_path / kind)
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    mine = load_tokenizer(folder)
    if ref.pad_token is None:  # GPT-2 has none: the usual choice
        ref.pad_token = ref.eos_token
        mine.pad_token = mine.eos_token
    batch = edge_texts + corpus[:23]
    want = ref(batch, padding=True, padding_side=side, return_tensors="np")
    got = mine.encode_batch(batch, padding_side=side)
    assert isinstance(got, BatchEncoding) and got.input_ids.dtype == np.int64
    np.testing.assert_array_equal(got.input_ids, want["input_ids"])
    np.testing.assert_array_equal(got["attention_mask"], want["attention_mask"])
    unpadded = mine.encode_batch(batch, padding=False)
    assert unpadded.input_ids == [mine.encode(t) for t in batch]
    multiple = mine.encode_batch(batch[:3], padding_side=side, pad_to_multiple_of=8)
    assert multiple.input_ids.shape[1] % 8 == 0


def test_byte_level_and_byte_fallback_round_trip_exactly(trained_tokenizers: dict[str, Any], tmp_path: Path) -> None:
    for kind in ("gpt2", "llama"):
        file = tmp_path / f"{kind}.json"
        trained_tokenizers[kind].save(str(file))
        tokenizer = load_tokenizer(file)
        for text in ["Hello wörld 🙂  double  space", "漢字 ☃ ∑ \t tabs", "mithril.compile(model, backend)"]:
            assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=True) == text, kind
    llama = load_tokenizer(tmp_path / "llama.json")
    assert any(t.startswith("<0x") for t in llama.tokenize("漢字"))  # unseen characters: byte fallback


def test_legacy_configuration_files(trained_tokenizers: dict[str, Any], edge_texts: list[str], tmp_path: Path) -> None:
    """A ``transformers`` 4 folder: ``add_bos_token``/``add_eos_token`` given (ignored, as ``transformers`` 5
    ignores them next to a ``tokenizer.json``), a pad token only in ``special_tokens_map.json``,
    ``clean_up_tokenization_spaces`` on (applied to unigram models only)."""
    folder = tmp_path / "legacy"
    folder.mkdir()
    trained_tokenizers["llama"].save(str(folder / "tokenizer.json"))
    unk = {"__type": "AddedToken", "content": "<unk>", "special": True}
    config = {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "add_eos_token": True,
              "bos_token": "<s>", "eos_token": "</s>", "unk_token": unk}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "special_tokens_map.json").write_text(json.dumps({"pad_token": "<unk>", "eos_token": "</s>"}))
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    mine = load_tokenizer(folder)
    texts = ["Hello world", "two  spaces", *edge_texts]
    assert [mine.encode(t) for t in texts] == [ref.encode(t) for t in texts]
    assert mine.encode("x")[0] == mine.bos_token_id and mine.encode("x")[-1] != mine.eos_token_id
    assert (mine.pad_token_id, mine.pad_token) == (ref.pad_token_id, "<unk>")

    t5 = tmp_path / "t5"
    t5.mkdir()
    trained_tokenizers["t5"].save(str(t5 / "tokenizer.json"))
    (t5 / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>", "clean_up_tokenization_spaces": True}))
    ref, mine = transformers.AutoTokenizer.from_pretrained(t5), load_tokenizer(t5)
    ids = mine.encode("don't stop , it's fine .")
    assert mine.decode(ids) == ref.decode(ids)


def test_bad_input_says_what_was_expected(trained_tokenizers: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(tmp_path / "nowhere")
    (tmp_path / "vocab.json").write_text("{}")
    with pytest.raises(TokenizerError, match=r"has no tokenizer.json \(found: vocab.json\).*slow-tokenizer files"):
        load_tokenizer(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"not a tokenizer\.json the tokenizers library reads"):
        load_tokenizer(tmp_path / "bad.json")
    file = tmp_path / "gpt2.json"
    trained_tokenizers["gpt2"].save(str(file))
    tokenizer = load_tokenizer(file)
    with pytest.raises(ArgumentError, match=r"needs a pad_token.*tokenizer\.pad_token = tokenizer\.eos_token"):
        tokenizer.encode_batch(["a", "a b c"])
    assert tokenizer.encode_batch(["ab c", "ab c"]).input_ids.shape[0] == 2  # no padding needed: no pad token needed
    with pytest.raises(ArgumentError, match="padding_side must be 'left' or 'right', got 'middle'"):
        tokenizer.encode_batch(["a"], padding_side="middle")
    with pytest.raises(ArgumentError, match="texts must be a list of str"):
        tokenizer.encode_batch("one text")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="is not in the vocabulary"):
        tokenizer.pad_token = "<no such token>"


def test_missing_tokenizers_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r'pip install "mithril-models\[tokenizers\]"'):
        load_tokenizer(tmp_path)
