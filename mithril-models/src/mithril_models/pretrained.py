"""``from_pretrained``: a Hugging Face checkpoint folder, compiled for a backend, in one call.

:func:`from_pretrained` reads ``config.json``, finds the family from its ``model_type`` (or
``architectures``): ``gpt2``, ``llama``, ``mistral``, ``t5``, ``clip``, ``resnet``; builds the model(s),
compiles them for the backend, loads the weights (``model.safetensors``, one other ``*.safetensors`` file or
a sharded ``model.safetensors.index.json``; pickle files are never opened) and the tokenizer
(``tokenizer.json``, when present and ``tokenizers`` is installed). It returns a :class:`Pretrained` with:

- ``generate(...)`` for GPT-2, Llama/Mistral (KV-cache decode steps) and T5 (the encoder once, then the
  decoder one token per call with self- and cross-attention caches), through :func:`~mithril_models.generate`;
- ``encode_image(...)``/``encode_text(...)`` for CLIP (the projected, un-normalised features);
- ``classify(...)`` for ResNet.

A name that is not a folder on disk is looked up in the local Hugging Face cache through
``huggingface_hub`` (``snapshot_download(..., local_files_only=True)``) and, unless ``local_files_only``
(or ``HF_HUB_OFFLINE=1``), downloaded when the hub is reachable; only configuration, tokenizer and
safetensors files are fetched.

Example:
    >>> import mithril as ml
    >>> from mithril_models import from_pretrained
    >>> llama = from_pretrained("checkpoints/tiny-llama", ml.TorchBackend())          # doctest: +SKIP
    >>> llama.generate("The compiler", max_new_tokens=12)                              # doctest: +SKIP
    ' turns a logical model into code'
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from mithril.errors import ArgumentError

from .checkpoints.errors import CheckpointError
from .generation import PREFILL_CHUNK, run_generation
from .generation.config import FIELDS, resolve_config
from .generation.prompts import Prompts, parse_prompts

__all__ = ["ARCHITECTURES", "FAMILIES", "Pretrained", "PretrainedError", "from_pretrained", "resolve_checkpoint"]

FAMILIES: dict[str, str] = {
    "gpt2": "gpt2",
    "llama": "llama",
    "mistral": "llama",
    "t5": "t5",
    "clip": "clip",
    "resnet": "resnet",
}
"""``config.json``'s ``model_type`` -> the family that builds it."""

ARCHITECTURES: dict[str, str] = {
    "GPT2LMHeadModel": "gpt2",
    "GPT2Model": "gpt2",
    "LlamaForCausalLM": "llama",
    "LlamaModel": "llama",
    "MistralForCausalLM": "llama",
    "MistralModel": "llama",
    "T5ForConditionalGeneration": "t5",
    "T5Model": "t5",
    "CLIPModel": "clip",
    "ResNetForImageClassification": "resnet",
    "ResNetModel": "resnet",
}
"""``config.json``'s ``architectures`` entries -> family (used when ``model_type`` is missing)."""

_FETCHED = [
    "config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json",
]  # fmt: skip
"""What is read from (or downloaded into) the Hugging Face cache: never pickle files."""

_PICKLES = (
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "tf_model.h5",
    "flax_model.msgpack",
    "model.ckpt.index",
)
_STATIC_LENGTH = 256
"""Sequence length a decoder is compiled for on static-shape backends (C, GGML) when no ``shapes`` are given."""


class PretrainedError(CheckpointError):
    """A checkpoint folder (or cache entry) that cannot be opened; the message says what was expected and found."""


# -- locating the folder ------------------------------------------------------------------------------
def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def resolve_checkpoint(
    name: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    revision: str | None = None,
    local_files_only: bool | None = None,
) -> Path:
    """The folder of checkpoint ``name``: ``name`` itself when it is a folder, else its snapshot in the local
    Hugging Face cache, else (``huggingface_hub`` installed, downloads allowed) a fresh download of its
    configuration, tokenizer and safetensors files.

    Args:
        name: a folder, or a hub name such as ``"gpt2"`` or ``"owner/model"``.
        cache_dir: the Hugging Face cache to use (default: ``huggingface_hub``'s, ``HF_HUB_CACHE``).
        revision: a branch, tag or commit of the hub repository.
        local_files_only: never download (``None``: download unless ``HF_HUB_OFFLINE`` is set).

    Raises:
        PretrainedError: not a folder, not in the cache, and not downloadable (the message says why).

    >>> resolve_checkpoint("checkpoints/gpt2")       # doctest: +SKIP
    PosixPath('checkpoints/gpt2')
    """
    text = os.fspath(name)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise PretrainedError(f"from_pretrained: {path} is a file; expected a checkpoint folder (holding config.json)")
    if _looks_like_path(text) or not text:
        raise PretrainedError(f"from_pretrained: the folder {path} does not exist")
    try:
        import huggingface_hub
    except ImportError:
        raise PretrainedError(
            f"from_pretrained: {text!r} is not a folder on disk; to look it up in the Hugging Face cache or download "
            "it, install huggingface_hub (pip install huggingface_hub), or pass the path of a checkpoint folder"
        ) from None
    options: dict[str, Any] = {"revision": revision, "allow_patterns": _FETCHED}
    if cache_dir is not None:
        options["cache_dir"] = os.fspath(cache_dir)
    try:
        return Path(huggingface_hub.snapshot_download(text, local_files_only=True, **options))
    except Exception as exc:  # not in the cache: LocalEntryNotFoundError, or a malformed name
        cached_error = exc
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    where = os.fspath(cache_dir) if cache_dir is not None else "the default Hugging Face cache"
    if local_files_only or (local_files_only is None and offline):
        raise PretrainedError(
            f"from_pretrained: {text!r} is not a folder on disk and not in {where} ({type(cached_error).__name__}), "
            "and downloads are off (local_files_only=True or HF_HUB_OFFLINE=1)"
        )
    try:
        return Path(huggingface_hub.snapshot_download(text, **options))
    except Exception as exc:
        raise PretrainedError(
            f"from_pretrained: {text!r} is not a folder on disk, not in {where}, and downloading it failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _read_config(folder: Path, name: str = "config.json") -> dict[str, Any]:
    file = folder / name
    if not file.is_file():
        found = ", ".join(sorted(p.name for p in folder.iterdir())[:20]) or "nothing"
        raise PretrainedError(f"from_pretrained: {folder} has no {name} (found: {found})")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise PretrainedError(f"from_pretrained: {file} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise PretrainedError(f"from_pretrained: {file} must hold a JSON object, found {type(config).__name__}")
    return config


def detect_family(config: Mapping[str, Any]) -> str:
    """The family of a ``config.json`` (``"gpt2"``, ``"llama"``, ``"t5"``, ``"clip"``, ``"resnet"``).

    >>> detect_family({"model_type": "mistral"}), detect_family({"architectures": ["GPT2LMHeadModel"]})
    ('llama', 'gpt2')
    """
    model_type = config.get("model_type")
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    architectures = config.get("architectures") or []
    for architecture in architectures if isinstance(architectures, list) else []:
        if architecture in ARCHITECTURES:
            return ARCHITECTURES[architecture]
    raise PretrainedError(
        f"from_pretrained: no Mithril family for model_type {model_type!r} (architectures {architectures!r}); "
        f"supported model types: {', '.join(FAMILIES)}"
    )


def _weights(folder: Path) -> Path:
    """The safetensors file (or sharded index) of ``folder``; pickle-only folders are refused."""
    for name in ("model.safetensors.index.json", "model.safetensors"):
        if (folder / name).is_file():
            return folder / name
    tensors = sorted(folder.glob("*.safetensors"))
    if len(tensors) == 1:
        return tensors[0]
    if len(tensors) > 1:
        raise PretrainedError(
            f"from_pretrained: {folder} holds several .safetensors files ({', '.join(p.name for p in tensors)}) "
            "but no model.safetensors.index.json saying which tensor is where"
        )
    pickles = [name for name in _PICKLES if (folder / name).exists()]
    if pickles:
        raise PretrainedError(
            f"from_pretrained: {folder} has only {', '.join(pickles)}, which are refused (pickle files can run "
            "arbitrary code when loaded); expected model.safetensors or model.safetensors.index.json. Convert "
            "once with transformers: AutoModel.from_pretrained(folder).save_pretrained(folder) (writes safetensors)"
        )
    found = ", ".join(sorted(p.name for p in folder.iterdir())[:20]) or "nothing"
    raise PretrainedError(
        f"from_pretrained: {folder} has no weights: expected model.safetensors or model.safetensors.index.json "
        f"(found: {found})"
    )


# -- the result -------------------------------------------------------------------------------------
@dataclass
class Pretrained:
    """A checkpoint compiled for one backend: what :func:`from_pretrained` returns.

    Attributes:
        path: the checkpoint folder.
        family: ``"gpt2"``, ``"llama"`` (also Mistral), ``"t5"``, ``"clip"`` or ``"resnet"``.
        config: the family's configuration (``GPTConfig``, ``LlamaConfig``, ``T5Settings``, ``CLIPConfig``,
            ``ResNetConfig``).
        hf_config: ``config.json`` as a dict.
        backend: the backend everything is compiled for.
        models: the compiled models by part: ``"model"`` (GPT-2, Llama, ResNet), ``"encoder"`` and
            ``"decoder"`` (T5), ``"image"`` and ``"text"`` (CLIP).
        params: each part's parameters on the backend (same keys as ``models``).
        tokenizer: the :class:`~mithril_models.tokenizer.Tokenizer` of ``tokenizer.json`` (``None`` without one).
        generation_config: ``generation_config.json`` as a dict (empty without one).

    >>> gpt = from_pretrained("gpt2-folder", "numpy")                 # doctest: +SKIP
    >>> gpt.pm.evaluate(gpt.parameters, {"input": ids})["output"]     # doctest: +SKIP
    """

    path: Path
    family: str
    config: Any = field(repr=False)
    hf_config: dict[str, Any] = field(repr=False)
    backend: Any
    models: dict[str, Any] = field(repr=False)
    params: dict[str, dict[str, Any]] = field(repr=False)
    tokenizer: Any = None
    generation_config: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def pm(self) -> Any:
        """The compiled model of a one-part family (GPT-2, Llama, ResNet)."""
        if "model" not in self.models:
            raise ArgumentError(
                f"Pretrained.pm: a {self.family} checkpoint has parts {sorted(self.models)}; use .models[part]"
            )
        return self.models["model"]

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters of :attr:`pm`."""
        if "model" not in self.params:
            raise ArgumentError(
                f"Pretrained.parameters: a {self.family} checkpoint has parts {sorted(self.params)}; use .params[part]"
            )
        return self.params["model"]

    def _token(self, name: str) -> int | None:
        """``name`` (``eos_token_id``, ...) from generation_config.json, config.json, then the tokenizer."""
        for source in (self.generation_config, self.hf_config):
            value = source.get(name)
            if isinstance(value, list):
                value = value[0] if value else None
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return getattr(self.tokenizer, name, None) if self.tokenizer is not None else None

    @property
    def eos_token_id(self) -> int | None:
        """The end-of-sequence id (``generation_config.json``, ``config.json`` or the tokenizer)."""
        return self._token("eos_token_id")

    def _need(self, method: str, families: tuple[str, ...]) -> None:
        if self.family not in families:
            raise ArgumentError(
                f"Pretrained.{method}: not available for a {self.family} checkpoint (only {', '.join(families)})"
            )

    def _require_tokenizer(self, method: str) -> Any:
        if self.tokenizer is None:
            raise ArgumentError(
                f"Pretrained.{method}: text needs a tokenizer and {self.path} has no tokenizer.json (or the tokenizers "
                "package is missing); pass token ids instead"
            )
        return self.tokenizer

    # -- text generation ------------------------------------------------------------------------------
    def generation_defaults(self) -> dict[str, Any]:
        """The checkpoint's generation options: ``generation_config.json``, with the end-of-sequence, padding
        and decoder-start ids completed from ``config.json`` and the tokenizer (as ``transformers``)."""
        defaults = {k: v for k, v in self.generation_config.items() if k in FIELDS and v is not None}
        for name in ("eos_token_id", "pad_token_id", "decoder_start_token_id"):
            if name not in defaults:
                value = self.hf_config.get(name)
                if value is None and self.tokenizer is not None and name != "decoder_start_token_id":
                    value = getattr(self.tokenizer, name, None)
                if value is not None:
                    defaults[name] = value
        return defaults

    def _prompts(self, prompt: Any, attention_mask: Any) -> tuple[Prompts, bool]:
        """``(prompts, is_text)``: texts through the tokenizer (its padding when it has a pad token), ids as
        :func:`~mithril_models.generate` takes them."""
        texts = [prompt] if isinstance(prompt, str) else prompt
        is_text = (
            isinstance(texts, Sequence) and not isinstance(texts, str) and bool(texts)
            and all(isinstance(t, str) for t in texts)
        )  # fmt: skip
        if not is_text:
            return parse_prompts("Pretrained.generate", prompt, attention_mask), False
        tokenizer = self._require_tokenizer("generate")
        padded = tokenizer.pad_token is not None
        batch = tokenizer.encode_batch(list(texts), padding=padded, padding_side="left")
        if padded:
            return parse_prompts("Pretrained.generate", batch.input_ids, batch.attention_mask), True
        return parse_prompts("Pretrained.generate", [list(row) for row in batch.input_ids]), True

    def generate(
        self,
        prompt: Any,
        max_new_tokens: int | None = None,
        *,
        generation_config: Any = None,
        attention_mask: Any = None,
        on_token: Callable[[np.ndarray], object] | None = None,
        prefill_chunk: int = PREFILL_CHUNK,
        **options: Any,
    ) -> Any:
        """Continue ``prompt`` (GPT-2, Llama, Mistral, T5) with :func:`~mithril_models.generate`.

        Greedy by default, as ``transformers``. The checkpoint's ``generation_config.json`` (and the ids of
        ``config.json`` and the tokenizer) give the defaults, so generation stops at its end-of-sequence
        id as ``transformers``' does; ``generation_config`` and keyword ``options`` (``GenerationConfig``
        names: ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``repetition_penalty``, ``seed``,
        ``num_beams``, ``length_penalty``, ``early_stopping``, ``eos_token_id``, ``pad_token_id``,
        ``min_new_tokens``, ...) override them; an option given as ``None`` drops the checkpoint's value
        (``eos_token_id=None``: no end-of-sequence stop).

        Args:
            prompt: a text, a list of texts (tokenized with :attr:`tokenizer`, padded on the left), or
                token ids (a list, a list of lists of any lengths, an int array ``[B, P]`` with an optional
                ``attention_mask``).
            max_new_tokens: the most tokens to generate (default: ``generation_config.json``'s, else 20).
            on_token: called with each new column of ids ``[B]`` as soon as it is chosen (streaming).
            prefill_chunk: the most prompt tokens one compiled prefill call processes.

        Returns:
            For a text, the generated text (special tokens dropped, cut at the end-of-sequence token); for a
            list of texts, a list of them; for ids, the new ids ``[B, n]`` (int64, ``pad_token_id`` after a
            row's end-of-sequence id).

        >>> llama.generate("Once upon a time", max_new_tokens=8)           # doctest: +SKIP
        ' there was a compiler that'
        >>> llama.generate(["Hi", "Once upon a time"], num_beams=4)         # doctest: +SKIP
        """
        self._need("generate", ("gpt2", "llama", "t5"))
        unknown = sorted(set(options) - set(FIELDS))
        if unknown:
            raise ArgumentError(
                f"Pretrained.generate: unknown option {unknown[0]!r}; accepted: {', '.join(FIELDS)}, "
                "generation_config, attention_mask, on_token, prefill_chunk"
            )
        cleared = {name for name, value in options.items() if value is None}  # eos_token_id=None: no stop id
        defaults = {k: v for k, v in self.generation_defaults().items() if k not in cleared}
        config = resolve_config(
            "Pretrained.generate", generation_config, {**options, "max_new_tokens": max_new_tokens}, defaults
        )
        prompts, is_text = self._prompts(prompt, attention_mask)
        if self.family == "t5":
            pm, params = self.models["decoder"], self.params["decoder"]
            extra: dict[str, Any] = {"encoder": self.models["encoder"], "encoder_params": self.params["encoder"]}
        else:
            pm, params, extra = self.pm, self.parameters, {}
        new = run_generation(
            "Pretrained.generate", pm, params, prompts, config, on_token=on_token, prefill_chunk=prefill_chunk,
            **extra,
        )  # fmt: skip
        if not is_text:
            return new
        decoded = [self._text(row, config.eos_ids) for row in new]
        return decoded[0] if isinstance(prompt, str) else decoded

    def _text(self, ids: np.ndarray, eos: tuple[int, ...]) -> str:
        row = [int(i) for i in ids]
        ends = [row.index(e) for e in eos if e in row]
        if ends:
            row = row[: min(ends)]
        return str(self.tokenizer.decode(row, skip_special_tokens=True))

    # -- CLIP -----------------------------------------------------------------------------------------
    def encode_image(self, images: Any) -> np.ndarray:
        """CLIP image features ``[N, embed_dim]`` (projected, not normalised: ``get_image_features``) of
        ``images`` ``[N, C, R, R]`` (already resized and normalised)."""
        self._need("encode_image", ("clip",))
        pixels = np.asarray(images, dtype=np.float64)
        out = self.models["image"].evaluate(self.params["image"], {"image": self.backend.array(pixels)})["output"]
        return np.asarray(self.backend.to_numpy(out))

    def encode_text(self, text: Any) -> np.ndarray:
        """CLIP text features ``[N, embed_dim]`` (``get_text_features``) of texts (tokenized with
        :attr:`tokenizer`, padded on the right) or token ids ``[N, T]``."""
        self._need("encode_text", ("clip",))
        if isinstance(text, str) or (isinstance(text, Sequence) and text and all(isinstance(t, str) for t in text)):
            tokenizer = self._require_tokenizer("encode_text")
            if tokenizer.pad_token is None and tokenizer.eos_token is not None:
                tokenizer.pad_token = tokenizer.eos_token
            ids = tokenizer.encode_batch(
                [text] if isinstance(text, str) else list(text), padding_side="right"
            ).input_ids
        else:
            ids = np.asarray(text, dtype=np.int64)
            ids = ids[None] if ids.ndim == 1 else ids
        out = self.models["text"].evaluate(self.params["text"], {"text": self.backend.array(ids, "int")})["output"]
        return np.asarray(self.backend.to_numpy(out))

    # -- ResNet ---------------------------------------------------------------------------------------
    def classify(self, images: Any, top_k: int | None = None) -> Any:
        """ResNet logits ``[N, num_classes]`` of ``images`` ``[N, C, H, W]``; with ``top_k``, for each image
        the ``top_k`` most likely ``(label, probability)`` pairs (labels from ``config.json``'s ``id2label``)."""
        self._need("classify", ("resnet",))
        pixels = np.asarray(images, dtype=np.float64)
        logits = np.asarray(
            self.backend.to_numpy(self.pm.evaluate(self.parameters, {"input": self.backend.array(pixels)})["output"])
        )
        if top_k is None:
            return logits
        labels = self.hf_config.get("id2label") or {}
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs = shifted / shifted.sum(axis=-1, keepdims=True)
        order = np.argsort(-probs, axis=-1)[:, : int(top_k)]
        return [
            [(str(labels.get(str(i), labels.get(i, i))), float(p[i])) for i in row]
            for p, row in zip(probs, order, strict=True)
        ]


# -- building and compiling ----------------------------------------------------------------------------
def _backend(backend: Any, dtype: Any) -> Any:
    import mithril as ml
    from mithril.extend import available_backends, backend_class

    if isinstance(backend, str):
        names = sorted(b for b in available_backends() if b != "*")
        if backend not in names:
            raise ArgumentError(f"from_pretrained: backend {backend!r} is not installed; installed: {', '.join(names)}")
        return backend_class(backend)(dtype=ml.float32 if dtype is None else dtype)
    if not hasattr(backend, "codegen") or not hasattr(backend, "array"):
        raise ArgumentError(
            f"from_pretrained: backend must be a Mithril backend or its name ('torch', ...), got {backend!r}"
        )
    if dtype is not None and getattr(backend, "dtype", dtype) != dtype:
        raise ArgumentError(
            f"from_pretrained: dtype={dtype!r} differs from the backend's dtype {backend.dtype!r}; create the backend "
            "with that dtype, or pass the backend's name"
        )
    return backend


def _compile(model: Any, backend: Any, shapes: Any, data_keys: set[str], options: Mapping[str, Any]) -> Any:
    import mithril as ml

    return ml.compile(model, backend, shapes=shapes, data_keys=data_keys, **options)


def _decoder_shapes(backend: Any, shapes: Any, max_length: int) -> Any:
    if shapes is not None or backend.codegen == "python":
        return shapes
    return {"input": [1, min(max_length, _STATIC_LENGTH)]}


def _t5_shapes(backend: Any, shapes: Mapping[str, Any] | None, d_model: int) -> tuple[Any, Any]:
    """``(encoder shapes, decoder shapes)`` of a T5 checkpoint: ``shapes`` for the encoder and free shapes
    for the decoder on the Python backends; on static-shape backends (C, GGML) the encoder's ``input``
    (``shapes["input"]``, default ``[1, 256]``) and a decoder of as many tokens reading as many states.

    >>> from types import SimpleNamespace
    >>> _t5_shapes(SimpleNamespace(codegen="c"), None, 32)
    ({'input': [1, 256]}, {'input': [1, 256], 'memory': [1, 256, 32]})
    """
    if backend.codegen == "python":
        return shapes, None
    tokens = list((shapes or {}).get("input") or [1, _STATIC_LENGTH])
    return {**(shapes or {}), "input": tokens}, {"input": tokens, "memory": [*tokens, d_model]}


def _load_tokenizer(folder: Path) -> Any:
    if not (folder / "tokenizer.json").is_file():
        return None
    try:
        from .tokenizer import load_tokenizer

        return load_tokenizer(folder)
    except ImportError:
        import warnings

        warnings.warn(
            f"from_pretrained: {folder} has a tokenizer.json but the tokenizers package is missing, so no tokenizer "
            'is loaded (pip install "mithril-models[tokenizers]")',
            stacklevel=3,
        )
        return None


_Parts = dict[str, tuple[Any, Any, set[str]]]
"""Part name -> (logical model, ``ml.compile`` shapes, data keys)."""


def _parts(family: str, hf_config: Mapping[str, Any], backend: Any, shapes: Any) -> tuple[_Parts, Any]:
    """The logical models :func:`from_pretrained` compiles for ``family`` (see :data:`_Parts`), and the
    family's configuration (``GPTConfig``, ``LlamaConfig``, ``T5Settings``, ``CLIPConfig``, ``ResNetConfig``).

    >>> from types import SimpleNamespace
    >>> sizes = {"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
    ...          "num_attention_heads": 2}
    >>> parts, config = _parts("llama", sizes, SimpleNamespace(codegen="python"), None)
    >>> sorted(parts), config.head_dim
    (['model'], 8)
    """
    parts: _Parts = {}
    if family == "gpt2":
        from .gpt.model import from_hf_config as gpt_model

        gpt = gpt_model(hf_config)
        parts["model"] = (gpt, _decoder_shapes(backend, shapes, gpt.config.block_size), {"input"})
    elif family == "llama":
        from .llama.model import from_hf_config as llama_model

        llama = llama_model(hf_config)
        parts["model"] = (llama, _decoder_shapes(backend, shapes, llama.config.max_position_embeddings), {"input"})
    elif family == "t5":
        from .t5.model import T5Decoder, T5Encoder

        encoder = T5Encoder(hf_config)
        encoder_shapes, decoder_shapes = _t5_shapes(backend, shapes, encoder.settings.d_model)
        parts["encoder"] = (encoder, encoder_shapes, {"input"})
        parts["decoder"] = (T5Decoder(hf_config), decoder_shapes, {"input", "memory"})
    elif family == "clip":
        from .clip_family.hf import from_hf_config as clip_model
        from .clip_family.text import EncodeText
        from .clip_family.vision import EncodeImage

        full = clip_model(hf_config)
        image_shapes = {"image": shapes["image"]} if shapes and "image" in shapes else None
        text_shapes = {"text": shapes["text"]} if shapes and "text" in shapes else None
        parts["image"] = (EncodeImage(full.config.vision), image_shapes, {"image"})
        parts["text"] = (EncodeText(full.config.text), text_shapes, {"text"})
    else:  # resnet
        from .resnet import from_hf_config as resnet_model

        parts["model"] = (resnet_model(hf_config), shapes, {"input"})
    if family == "t5":
        return parts, parts["encoder"][0].settings
    if family == "clip":
        return parts, full.config
    return parts, getattr(parts["model"][0], "config", None)


def from_pretrained(
    path: str | os.PathLike[str],
    backend: Any,
    *,
    dtype: Any = None,
    shapes: Mapping[str, Any] | None = None,
    tokenizer: bool = True,
    strict: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    revision: str | None = None,
    local_files_only: bool | None = None,
    **compile_options: Any,
) -> Pretrained:
    """Open a Hugging Face checkpoint folder (or hub name) and compile it for ``backend``.

    Args:
        path: a folder written by ``save_pretrained`` (``config.json`` and safetensors weights), or a hub
            name found in the local Hugging Face cache (downloaded when allowed; see :func:`resolve_checkpoint`).
        backend: a Mithril backend (``ml.TorchBackend()``) or an installed backend's name (``"torch"``).
        dtype: with a backend name, the dtype to create it with (default float32); with a backend, it must be
            the backend's dtype.
        shapes: ``ml.compile``'s ``shapes`` for the main model (key ``input``; CLIP: ``image``/``text``;
            T5: the encoder's ``input``). Static-shape backends (C, GGML) need them for ResNet and CLIP;
            decoders default to ``[1, 256]`` there (T5: the encoder's tokens, and a decoder of as many
            tokens reading as many states; ``generate`` compiles its own steps for each prompt length).
        tokenizer: load ``tokenizer.json`` when present.
        strict: ``load_hf``'s ``strict`` (every tensor must fit).
        cache_dir, revision, local_files_only: where and what to look up when ``path`` is not a folder.
        compile_options: more ``ml.compile`` options (``jit``, ``use_short_namings``, ...).

    Returns:
        A :class:`Pretrained` (models, parameters, configuration, tokenizer; ``generate``, ``encode_image``,
        ``encode_text``, ``classify``).

    Raises:
        PretrainedError: no such folder or cache entry, no ``config.json``, an unknown ``model_type``, no
            safetensors weights (pickle files are refused).
        CheckpointError: weights that do not fit the configuration (every missing, unexpected or mis-shaped
            tensor listed).

    >>> gpt = from_pretrained("checkpoints/gpt2", "torch")           # doctest: +SKIP
    >>> gpt.generate("Hello, I am", max_new_tokens=5)                # doctest: +SKIP
    """
    from .checkpoints import load_hf

    folder = resolve_checkpoint(path, cache_dir=cache_dir, revision=revision, local_files_only=local_files_only)
    hf_config = _read_config(folder)
    generation_config = (
        _read_config(folder, "generation_config.json") if (folder / "generation_config.json").is_file() else {}
    )
    family = detect_family(hf_config)
    weights = _weights(folder)
    backend = _backend(backend, dtype)
    parts, config = _parts(family, hf_config, backend, shapes)
    models: dict[str, Any] = {}
    params: dict[str, dict[str, Any]] = {}
    for part, (model, part_shapes, data_keys) in parts.items():
        models[part] = pm = _compile(model, backend, part_shapes, data_keys, compile_options)
        params[part] = load_hf(pm, weights, strict=strict)
    return Pretrained(
        path=folder,
        family=family,
        config=config,
        hf_config=hf_config,
        backend=backend,
        models=models,
        params=params,
        tokenizer=_load_tokenizer(folder) if tokenizer else None,
        generation_config=generation_config,
    )
