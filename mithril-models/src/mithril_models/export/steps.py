"""The entry points of an exported program and their part of ``program.h``.

A ``classify`` program has one entry point (``mithril_evaluate``). A ``generate`` program has, for each
cache size (``slots``), a one-token decode step (``mithril_slots<S>_evaluate``) and, unless the prompt
is fed token by token, a prefill step of ``tokens`` tokens (``mithril_slots<S>_chunk<T>_evaluate``, the
chunk step of :mod:`mithril_models.kv_cache`, built without the LM head: it returns the last position's
final hidden state) and one LM head (``mithril_head_evaluate``) that turns the last chunk's hidden state
into logits: the prompt runs in chunks of ``T`` tokens, the last one overlapping the one before so that
it ends at the prompt's last token, and only that chunk's logits are computed. All of them share one ``model.c``
(kernels and constants named by the hash of their text, so the steps share every weight product's
kernel of the same shape) and the weights of ``weights.bin``.

Example:
    >>> cache_steps(1024, None), cache_steps(16, [8, 4])
    ([64, 256, 1024], [4, 8, 16])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from ..kv_cache import StepShape, cache_names

__all__ = [
    "Step",
    "cache_steps",
    "classify_bindings",
    "decode_bindings",
    "decoder_variants",
    "merge_steps",
    "tensor_formats",
]


@dataclass(frozen=True)
class Step:
    """One compiled entry point of the program: ``symbol`` (``mithril_evaluate``, or
    ``mithril_slots<S>[_chunk<T>]_evaluate`` for a decode step with ``slots`` cache slots and ``tokens``
    tokens, ``mithril_head_evaluate`` for the LM head: ``slots`` and ``tokens`` 0), ``fields``: key ->
    field of its argument struct, ``weights``: its keys of the tensors of ``weights.bin``, in order
    (``None`` for a tensor it does not read); ``quant``: key -> block format of the weights it reads
    quantized."""

    slots: int
    symbol: str
    fields: dict[str, str]
    weights: list[str | None]
    tokens: int = 1
    quant: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # key -> shape of its field

    def field(self, key: str) -> str:
        if key not in self.fields:
            raise RuntimeError(
                f"export_program: {self.symbol}_args has no field for {key!r} (fields: {sorted(self.fields)})"
            )
        return self.fields[key]

    def bind_weights(self) -> list[str]:
        return [f"    a->{self.field(key)} = t[{i}];" for i, key in enumerate(self.weights) if key is not None]

    def weight_formats(self) -> list[str | None]:
        """The block format of each tensor of ``weights.bin`` this step reads (``""``: float; ``None``: a
        tensor it does not read)."""
        return [None if key is None else self.quant.get(key, "") for key in self.weights]


def step_of(function: Any, slots: int, tokens: int, weights: list[str | None]) -> Step:
    """The :class:`Step` of entry point ``function`` (a C backend ``CFunction``).

    >>> step_of(function, 64, 1, ["transformer.wte.weight"]).symbol       # doctest: +SKIP
    'mithril_slots64_evaluate'
    """
    fields = {f.key: f.name for f in function.fields}
    quant = {f.key: f.quant for f in function.inputs if f.quant}
    shapes = {f.key: tuple(f.shape) for f in function.fields}
    return Step(slots, function.symbol, fields, weights, tokens, quant, shapes)


def cache_steps(cache_len: int, smaller: Sequence[int] | None) -> list[int]:
    """The cache slots of the decode steps of a ``generate`` export, ascending, ``cache_len`` last.

    >>> cache_steps(1024, None), cache_steps(16, None), cache_steps(16, [8, 4])
    ([64, 256, 1024], [16], [4, 8, 16])
    """
    if smaller is None:
        sizes = [64 * 4**i for i in range(8) if 64 * 4**i < cache_len]
    else:
        sizes = list(smaller)
        bad = [x for x in sizes if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x < cache_len]
        if bad:
            raise ValueError(
                f"export_program: smaller_caches must be ints in 1..{cache_len - 1} (below cache_len={cache_len}), "
                f"got {bad}"
            )
    return [*sorted(set(sizes)), cache_len]


def decoder_variants(
    decoder: Any, slots: Sequence[int], chunk: int, head: Callable[[], Any]
) -> list[tuple[int, int, Any]]:
    """``(slots, tokens, compiled step)`` of every entry point of a ``generate`` program: per cache size the
    one-token step and, when ``chunk > 1``, the prefill step of ``min(chunk, slots)`` tokens without the LM
    head, and then the LM head once (``(0, 0, head())``; ``tokens`` 1 are decode steps). ``decoder(slots)``:
    the :class:`~mithril_models.kv_cache.DecodeSteps` of a cache size (GPT-2's
    :class:`~mithril_models.gpt.decode.KVDecoder`, :class:`~mithril_models.llama.LlamaKVDecoder`);
    ``head()``: the compiled :func:`~mithril_models.kv_cache.lm_head`.

    >>> [(s, t) for s, t, _ in decoder_variants(decoder, [64, 256], 32, head)]    # doctest: +SKIP
    [(64, 1), (64, 32), (256, 1), (256, 32), (0, 0)]
    """
    variants = []
    for size in slots:
        steps = decoder(size)
        variants.append((size, 1, steps.step(False)))
        if chunk > 1:
            tokens = min(chunk, size)
            variants.append((size, tokens, steps.compiled(StepShape(1, size, tokens=tokens, head=False))))
    if chunk > 1:
        variants.append((0, 0, head()))
    return variants


def merge_steps(
    kernels: ModuleType, variants: Sequence[tuple[int, int, Any]], weights: list[str], quantize: str | None
) -> tuple[str, str, list[Step]]:
    """``model.c`` and ``model.h`` holding every step of ``variants`` (``(slots, tokens, compiled step)``):
    the runtime once, each distinct kernel and constant once, one entry point per step; ``weights``: the
    logical paths of the tensors of ``weights.bin``; ``quantize``: the block format of the weights that
    can be quantized (``None``: float32). ``kernels``: :mod:`mithril_backend_c.kernels`.

    >>> model_c, model_h, steps = merge_steps(kernels, variants, paths, "q8_0")   # doctest: +SKIP
    >>> steps[1].symbol, steps[1].tokens                                          # doctest: +SKIP
    ('mithril_slots64_chunk32_evaluate', 32)
    """
    sources, result = [], []
    for slots, tokens, step in variants:
        code, functions = kernels.compiled_source(step, quantize)
        if len(functions) != 1:
            raise RuntimeError(
                f"export_program: a decode step compiles to one entry point, got {[f.name for f in functions]}"
            )
        name = {0: "head_evaluate", 1: f"slots{slots}_evaluate"}.get(tokens, f"slots{slots}_chunk{tokens}_evaluate")
        renamed = code.renamed({functions[0].name: name})
        sources.append(renamed)
        (function,) = [entry.function for entry in renamed.entries]
        by_path = {path: key for key, path in step.input_paths.items()}
        result.append(step_of(function, slots, tokens, [by_path.get(path) for path in weights]))
    merged = kernels.merge_sources(sources, header=sources[-1].header)
    functions = [entry.function for entry in merged.entries]
    return kernels.standalone_source(merged), kernels.model_header(functions), result


def tensor_formats(steps: Sequence[Step], paths: Sequence[str]) -> list[str]:
    """The block format of each tensor of ``weights.bin`` (``""``: float32; ``paths``: their names, for the
    errors): the one format that every step reading it reads it in. A tensor that no step reads, or that
    two steps read in different formats, is an error naming it.

    >>> tensor_formats(steps, ["transformer.wte.weight", "transformer.ln_f.bias"])   # doctest: +SKIP
    ['q8_0', '']
    """
    read = [step.weight_formats() for step in steps]
    result = []
    for i, path in enumerate(paths):
        formats = {fmt for step_formats in read if (fmt := step_formats[i]) is not None}
        if not formats:
            raise RuntimeError(f"export_program: no step of the program reads the tensor {path}")
        if len(formats) > 1:
            raise RuntimeError(f"export_program: the steps of the program read {path} in different formats {formats}")
        result.append(formats.pop())
    return result


def classify_bindings(shapes: Mapping[str, Any], input_index: int, steps: list[Step]) -> list[str]:
    """``classify``'s bindings: the weights, the image and the logits of its one entry point.

    >>> classify_bindings({"input": [1, 3, 8, 8], "output": [1, 10]}, 5, steps)[-4]   # doctest: +SKIP
    'static void mtp_bind_io(mithril_evaluate_args *a, const float *image, float *logits) {'
    """
    (step,) = steps
    return [
        "static void mtp_bind_weights(mithril_evaluate_args *a, const void *const *t) {",
        *step.bind_weights(),
        "}",
        f"#define MTP_INPUT_INDEX {input_index}",
        f"#define MTP_INPUT_ELEMS {int(np.prod(shapes['input']))}",
        f"#define MTP_CLASSES {int(np.prod(shapes['output']))}",
        "static void mtp_bind_io(mithril_evaluate_args *a, const float *image, float *logits) {",
        f"    a->{step.field('input')} = image;",
        f"    a->{step.field('output')} = logits;",
        "}",
    ]


def decode_bindings(shapes: Mapping[str, Any], steps: list[Step]) -> list[str]:
    """``generate``'s sizes, the dispatch to its decode and prefill steps and the binding of their
    arguments (``mtp_bind_step``, ``mtp_bind_chunk``).

    >>> [line for line in decode_bindings(shapes, steps) if "MTP_CHUNK" in line][0][:20]   # doctest: +SKIP
    '#define MTP_CHUNK 32'
    """
    caches = cache_names(len([k for k in shapes if k.startswith("past_key_")]))
    _, heads, length, head_dim = shapes[caches[0][0]]
    decode = [s for s in steps if s.tokens == 1]
    chunks = [s for s in steps if s.tokens > 1]
    lm_heads = [s for s in steps if s.tokens == 0]
    if chunks and [s.slots for s in chunks] != [s.slots for s in decode]:
        raise RuntimeError("export_program: every cache size needs a decode and a prefill step")
    if len(lm_heads) != (1 if chunks else 0):
        raise RuntimeError("export_program: prefill steps need one LM head, and only they")
    lines = [
        f"#define MTP_VOCAB {shapes['output'][-1]}",
        f"#define MTP_CACHE_LEN {length} /* the cache slots of the largest step */",
        f"#define MTP_CACHES {len(caches)}",
        f"#define MTP_SLOT_ELEMS {heads * head_dim} /* floats of one slot of one cache */",
        f"#define MTP_CHUNK {max((s.tokens for s in chunks), default=0)} /* most prompt tokens per prefill step "
        "(0: token by token) */",
        "/* The decode steps, by cache slots: the program runs the smallest that holds the prompt and the new",
        " * tokens (the work of a step grows with its slots: every slot is attended). */",
        f"#define MTP_STEPS {len(decode)}",
        f"static const long mtp_step_slots[MTP_STEPS] = {{{', '.join(str(step.slots) for step in decode)}}};",
        *_step_dispatch(decode, "mtp", "s"),
    ]
    if chunks:
        lines += [
            f"static const long mtp_chunk_tokens[MTP_STEPS] = {{{', '.join(str(s.tokens) for s in chunks)}}};",
            *_step_dispatch(chunks, "mtp_chunk", "c"),
        ]
    lines += [
        "/* The caches are read and written in place: each present_* output aliases its past_* input (a step",
        " * writes only its own slots, row by row, and leaves the others as they are). */",
        *_bind_function("mtp_bind_step", "mtp_args", "s", decode, caches, "token"),
    ]
    if chunks:
        lines += _bind_function("mtp_bind_chunk", "mtp_chunk_args", "c", chunks, caches, "tokens")
        lines += _head_binding(lm_heads[0])
    return lines


def _head_binding(head: Step) -> list[str]:
    """The LM head's size, dispatch (:func:`_step_dispatch`, one step) and binding: the prefill steps return
    the last position's hidden state (``MTP_HIDDEN`` floats) and ``mtp_bind_head`` points the head at it,
    the weights and the logits."""
    return [
        f"#define MTP_HIDDEN {int(np.prod(head.shapes['input']))} /* floats of a prefill step's hidden state */",
        *_step_dispatch([head], "mtp_head", "h"),
        "static void mtp_bind_head(mtp_head_args *u, const void *const *t, const float *hidden, float *logits,",
        "                          void *workspace, int64_t *error) {",
        f"    {head.symbol}_args *a = &u->h0;",
        *head.bind_weights(),
        f"    a->{head.field('input')} = hidden;",
        f"    a->{head.field('output')} = logits;",
        "    a->workspace = workspace;",
        "    a->error = error;",
        "}",
    ]


def _bind_function(
    name: str, union: str, member: str, steps: list[Step], caches: list[tuple[str, str]], tokens: str
) -> list[str]:
    """``name(u, step, weights, tokens, position, caches, logits, workspace, error)``: points step
    ``step``'s argument struct at the weights, the token ids (parameter ``tokens``), the position of the
    first, the caches (in place), the logits and the workspace."""
    lines = [
        f"static void {name}({union} *u, int step, const void *const *t, const int64_t *{tokens}, "
        "const int64_t *position,",
        "                          float *const *caches, float *logits, void *workspace, int64_t *error) {",
    ]
    for i, step in enumerate(steps):
        lines += [
            f"    if (step == {i}) {{",
            f"        {step.symbol}_args *a = &u->{member}{i};",
            *(f"    {line}" for line in step.bind_weights()),
            f"        a->{step.field('input')} = {tokens};",
            f"        a->{step.field('positions')} = position;",
            *(
                f"        a->{step.field(past)} = caches[{c}];\n        a->{step.field(present)} = caches[{c}];"
                for c, (past, present) in enumerate(caches)
            ),
            f"        a->{step.field('output')} = logits;",
            "        a->workspace = workspace;",
            "        a->error = error;",
            "    }",
        ]
    return [*lines, "}"]


def _step_dispatch(steps: list[Step], prefix: str, member: str) -> list[str]:
    """The steps' argument structs in one union (``<prefix>_args``) and the functions that pick a step's
    workspace size, entry point and check-site description (``<prefix>_workspace_size`` ...)."""
    last = len(steps) - 1
    lines = [
        "typedef union {",
        *(f"    {step.symbol}_args {member}{i};" for i, step in enumerate(steps)),
        f"}} {prefix}_args;",
        "",
    ]
    for result, name, params, call in (
        ("size_t", f"{prefix}_workspace_size", "int step", "{symbol}_workspace_size()"),
        ("int", f"{prefix}_evaluate", f"const {prefix}_args *u, int step, int threads",
         "{symbol}(&u->" + member + "{i}, threads)"),
        ("const char *", f"{prefix}_check_site", "int step, long site", "{symbol}_check_site(site)"),
    ):  # fmt: skip
        lines += [
            f"static {result}{'' if result.endswith('*') else ' '}{name}({params}) {{",
            "    (void)step; /* unused when there is one step */",
            *(f"    if (step == {i}) return {call.format(symbol=s.symbol, i=i)};" for i, s in enumerate(steps[:-1])),
            f"    return {call.format(symbol=steps[-1].symbol, i=last)};",
            "}",
            "",
        ]
    return lines
