"""Fixtures shared by the tokenizer and ``from_pretrained`` tests: tokenizers trained here, on the repository's
own documentation, with ``tokenizers``' trainers (nothing is downloaded).

- ``gpt2``: byte-level BPE with ``<|endoftext|>`` (GPT-2's pipeline);
- ``t5``: unigram with ``<pad>``, ``</s>``, ``<unk>``, Metaspace pre-tokenizer and ``$A </s>`` (T5's);
- ``llama``: BPE with byte fallback (``<0x00>`` .. ``<0xFF>``), Metaspace, ``<s> $A`` (Llama's).

``hf_tokenizer_folder(kind, tokenizer, folder)`` saves one through the matching ``transformers`` class
(``GPT2Tokenizer``, ``T5Tokenizer``, ``LlamaTokenizer``), which writes the files a real checkpoint has.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the export tests' helpers: ``from _export_helpers import ...``

ROOT = Path(__file__).resolve().parents[2]
EDGE_TEXTS = [
    "Hello wörld 🙂  double  space",
    "  leading spaces",
    "trailing  ",
    "tabs\tand\nnewlines\n",
    "</s> inside <s> text <unk> <pad>",
    "<|endoftext|>glued",
    "",
    "ÆØÅ 漢字 ☃ ∑",
    "don't you're it's . , !",
]
"""Texts beyond the corpus: whitespace runs, special-token spellings in text, unseen bytes, contractions."""


def _merges(data: dict[str, Any]) -> list[tuple[str, ...]]:
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]


def _gpt2(texts: list[str], vocab_size: int = 600) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _t5(texts: list[str], vocab_size: int = 400) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.Unigram())
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), metaspace])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    eos = tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"], special_tokens=[("</s>", eos)]
    )
    return tokenizer


def _llama(texts: list[str], vocab_size: int = 600) -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = metaspace
    trained.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False))
    data = json.loads(trained.to_str())
    vocab = {piece: i for i, piece in enumerate(["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))])}
    for piece, _ in sorted(data["model"]["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(piece, len(vocab))
    model = models.BPE(vocab=vocab, merges=_merges(data), unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    tokenizer = Tokenizer(model)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    tokenizer.pre_tokenizer = metaspace
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)]
    )
    return tokenizer


TRAINERS: dict[str, Callable[[list[str]], Any]] = {"gpt2": _gpt2, "t5": _t5, "llama": _llama}


@pytest.fixture(scope="session")
def edge_texts() -> list[str]:
    """:data:`EDGE_TEXTS`."""
    return list(EDGE_TEXTS)


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    """Every non-empty line of ``docs/*.md``."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return [line for page in pages for line in page.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def trained_tokenizers(corpus: list[str]) -> dict[str, Any]:
    """``{"gpt2" | "t5" | "llama": tokenizers.Tokenizer}`` trained on :func:`corpus`."""
    pytest.importorskip("tokenizers")
    return {kind: train(corpus) for kind, train in TRAINERS.items()}


def save_with_transformers(kind: str, tokenizer: Any, folder: Path) -> Path:
    """``tokenizer`` saved through ``transformers``' own class for ``kind`` (``tokenizer.json`` and
    ``tokenizer_config.json`` as a real checkpoint has them)."""
    import transformers

    data = json.loads(tokenizer.to_str())
    if kind == "gpt2":
        hf = transformers.GPT2Tokenizer(vocab=data["model"]["vocab"], merges=_merges(data))
    elif kind == "t5":
        hf = transformers.T5Tokenizer(vocab=[tuple(v) for v in data["model"]["vocab"]], extra_ids=10)
    else:
        hf = transformers.LlamaTokenizer(vocab=data["model"]["vocab"], merges=_merges(data), add_bos_token=True)
    hf.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def hf_tokenizer_folder() -> Callable[[str, Any, Path], Path]:
    """:func:`save_with_transformers`, as a fixture."""
    pytest.importorskip("transformers")
    return save_with_transformers


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environments of the export tests: ``build`` has a PATH of the compiler tools only (no Python), ``run``
    an empty PATH (see ``_export_helpers.tool_paths``)."""
    from _export_helpers import tool_paths  # imported by the tests that use it only

    return tool_paths(tmp_path_factory)
