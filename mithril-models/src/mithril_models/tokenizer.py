"""Tokenizers of Hugging Face checkpoints, through the ``tokenizers`` library: :func:`load_tokenizer`.

``tokenizers`` (the Rust library ``transformers``' fast tokenizers wrap) is an optional dependency:
``pip install "mithril-models[tokenizers]"``. :func:`load_tokenizer` reads a ``tokenizer.json`` (GPT-2's
byte-level BPE, T5's unigram, Llama's BPE with byte fallback, or any other the library reads) and gives
the ids ``transformers`` gives on the same files:

- a **file** is read alone, as ``PreTrainedTokenizerFast(tokenizer_file=path)`` reads it;
- a **folder** is read as ``AutoTokenizer.from_pretrained(folder)`` reads it: ``tokenizer.json`` plus
  ``tokenizer_config.json`` and ``special_tokens_map.json`` when present. Named special tokens (``bos_token``,
  ``eos_token``, ``unk_token``, ``pad_token``, ...) come from them; those that are not yet added tokens of
  ``tokenizer.json`` are added as special tokens (so they are never split); ``padding_side`` and
  ``clean_up_tokenization_spaces`` are honoured (the clean-up, as ``transformers`` 5, only for non-BPE
  models). As in ``transformers`` 5, the special tokens a sequence gets are those of ``tokenizer.json``'s
  post-processor: ``add_bos_token``/``add_eos_token`` in ``tokenizer_config.json`` are ignored. A unigram
  model's scores are read as the family classes (``T5Tokenizer``, ...) read them, with Python's :mod:`json`
  (the two readers can differ in the last bit, which decides near-ties between segmentations).

Without configuration files (a file, or a folder holding only ``tokenizer.json``), ``bos``/``eos``/``unk``/
``pad`` are inferred from the file itself, where ``transformers`` leaves them unset: the special tokens the
post-processor puts before and after a sequence, then special added tokens with the usual spellings
(``<s>``, ``</s>``, ``<|endoftext|>``, ``<unk>``, ``<pad>``, ...). The ids are the same either way.

Example:
    >>> tokenizer = load_tokenizer("gpt2-folder")                                    # doctest: +SKIP
    >>> ids = tokenizer.encode("Hello world")                                         # doctest: +SKIP
    >>> tokenizer.decode(ids)                                                         # doctest: +SKIP
    'Hello world'
    >>> batch = tokenizer.encode_batch(["a", "a b c"], padding_side="left")           # doctest: +SKIP
    >>> batch.input_ids.shape, batch.attention_mask[0].tolist()                       # doctest: +SKIP
    ((2, 3), [0, 0, 1])
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mithril.errors import ArgumentError

__all__ = ["SPECIAL_TOKEN_NAMES", "BatchEncoding", "Tokenizer", "TokenizerError", "load_tokenizer"]

INSTALL = 'pip install "mithril-models[tokenizers]"'

SPECIAL_TOKEN_NAMES: tuple[str, ...] = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
"""The named special tokens of a ``tokenizer_config.json`` (as ``transformers``)."""

_USUAL: dict[str, tuple[str, ...]] = {
    "bos_token": ("<s>", "<|begin_of_text|>", "<bos>", "<|endoftext|>", "<|startoftext|>"),
    "eos_token": ("</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>"),
    "unk_token": ("<unk>", "<|unk|>", "[UNK]", "<|endoftext|>"),
    "pad_token": ("<pad>", "<|pad|>", "[PAD]"),
}
"""Spellings tried, in order, for special tokens that no configuration names (a ``tokenizer.json`` alone)."""

_LEFT_PADDING_CLASSES = {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer", "CodeLlamaTokenizerFast"}
"""Tokenizer classes whose ``padding_side`` defaults to ``"left"`` in ``transformers``."""

_GENERIC_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}
"""``tokenizer_class`` values for which ``transformers`` reads ``tokenizer.json`` as it is; the family classes
(``T5Tokenizer``, ...) rebuild the model from its vocabulary instead (see :func:`_exact_unigram_scores`)."""


class TokenizerError(ArgumentError):
    """A tokenizer folder or file that cannot be read (the message says what was expected and what was found)."""


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:
        raise ImportError(
            f"mithril_models.load_tokenizer needs the 'tokenizers' package, which is not installed ({exc}); "
            f"install it with: {INSTALL}"
        ) from None
    return tokenizers


@dataclass
class BatchEncoding:
    """Token ids of several texts: ``input_ids`` and ``attention_mask`` (1 for tokens, 0 for padding).

    Padded (the default of :meth:`Tokenizer.encode_batch`) both are int64 arrays ``[batch, length]``;
    unpadded, lists of lists. Also readable as a mapping (``batch["input_ids"]``).

    >>> batch = BatchEncoding(np.array([[0, 5, 6]]), np.array([[0, 1, 1]]))
    >>> batch["attention_mask"].tolist(), list(batch.keys())
    ([[0, 1, 1]], ['input_ids', 'attention_mask'])
    """

    input_ids: Any
    attention_mask: Any | None = None

    def keys(self) -> list[str]:
        return ["input_ids"] + (["attention_mask"] if self.attention_mask is not None else [])

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(f"BatchEncoding has no {key!r}; keys: {self.keys()}")
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.input_ids)


def _content(token: Any) -> str | None:
    """A special token given as a string or as a serialised ``AddedToken`` (``{"content": ...}``)."""
    if token is None:
        return None
    if isinstance(token, Mapping):
        content = token.get("content")
        return None if content is None else str(content)
    return str(token)


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"load_tokenizer: cannot read {what} {path}: {exc}") from None
    if not isinstance(data, dict):
        raise TokenizerError(f"load_tokenizer: {what} {path} must hold a JSON object, found {type(data).__name__}")
    return data


class Tokenizer:
    """Text <-> token ids for one checkpoint, over a ``tokenizers.Tokenizer`` (see :func:`load_tokenizer`).

    Attributes:
        backend: the ``tokenizers.Tokenizer`` (its truncation and padding are off: :meth:`encode_batch` pads).
        padding_side: ``"right"`` or ``"left"``, the default of :meth:`encode_batch`.
        special_tokens: named special tokens (``{"eos_token": "</s>", ...}``).
        additional_special_tokens: other special tokens the configuration lists.
        model_max_length: the ``model_max_length`` of ``tokenizer_config.json`` (``None`` when absent).
        clean_up_tokenization_spaces: whether :meth:`decode` removes spaces before punctuation (non-BPE models).

    >>> tokenizer = load_tokenizer("folder")          # doctest: +SKIP
    >>> tokenizer.eos_token, tokenizer.eos_token_id    # doctest: +SKIP
    ('</s>', 2)
    """

    def __init__(
        self,
        backend: Any,
        *,
        special_tokens: Mapping[str, str | None] | None = None,
        additional_special_tokens: Sequence[str] = (),
        padding_side: str = "right",
        clean_up_tokenization_spaces: bool = False,
        model_max_length: int | None = None,
        source: str = "",
    ) -> None:
        self.backend = backend
        self.special_tokens: dict[str, str] = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        self.additional_special_tokens = list(additional_special_tokens)
        self.padding_side = _side(padding_side, "Tokenizer")
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self.model_max_length = model_max_length
        self.source = source

    def __repr__(self) -> str:
        named = ", ".join(f"{k}={v!r}" for k, v in self.special_tokens.items())
        return f"Tokenizer({self.source!r}, vocab_size={len(self)}, {named})"

    # -- vocabulary and special tokens ----------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @property
    def vocab_size(self) -> int:
        """The number of ids, added tokens included (``len(tokenizer)``)."""
        return len(self)

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (``None`` when it is not in the vocabulary)."""
        value = self.backend.token_to_id(token)
        return None if value is None else int(value)

    def id_to_token(self, index: int) -> str | None:
        """The token of id ``index`` (``None`` when out of range)."""
        token = self.backend.id_to_token(int(index))
        return None if token is None else str(token)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str | None]:
        """The tokens of ``ids``."""
        return [self.id_to_token(i) for i in ids]

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text`` (no special tokens added)."""
        return list(self.backend.encode(text, add_special_tokens=False).tokens)

    def _named(self, name: str) -> str | None:
        return self.special_tokens.get(name)

    def _named_id(self, name: str) -> int | None:
        token = self._named(name)
        return None if token is None else self.token_to_id(token)

    bos_token = property(lambda self: self._named("bos_token"), doc="The beginning-of-sequence token (or ``None``).")
    eos_token = property(lambda self: self._named("eos_token"), doc="The end-of-sequence token (or ``None``).")
    unk_token = property(lambda self: self._named("unk_token"), doc="The unknown token (or ``None``).")
    bos_token_id = property(lambda self: self._named_id("bos_token"), doc="The id of :attr:`bos_token`.")
    eos_token_id = property(lambda self: self._named_id("eos_token"), doc="The id of :attr:`eos_token`.")
    unk_token_id = property(lambda self: self._named_id("unk_token"), doc="The id of :attr:`unk_token`.")

    @property
    def pad_token(self) -> str | None:
        """The padding token (or ``None``); settable, e.g. ``tokenizer.pad_token = tokenizer.eos_token``."""
        return self._named("pad_token")

    @pad_token.setter
    def pad_token(self, token: str | None) -> None:
        if token is None:
            self.special_tokens.pop("pad_token", None)
            return
        if self.token_to_id(token) is None:
            raise ArgumentError(f"Tokenizer: pad_token {token!r} is not in the vocabulary")
        self.special_tokens["pad_token"] = token

    @property
    def pad_token_id(self) -> int | None:
        """The id of :attr:`pad_token` (``None`` when there is none)."""
        return self._named_id("pad_token")

    @property
    def all_special_tokens(self) -> list[str]:
        """Named and additional special tokens, each once."""
        return list(dict.fromkeys([*self.special_tokens.values(), *self.additional_special_tokens]))

    @property
    def all_special_ids(self) -> list[int]:
        """The ids of :attr:`all_special_tokens`."""
        ids = (self.token_to_id(t) for t in self.all_special_tokens)
        return [i for i in ids if i is not None]

    # -- encoding -------------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids of ``text``; ``add_special_tokens`` adds what the post-processor adds (``<s>``, ``</s>``).

        >>> tokenizer.encode("Hello world")        # doctest: +SKIP
        [15496, 995]
        """
        if not isinstance(text, str):
            raise ArgumentError(f"Tokenizer.encode: text must be a str, got {type(text).__name__}")
        return list(self.backend.encode(text, add_special_tokens=bool(add_special_tokens)).ids)

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        add_special_tokens: bool = True,
        padding: bool = True,
        padding_side: str | None = None,
        return_attention_mask: bool = True,
        pad_to_multiple_of: int | None = None,
    ) -> BatchEncoding:
        """The ids of several texts, padded to the longest (``transformers``' ``padding=True``).

        Args:
            texts: the texts (a list of str).
            add_special_tokens: as in :meth:`encode`.
            padding: pad to the longest text (``False``: lists of different lengths).
            padding_side: ``"right"`` or ``"left"`` (decoder-only generation wants ``"left"``); default
                :attr:`padding_side`.
            return_attention_mask: also return the mask (1 for tokens, 0 for padding).
            pad_to_multiple_of: round the padded length up to a multiple of it.

        Returns:
            A :class:`BatchEncoding`; padded, int64 arrays ``[len(texts), length]``.

        Raises:
            ArgumentError: padding is needed and the tokenizer has no ``pad_token`` (set one:
                ``tokenizer.pad_token = tokenizer.eos_token``), or a bad argument.

        >>> tokenizer.encode_batch(["a", "a b"], padding_side="left").input_ids    # doctest: +SKIP
        array([[50256,    64], [   64,   275]])
        """
        if isinstance(texts, str) or not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts):
            raise ArgumentError(f"Tokenizer.encode_batch: texts must be a list of str, got {texts!r:.80}")
        side = self.padding_side if padding_side is None else _side(padding_side, "Tokenizer.encode_batch")
        rows = [
            list(e.ids) for e in self.backend.encode_batch(list(texts), add_special_tokens=bool(add_special_tokens))
        ]
        if not padding:
            masks = [[1] * len(r) for r in rows]
            return BatchEncoding(rows, masks if return_attention_mask else None)
        length = max((len(r) for r in rows), default=0)
        if pad_to_multiple_of:
            multiple = int(pad_to_multiple_of)
            length = -(-length // multiple) * multiple
        pad = self.pad_token_id
        if pad is None and any(len(r) != length for r in rows):
            raise ArgumentError(
                "Tokenizer.encode_batch: padding texts of different lengths needs a pad_token and this tokenizer "
                f"has none (special tokens: {self.special_tokens}); set one, e.g. tokenizer.pad_token = "
                "tokenizer.eos_token, or pass padding=False"
            )
        ids = np.full((len(rows), length), 0 if pad is None else pad, dtype=np.int64)
        mask = np.zeros((len(rows), length), dtype=np.int64)
        for i, row in enumerate(rows):
            where = slice(length - len(row), length) if side == "left" else slice(0, len(row))
            ids[i, where] = row
            mask[i, where] = 1
        return BatchEncoding(ids, mask if return_attention_mask else None)

    def __call__(self, texts: str | Sequence[str], **options: Any) -> BatchEncoding:
        """:meth:`encode_batch` (one text is a batch of one)."""
        return self.encode_batch([texts] if isinstance(texts, str) else texts, **options)

    # -- decoding -------------------------------------------------------------------------------------
    def decode(
        self, ids: Any, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None
    ) -> str:
        """The text of ``ids`` (a list or 1-D array); ``skip_special_tokens`` drops special tokens.

        >>> tokenizer.decode([15496, 995])          # doctest: +SKIP
        'Hello world'
        """
        values = np.asarray(ids)
        if values.ndim != 1 or (values.size and values.dtype.kind not in "iu"):
            raise ArgumentError(
                f"Tokenizer.decode: ids must be a list of int token ids, got shape {values.shape}, dtype {values.dtype}"
            )
        text = self.backend.decode([int(i) for i in values], skip_special_tokens=bool(skip_special_tokens))
        clean = (
            self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        if clean and type(self.backend.model).__name__ != "BPE":
            text = _clean_up(text)
        return str(text)

    def decode_batch(self, rows: Any, skip_special_tokens: bool = False) -> list[str]:
        """:meth:`decode` of each row (``[batch, length]`` ids)."""
        return [self.decode(row, skip_special_tokens=skip_special_tokens) for row in rows]

    batch_decode = decode_batch


def _side(value: Any, where: str) -> str:
    if value not in ("left", "right"):
        raise ArgumentError(f"{where}: padding_side must be 'left' or 'right', got {value!r}")
    return str(value)


_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # fmt: skip


def _clean_up(text: str) -> str:
    """Spaces before punctuation and English contractions removed (``clean_up_tokenization_spaces``)."""
    for old, new in _CLEAN_UP:
        text = text.replace(old, new)
    return text


def _template_specials(backend: Any) -> tuple[str | None, str | None]:
    """``(token before $A, token after $A)`` of a ``TemplateProcessing`` post-processor, if any."""
    try:
        state = json.loads(backend.to_str()).get("post_processor") or {}
    except ValueError:
        return None, None
    processors = state.get("processors", [state]) if state.get("type") == "Sequence" else [state]
    for processor in processors:
        if processor.get("type") != "TemplateProcessing":
            continue
        items = processor.get("single") or []
        names = [next(iter(item.values())).get("id") if isinstance(item, dict) else None for item in items]
        kinds = [next(iter(item)) if isinstance(item, dict) else None for item in items]
        if "Sequence" not in kinds:
            continue
        at = kinds.index("Sequence")
        before = [n for n, k in zip(names[:at], kinds[:at], strict=True) if k == "SpecialToken"]
        after = [n for n, k in zip(names[at + 1 :], kinds[at + 1 :], strict=True) if k == "SpecialToken"]
        return (before[0] if before else None), (after[-1] if after else None)
    return None, None


def _inferred_specials(backend: Any) -> dict[str, str]:
    """Named special tokens guessed from a ``tokenizer.json`` alone (see the module docstring)."""
    added = {str(t.content) for t in backend.get_added_tokens_decoder().values() if t.special}
    found: dict[str, str] = {}
    bos, eos = _template_specials(backend)
    if bos is not None:
        found["bos_token"] = bos
    if eos is not None:
        found["eos_token"] = eos
    for name, spellings in _USUAL.items():
        if name not in found:
            match = next((s for s in spellings if s in added), None)
            if match is not None:
                found[name] = match
    return found


def _add_missing(backend: Any, tokens: Sequence[Any], *, special: bool = True) -> None:
    """Add ``tokens`` (strings or ``{"content": ..., ...}``) that are not yet added tokens (as special tokens
    unless ``special=False``), as ``transformers`` does when it loads a folder."""
    tokenizers = _tokenizers()
    present = {str(t.content) for t in backend.get_added_tokens_decoder().values()}
    new = []
    for token in tokens:
        content = _content(token)
        if content is None or content in present:
            continue
        present.add(content)
        options = {
            k: token[k]
            for k in ("single_word", "lstrip", "rstrip", "normalized")
            if isinstance(token, Mapping) and k in token
        }
        options.setdefault("normalized", not special)
        new.append(tokenizers.AddedToken(content, special=special, **options))
    if new and special:
        backend.add_special_tokens(new)
    elif new:
        backend.add_tokens(new)


def _read_by_family_class(folder: Path, config: Mapping[str, Any]) -> bool:
    """Whether ``AutoTokenizer.from_pretrained(folder)`` builds a family class (``T5Tokenizer``, ...): the
    configuration names one, or names none and the folder's ``config.json`` has a ``model_type``."""
    named = config.get("tokenizer_class")
    if named:
        return named not in _GENERIC_CLASSES
    model_config = folder / "config.json"
    return model_config.is_file() and bool(_read_json(model_config, "model configuration").get("model_type"))


def _exact_unigram_scores(backend: Any, file: Path) -> None:
    """Give a unigram model the scores of ``file`` as Python reads them, as ``transformers`` 5's family classes do.

    The ``tokenizers`` library's JSON reader can be one unit in the last place off a correctly rounded score,
    while ``T5Tokenizer`` & co. parse the file with :mod:`json` and build ``Unigram(vocab)`` from those floats.
    Where two segmentations have equal scores up to rounding, that last bit decides between them.
    """
    tokenizers = _tokenizers()
    if not isinstance(backend.model, tokenizers.models.Unigram):
        return
    model = _read_json(file, "tokenizer file").get("model") or {}
    vocab = model.get("vocab")
    if not isinstance(vocab, list) or not all(isinstance(v, (list, tuple)) and len(v) == 2 for v in vocab):
        raise TokenizerError(f"load_tokenizer: the unigram vocab of {file} must be a list of [piece, score] pairs")
    backend.model = tokenizers.models.Unigram(
        [(str(piece), float(score)) for piece, score in vocab],
        unk_id=model.get("unk_id"),
        byte_fallback=bool(model.get("byte_fallback", False)),
    )


def _find_file(path: Path) -> tuple[Path, Path | None]:
    """``(tokenizer.json, its folder or None when a file was given)``, or a clear error."""
    if path.is_file():
        if path.suffix != ".json":
            raise TokenizerError(
                f"load_tokenizer: {path} is not a tokenizer.json file (found a {path.suffix or 'suffix-less'} file); "
                "give a tokenizer.json or the folder holding it"
            )
        return path, None
    if path.is_dir():
        file = path / "tokenizer.json"
        if file.is_file():
            return file, path
        present = sorted(p.name for p in path.iterdir())[:20]
        hint = ""
        if any(name in present for name in ("tokenizer.model", "spiece.model", "vocab.json", "merges.txt")):
            hint = (
                "; only slow-tokenizer files are there: convert them once with transformers "
                "(AutoTokenizer.from_pretrained(folder).save_pretrained(folder) writes tokenizer.json)"
            )
        raise TokenizerError(
            f"load_tokenizer: {path} has no tokenizer.json (found: {', '.join(present) or 'nothing'}){hint}"
        )
    raise TokenizerError(f"load_tokenizer: {path} does not exist (expected a tokenizer.json or a folder holding one)")


def load_tokenizer(path: str | os.PathLike[str], *, padding_side: str | None = None) -> Tokenizer:
    """The tokenizer of a ``tokenizer.json`` file, or of a checkpoint folder (with its configuration files).

    Args:
        path: a ``tokenizer.json`` file, or a folder holding one (and optionally ``tokenizer_config.json`` and
            ``special_tokens_map.json``), as written by ``save_pretrained``.
        padding_side: the default of :meth:`Tokenizer.encode_batch` (otherwise the configuration's, or
            ``"right"``; ``"left"`` for Llama tokenizer classes, as ``transformers``).

    Returns:
        A :class:`Tokenizer` giving the ids ``transformers``' fast tokenizer gives on the same files.

    Raises:
        ImportError: ``tokenizers`` is not installed (the message gives the install command).
        TokenizerError: no ``tokenizer.json`` where expected, or a file that cannot be read.

    >>> tokenizer = load_tokenizer("checkpoints/llama")           # doctest: +SKIP
    >>> tokenizer.encode("Hello"), tokenizer.bos_token_id         # doctest: +SKIP
    ([1, 15043], 1)
    """
    tokenizers = _tokenizers()
    file, folder = _find_file(Path(path))
    try:
        backend = tokenizers.Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust library raises plain Exceptions
        raise TokenizerError(
            f"load_tokenizer: {file} is not a tokenizer.json the tokenizers library reads: {exc}"
        ) from None
    file_padding = backend.padding
    backend.no_padding()
    backend.no_truncation()
    config: dict[str, Any] = {}
    config_file = None if folder is None else folder / "tokenizer_config.json"
    map_file = None if folder is None else folder / "special_tokens_map.json"
    has_config = config_file is not None and config_file.is_file()
    has_map = map_file is not None and map_file.is_file()
    if config_file is not None and has_config:
        config = _read_json(config_file, "tokenizer configuration")
    if folder is not None and _read_by_family_class(folder, config):
        _exact_unigram_scores(backend, file)
    specials: dict[str, Any] = {name: config[name] for name in SPECIAL_TOKEN_NAMES if config.get(name) is not None}
    extra: list[Any] = list(config.get("additional_special_tokens") or [])
    extra_config = config.get("extra_special_tokens")
    extra += list(extra_config.values() if isinstance(extra_config, Mapping) else extra_config or [])
    if map_file is not None and has_map and "added_tokens_decoder" not in config:
        mapping = _read_json(map_file, "special tokens map")
        specials.update({name: mapping[name] for name in SPECIAL_TOKEN_NAMES if mapping.get(name) is not None})
        extra += [
            t
            for t in (mapping.get("additional_special_tokens") or mapping.get("extra_special_tokens") or [])
            if t not in extra
        ]
    if not (has_config or has_map):
        specials = dict(_inferred_specials(backend))
    elif file_padding is not None and "pad_token" not in specials and file_padding.get("pad_token"):
        specials["pad_token"] = file_padding["pad_token"]
    added_decoder = config.get("added_tokens_decoder") or {}
    if not isinstance(added_decoder, Mapping):
        raise TokenizerError(f"load_tokenizer: added_tokens_decoder of {folder} must be a JSON object")
    ordered = [added_decoder[k] for k in sorted(added_decoder, key=lambda k: int(k))]
    _add_missing(backend, [t for t in ordered if isinstance(t, Mapping) and not t.get("special", True)], special=False)
    _add_missing(backend, [t for t in ordered if not isinstance(t, Mapping) or t.get("special", True)])
    _add_missing(backend, [*specials.values(), *extra])
    names = {name: _content(value) for name, value in specials.items()}
    side = padding_side
    if side is None:
        side = config.get("padding_side") or (
            "left" if config.get("tokenizer_class") in _LEFT_PADDING_CLASSES else "right"
        )
    length = config.get("model_max_length")
    return Tokenizer(
        backend,
        special_tokens=names,
        additional_special_tokens=[c for c in (_content(t) for t in extra) if c is not None],
        padding_side=_side(side, "load_tokenizer"),
        clean_up_tokenization_spaces=bool(config.get("clean_up_tokenization_spaces", False)),
        model_max_length=int(length) if isinstance(length, (int, float)) and length < 1e12 else None,
        source=str(folder if folder is not None else file),
    )
