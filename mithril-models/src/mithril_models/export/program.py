"""``export_program``: a GPT-2, Llama/Mistral or ResNet as a standalone C program (``generate`` / ``classify``).

The model is compiled with the C backend (``mithril-backend-c``, the ``edge`` extra:
``pip install "mithril-models[edge]"``; GPT-2 and Llama/Mistral: the one-token KV-cache decode step,
:class:`~mithril_models.gpt.decode.GPTDecodeStep` / :class:`~mithril_models.llama.decode.LlamaDecodeStep`,
and its prefill steps; ResNet: inference on one ``[1, C, H, W]`` image) and exported with ``pm.export``; of
that export the folder keeps the generated model code (``model.c``, ``model.h``; a ``generate`` program's
decode steps share one ``model.c``, made through the C backend's kernel API,
:mod:`mithril_backend_c.kernels`) and adds:

- ``weights.bin``: the parameters and buffers in the mmap-able format of :mod:`.weights` (header with
  every tensor's dtype and shape, a checksum), plus the shapes of the program's data inputs;
- ``program.h``: what the program expects of ``weights.bin`` and how each tensor binds to ``model.h``;
- ``main.c`` (``templates/generate.c`` or ``templates/classify.c``), ``weights.h``, ``cli.h``;
- ``build.sh`` and ``Makefile``: ``cc`` and ``-lm`` only (OpenMP and OpenBLAS when found).

Example:
    >>> from transformers import GPT2Config                                          # doctest: +SKIP
    >>> export_program(GPT2Config(), "model.safetensors", "gpt2-edge")               # doctest: +SKIP
    ExportedProgram('gpt2-edge', program='generate')
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import mithril as ml
import numpy as np
from mithril.errors import ArgumentError, BackendNotAvailableError
from mithril.extend import check_output_directory, escape, write_file_atomically

from ..checkpoints import load_hf
from ..gpt.config import GPTConfig, config_from_hf
from ..gpt.decode import KVDecoder
from ..gpt.layers import build_gpt_head
from ..gpt.model import create_gpt
from ..hf import from_hf_config
from ..kv_cache import DecodeSteps
from ..llama.config import MODEL_TYPES as LLAMA_TYPES
from ..llama.config import LlamaConfig
from ..llama.decode import LlamaKVDecoder
from ..llama.layers import build_llama_head
from ..llama.model import create_llama
from ..resnet import ResNet, resnet
from ..resnet import model as resnet_models
from .steps import (
    Step,
    cache_steps,
    classify_bindings,
    decode_bindings,
    decoder_variants,
    merge_steps,
    step_of,
    tensor_formats,
)
from .weights import INPUT, NAME, QUANTIZED, Tensor, write_weights

__all__ = ["ExportedProgram", "export_program", "resolve_model"]

PROGRAMS = {"gpt": "generate", "llama": "generate", "resnet": "classify"}
DECODERS = ("gpt", "llama")
"""The families exported as ``generate`` programs (KV-cache decode steps)."""
_RESNETS = {f"resnet{depth}" for depth in (18, 34, 50, 101, 152)}


@dataclass(frozen=True)
class ExportedProgram:
    """What :func:`export_program` wrote. Path-like (``os.fspath`` gives the folder).

    ``program``: ``"generate"`` or ``"classify"`` (the binary ``build()`` makes), ``files``: the names
    written, ``weights_bytes``: the size of ``weights.bin``.

    >>> ExportedProgram(Path("out"), "classify", ("main.c",), 64).binary
    PosixPath('out/classify')
    """

    directory: Path
    program: str
    files: tuple[str, ...]
    weights_bytes: int

    def __fspath__(self) -> str:
        return os.fspath(self.directory)

    def __str__(self) -> str:
        return str(self.directory)

    def __repr__(self) -> str:
        return f"ExportedProgram({str(self.directory)!r}, program={self.program!r})"

    @property
    def binary(self) -> Path:
        return self.directory / self.program

    def build(self, cc: str = "cc", cflags: str | None = None, arch: str | None = None) -> Path:
        """Run ``build.sh`` with ``CC=cc`` and, when given, ``CFLAGS=cflags`` (default ``-O3
        -fno-math-errno``) and ``ARCH=arch`` (default ``-march=native`` when not cross-compiling; ``""``
        builds for any CPU of the machine's kind); returns the binary. Raises ``RuntimeError`` with the
        compiler's output when the build fails.

        >>> exported.build()                                # doctest: +SKIP
        PosixPath('out/generate')
        """
        env = {**os.environ, "CC": cc}
        for name, value in (("CFLAGS", cflags), ("ARCH", arch)):
            if value is not None:
                env[name] = value
        run = subprocess.run(["sh", "build.sh"], cwd=self.directory, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"building {self.binary} failed (sh build.sh, exit {run.returncode}):\n{run.stderr}")
        return self.binary


def _c_kernels() -> ModuleType:
    """The C backend's kernel API (:mod:`mithril_backend_c.kernels`), which the programs are made with; a
    ``BackendNotAvailableError`` naming the extra that installs it when it is missing.

    >>> _c_kernels().__name__                                  # doctest: +SKIP
    'mithril_backend_c.kernels'
    """
    try:  # optional dependency (the "edge" extra): only exports need it
        from mithril_backend_c import kernels
    except ImportError as exc:
        raise BackendNotAvailableError(
            f"export_program needs the C backend (mithril-backend-c), which is not installed ({exc}); "
            'install it with: pip install "mithril-models[edge]"'
        ) from exc
    return kernels


def _family_config(config: Any) -> tuple[str, Any]:
    """``("gpt", GPTConfig)``, ``("llama", LlamaConfig)`` or ``("resnet", ResNet model)`` from any accepted
    ``config``.

    >>> _family_config({"family": "mistral", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 16,
    ...                 "num_hidden_layers": 1, "num_attention_heads": 2, "sliding_window": 4})[1].model_type
    'mistral'
    """
    if isinstance(config, GPTConfig):
        return "gpt", config
    if isinstance(config, LlamaConfig):
        return "llama", config
    if isinstance(config, Mapping) and "family" in config:
        options = {k: v for k, v in config.items() if k != "family"}
        family = str(config["family"]).lower()
        if family in ("gpt", "gpt2"):
            return "gpt", create_gpt(**options).config
        if family in LLAMA_TYPES:
            return "llama", create_llama(**{"model_type": family, **options}).config
        if family == "resnet":
            return "resnet", resnet(**options)
        if family in _RESNETS:
            return "resnet", getattr(resnet_models, family)(**options)
        raise ValueError(
            f"export_program: unknown family {config['family']!r}; expected 'gpt2', 'llama', 'mistral', 'resnet' "
            f"or one of {', '.join(sorted(_RESNETS))}"
        )
    model_type = config.get("model_type") if isinstance(config, Mapping) else getattr(config, "model_type", None)
    if model_type == "gpt2":
        return "gpt", config_from_hf(config)
    if model_type in LLAMA_TYPES:
        return "llama", LlamaConfig.from_hf(config)
    if model_type == "resnet":
        model = from_hf_config(config)
        assert isinstance(model, ResNet)
        return "resnet", model
    raise ValueError(
        "export_program: config must be a transformers GPT2Config, LlamaConfig, MistralConfig or ResNetConfig "
        "(model_type 'gpt2', 'llama', 'mistral' or 'resnet'), or a builder's keyword arguments with a 'family' "
        f"key; got {type(config).__name__} with "
        f"model_type {model_type!r}"
    )


def resolve_model(config: Any, *, cache_len: int | None = None, image_size: int = 224) -> tuple[str, Any]:
    """``(family, compiled model)``: the C-backend model the program runs for ``config`` (see
    :func:`export_program`).

    >>> family, pm = resolve_model({"family": "resnet", "block": "basic", "depths": [1], "widths": [8],
    ...                             "stem_width": 8, "num_classes": 3}, image_size=16)
    >>> family, pm.shapes["output"]
    ('resnet', [1, 3])
    """
    _c_kernels()
    family, spec = _family_config(config)
    backend = ml.CBackend(dtype=ml.float32, threads=1)
    if family in DECODERS:
        limit, name = _positions(spec)
        length = limit if cache_len is None else cache_len
        if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= limit:
            raise ValueError(f"export_program: cache_len must be an int in 1..{name}={limit}, got {cache_len!r}")
        return family, _decoder(spec, length).step(False)
    if spec.config.training:
        raise ValueError("export_program: a ResNet in training mode cannot be exported; build it with training=False")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"export_program: image_size must be a positive int, got {image_size!r}")
    shape = [1, spec.config.in_channels, image_size, image_size]
    return family, ml.compile(spec, backend, shapes={"input": shape}, inference=True)


def _positions(config: GPTConfig | LlamaConfig) -> tuple[int, str]:
    """The most positions of a decoder and the name of that field (``block_size``, ``max_position_embeddings``).

    >>> _positions(GPTConfig(bias=True, block_size=8, dims=8, num_heads=2, num_layers=1, vocab_size=8))
    (8, 'block_size')
    """
    if isinstance(config, GPTConfig):
        return config.block_size, "block_size"
    return config.max_position_embeddings, "max_position_embeddings"


def _decoder(config: GPTConfig | LlamaConfig, cache_len: int) -> DecodeSteps:
    """The decode steps of GPT-2 or a Llama-style decoder with caches of ``cache_len`` slots, compiled by the C
    backend for one sequence.

    >>> _decoder(llama_config, 64).step(False).shapes["past_key_0"]       # doctest: +SKIP
    [1, 2, 64, 16]
    """
    backend = ml.CBackend(dtype=ml.float32, threads=1)
    if isinstance(config, GPTConfig):
        return KVDecoder(config, backend, batch=1, cache_len=cache_len)
    return LlamaKVDecoder(config, backend, batch=1, cache_len=cache_len)


def _head(config: GPTConfig | LlamaConfig) -> Any:
    """The LM head alone (``build_gpt_head``/``build_llama_head``), compiled by the C backend for one
    sequence: the prefill steps' last hidden state -> the logits."""
    if isinstance(config, GPTConfig):
        head, dims = build_gpt_head(config), config.dims
    else:
        head, dims = build_llama_head(config), config.hidden_size
    backend = ml.CBackend(dtype=ml.float32, threads=1)
    return ml.compile(head, backend, shapes={"input": [1, dims]}, data_keys={"input"}, inference=True)


def _entry_name(path: str) -> str:
    """A tensor's name in ``weights.bin``: its logical path, or its last ``NAME - 1`` bytes when longer."""
    encoded = path.encode()
    return path if len(encoded) < NAME else encoded[-(NAME - 1) :].decode(errors="ignore")


def _program_h(family: str, manifest: Mapping[str, Any], tensors: list[Tensor], steps: list[Step]) -> str:
    """``program.h``: the tensor table, the binding of weights and step inputs/outputs, the sizes."""
    shapes = {key: spec["shape"] for group in ("inputs", "outputs") for key, spec in manifest[group].items()}
    if family in DECODERS:
        bindings = decode_bindings(shapes, steps)
    else:
        index = next(i for i, t in enumerate(tensors) if t.role == INPUT and t.name == "input")
        bindings = classify_bindings(shapes, index, steps)
    return "\n".join([*_tensor_table(tensors), *bindings, "#endif", ""])


def _tensor_table(tensors: list[Tensor]) -> list[str]:
    """The head of ``program.h``: what the program expects of each tensor of ``weights.bin``, in order."""
    codes = {1: "MTW_F32", 2: "MTW_F64", 3: "MTW_I64", 4: "MTW_Q8_0", 5: "MTW_Q4_0"}
    rows = [
        f"    {{{escape.c_string_literal(t.name)}, {'MTW_INPUT' if t.role == INPUT else 'MTW_WEIGHT'}, "
        f"{codes[t.code]}, {len(t.dims)}, {{{', '.join(map(str, t.dims)) or '0'}}}}},"
        for t in tensors
    ]
    return [
        "/* Generated by mithril_models.export_program: the tensors of weights.bin (in order) and how they bind",
        " * to the entry points of model.h. */",
        "#ifndef MITHRIL_EXPORT_PROGRAM_H",
        "#define MITHRIL_EXPORT_PROGRAM_H",
        f"#define MTP_TENSORS {len(tensors)}",
        "static const mtw_expect mtp_tensors[MTP_TENSORS] = {",
        *rows,
        "};",
        "",
    ]


def _model_files(pm: Any, source: Any) -> tuple[dict[str, Any], list[Tensor], dict[str, str]]:
    """The C backend's export of ``pm`` with the weights of ``source``: its manifest, the tensors of
    ``weights.bin`` (the weights, by logical path, then the data inputs' shapes) and the text of its model
    code (``model.c``, ``model.h``)."""
    params = {key: np.asarray(value) for key, value in load_hf(pm, source).items()}
    with tempfile.TemporaryDirectory(prefix="mithril-export-") as scratch:
        exported = pm.export(Path(scratch) / "c", params)
        manifest = json.loads((exported.directory / "manifest.json").read_text())
        paths = [pm.input_paths.get(w["key"], w["key"]) for w in manifest["weights"]]
        tensors = [
            Tensor(_entry_name(path), np.asarray(params[w["key"]], np.float32))
            for path, w in zip(paths, manifest["weights"], strict=True)
        ]
        tensors += [
            Tensor(key, shape=tuple(spec["shape"]), role=INPUT, dtype=np.dtype(spec["dtype"]))
            for key, spec in manifest["inputs"].items()
        ]
        sources = [f for f in exported.files if f.endswith((".c", ".h")) and f != "main.c"]
        texts = {name: (exported.directory / name).read_text() for name in sources}
    return manifest, tensors, texts


def _quantized(tensors: list[Tensor], formats: list[str]) -> list[Tensor]:
    """``tensors`` (the weights in order, then the inputs) with weight ``i`` block-quantized as ``formats[i]``
    (``""``: kept float32), by :func:`mithril_backend_c.kernels.quantize`."""
    kernels = _c_kernels()
    result = []
    for i, tensor in enumerate(tensors):
        fmt = formats[i] if i < len(formats) else ""
        if fmt and tensor.data is not None:
            tensor = Tensor(tensor.name, kernels.quantize(tensor.data, fmt), shape=tensor.shape, quant=fmt)
        result.append(tensor)
    return result


def _template(name: str) -> str:
    return resources.files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


def export_program(
    config: Any,
    source: Any,
    out_dir: str | Path,
    *,
    cache_len: int | None = None,
    smaller_caches: Sequence[int] | None = None,
    image_size: int = 224,
    quantize: str | None = None,
    prefill_chunk: int = 32,
    overwrite: bool = False,
) -> ExportedProgram:
    """Write a self-contained folder that ``make -C out_dir`` (or ``sh out_dir/build.sh``) builds into
    ``out_dir/generate`` (GPT-2, Llama, Mistral) or ``out_dir/classify`` (ResNet) with ``cc`` and ``-lm``.

    Args:
        config: a ``transformers`` ``GPT2Config``, ``LlamaConfig``, ``MistralConfig`` or ``ResNetConfig``
            (or its ``config.json`` as a dict), a :class:`~mithril_models.gpt.config.GPTConfig` or
            :class:`~mithril_models.llama.LlamaConfig`, or a builder's keyword arguments with a ``"family"``
            key (``"gpt2"`` -> :func:`create_gpt`, ``"llama"``/``"mistral"`` -> :func:`create_llama`,
            ``"resnet"`` -> :func:`resnet`, ``"resnet18"`` ... ``"resnet152"``). A Llama program has the
            model's rotary embeddings (every ``rope_scaling`` type), RMSNorm, SwiGLU, grouped-query
            attention with caches of the key-value heads only, and Mistral's sliding window.
        source: the weights, as for :func:`~mithril_models.load_hf`: a state dict or a ``.safetensors``
            file (Hugging Face or torchvision names).
        out_dir: the folder to write (new or empty unless ``overwrite``; never a symbolic link: pass the
            folder it points to, ``os.path.realpath(out_dir)``, to write there).
        cache_len: GPT-2, Llama: the most KV-cache slots of the program (prompt + new tokens - 1 at most);
            default ``block_size`` (Llama: ``max_position_embeddings``). Memory: ``2 * layers * slots *
            dims`` floats for the slots used (Llama: ``dims`` of the key-value heads).
        smaller_caches: GPT-2, Llama: the cache slots of the smaller decode steps compiled besides the one of
            ``cache_len`` slots (each below ``cache_len``); ``generate`` runs the smallest step whose
            cache holds the prompt and the new tokens, since a step attends and rewrites all its slots.
            Default: 64, 256, 1024, ... (x4) below ``cache_len``; ``()``: one step. The steps share the
            weights and every kernel that does not depend on the slots (the binary grows a few KB each).
        image_size: ResNet: the height and width of the image ``classify`` reads (``[1, C, H, W]``).
        quantize: ``"q8_0"`` or ``"q4_0"``: every weight read only as the weight of a linear layer, an
            embedding or an ungrouped convolution, with rows of whole blocks of 32 values (GPT-2: all its
            matrices and both embeddings; ResNet: the convolutions after the stem and the classifier) is
            stored block-quantized in ggml's layouts (``weights.bin`` about 3.8x / 7x smaller), and the
            program's kernels multiply them with the activations quantized per row to ``q8_0``, as ggml
            does; biases and norms stay float32 (Llama: every projection, the embeddings and the LM head
            are quantized, the RMSNorm scales are not). ``None``: float32 weights.
        prefill_chunk: GPT-2, Llama: the prompt is processed in steps of this many tokens (a compiled prefill
            step per cache size; prompts shorter than it and the tokens after it go one at a time);
            ``1``: token by token.
        overwrite: write into a folder that already holds files (the exported files are replaced: a file
            or symlink of the same name is replaced by the new file, never written through).

    Returns:
        An :class:`ExportedProgram` (``.build()`` runs ``build.sh``).

    >>> from transformers import GPT2Config                                               # doctest: +SKIP
    >>> exported = export_program(GPT2Config(n_layer=2), "model.safetensors", "out")      # doctest: +SKIP
    >>> subprocess.run([exported.build(), "--tokens", "464 3290", "--max-new-tokens", "5"])  # doctest: +SKIP
    """
    directory = Path(out_dir)
    check_output_directory(directory, overwrite, "export_program")
    if quantize is not None and quantize not in QUANTIZED:
        raise ValueError(f"export_program: quantize must be None, 'q8_0' or 'q4_0', got {quantize!r}")
    if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int) or prefill_chunk < 1:
        raise ValueError(f"export_program: prefill_chunk must be a positive int (1: no prefill), got {prefill_chunk!r}")
    family, pm = resolve_model(config, cache_len=cache_len, image_size=image_size)
    manifest, tensors, texts = _model_files(pm, source)
    paths = [pm.input_paths.get(w["key"], w["key"]) for w in manifest["weights"]]
    if family in DECODERS:
        slots = cache_steps(pm.shapes["past_key_0"][2], smaller_caches)
        spec = _family_config(config)[1]
        variants = decoder_variants(lambda n: _decoder(spec, n), slots, prefill_chunk, lambda: _head(spec))
        texts["model.c"], texts["model.h"], steps = merge_steps(_c_kernels(), variants, paths, quantize)
    else:
        kernels = _c_kernels()
        code, functions = kernels.compiled_source(pm, quantize)
        evaluate = next(f for f in functions if f.name == "evaluate")
        steps = [step_of(evaluate, 0, 1, [w["key"] for w in manifest["weights"]])]
        texts["model.c"], texts["model.h"] = kernels.standalone_source(code), kernels.model_header(functions)
    tensors = _quantized(tensors, tensor_formats(steps, paths))
    program = PROGRAMS[family]
    model_sources = " ".join(name for name in texts if name.endswith(".c"))
    texts["program.h"] = _program_h(family, manifest, tensors, steps)
    templates = {"main.c": f"{program}.c", **{name: name for name in ("weights.h", "cli.h", "build.sh", "Makefile")}}
    for name, template in templates.items():
        texts[name] = _template(template).replace("@PROGRAM@", program).replace("@MODEL_SOURCES@", model_sources)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        write_file_atomically(directory / name, text, where="export_program", error=ArgumentError)
    size = write_weights(directory / "weights.bin", tensors)
    return ExportedProgram(directory, program, (*texts, "weights.bin"), size)
