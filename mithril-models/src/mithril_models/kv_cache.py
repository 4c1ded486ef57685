"""The decoder-with-KV-cache piece every cached decoder uses (GPT-2, Llama/Mistral, the T5 decoder): the shape
of a decode step (:class:`StepShape`), the positions of its tokens (:func:`step_positions`), the slot
tensors it computes once (:func:`slot_tensors`), attention over the cache (:func:`cached_attention`), the
step as a family model (:class:`DecodeStepModel`) and the compiled steps of one model configuration on one
backend (:class:`DecodeSteps`).

A decode step keeps the keys and values of every layer in caches of static shape ``[batch, heads,
cache_len, head_dim]`` that are model inputs (``past_key_<i>``, ``past_value_<i>``) and outputs
(``present_key_<i>``, ``present_value_<i>``). Cache *slots* are columns of the (left-padded) batch:

- the prompt step (``prompt=True``): the first ``T`` tokens in slots ``0 .. T-1``; no past caches, causal
  attention among the ``T`` tokens (``write @ new`` fills the caches, ``write`` the one-hot ``[cache_len,
  T]`` slot matrix);
- a chunk step (``prompt=False``): ``T`` tokens (``tokens``; ``1`` for the one-token step) in slots
  ``positions .. positions + T - 1`` (``positions`` is an int ``[1]`` input); the past caches come in, the
  chunk's slots are replaced (one token: ``where(hit, new, past)``; more: ``dynamic_update_slice(past,
  new, start)``, which writes only those slots) and every query attends the slots up to its own (an
  additive mask: 0 or :data:`MASKED`);
- ``padded``: input ``pads`` ``[batch, 1]`` (int), the number of left-padding slots of each row: they are
  hidden from every query and a token's position (for position embeddings) is its slot minus its row's
  padding, so a padded row gives the numbers of the same prompt run alone;
- ``reorder``: input ``beams`` ``[batch]`` (int): the past caches' rows are gathered (``past[beams]``)
  before the chunk is written, as beam search needs.

Every step returns the logits of the last position only (``output``, ``[batch, vocab]``).

Example:
    >>> StepShape(batch=2, cache_len=16, tokens=4, padded=True).data_keys(1)
    ['input', 'positions', 'pads', 'past_key_0', 'past_value_0']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import mithril as ml
import numpy as np
from mithril.errors import ModelKeyError
from mithril.extend import initializers, op, validation
from mithril.models import Connection, IOKey, Linear, Model

from .family import ConfigT, FamilyModel

__all__ = [
    "MASKED", "DecodeStepModel", "DecodeSteps", "FamilyDecodeSteps", "KVCacheConfig", "StepShape", "cache_names",
    "cached_attention", "expose_output", "layer_cache_keys", "lm_head", "root_cache_keys", "slot_tensors", "step_keys",
    "step_positions", "window_mask",
]  # fmt: skip

MASKED = -65504.0
"""Added to the attention scores of cache slots a query must not see: softmax gives them weight 0 (the
exponential underflows), and it is finite in every float dtype (the largest float16 magnitude)."""


@dataclass(frozen=True)
class StepShape:
    """A decode step (see the module docstring): ``batch`` sequences, caches of ``cache_len`` slots, the
    prompt step or a chunk of ``tokens`` tokens (``None``: one token, as the one-token step of
    :class:`~mithril_models.gpt.decode.KVDecoder`), with left padding (``padded``) and cache reordering
    (``reorder``) inputs or not; ``head=False``: ``output`` is the last position's final hidden state
    (``[batch, dims]``, after the final norm) instead of its logits, for prefill chunks whose logits no one
    reads (an exported program applies the LM head once, after the last chunk).

    >>> StepShape(1, 8).length, StepShape(1, 8, prompt=True).length, StepShape(1, 8, tokens=4).length
    (1, None, 4)
    """

    batch: int
    cache_len: int
    prompt: bool = False
    tokens: int | None = None
    padded: bool = False
    reorder: bool = False
    head: bool = True

    @property
    def length(self) -> int | None:
        """Tokens per row: ``tokens`` (1 when not given) for a chunk step, ``None`` (any) for the prompt step."""
        if self.prompt:
            return self.tokens
        return 1 if self.tokens is None else self.tokens

    def data_keys(self, num_layers: int) -> list[str]:
        """The step's run-time inputs, in order."""
        keys = ["input"]
        if not self.prompt:
            keys.append("positions")
        if self.padded:
            keys.append("pads")
        if self.reorder:
            keys.append("beams")
        if not self.prompt:
            keys += [past for past, _ in cache_names(num_layers)]
        return keys


def cache_names(num_layers: int) -> list[tuple[str, str]]:
    """``(input, output)`` names of the caches, layer by layer: ``("past_key_0", "present_key_0")``, ...

    >>> cache_names(1)
    [('past_key_0', 'present_key_0'), ('past_value_0', 'present_value_0')]
    """
    return [(f"past_{kind}_{i}", f"present_{kind}_{i}") for i in range(num_layers) for kind in ("key", "value")]


def step_keys(step: StepShape | None, *, mask: bool = True) -> tuple[str, ...]:
    """Keys an attention block of ``step`` shares with its parents besides ``input``/``output`` (``mask``:
    whether the prompt step has a mask, i.e. a sliding window; chunk steps always have one).

    >>> step_keys(StepShape(1, 8, tokens=2, reorder=True))
    ('start', 'mask', 'beams', 'past_key', 'past_value', 'present_key', 'present_value')
    """
    if step is None:
        return ("mask",) if mask else ()
    if step.prompt:
        return ("write", "present_key", "present_value", *(("mask",) if mask else ()))
    written = ("start",) if step.length != 1 else ("hit",)
    beams = ("beams",) if step.reorder else ()
    return (*written, "mask", *beams, "past_key", "past_value", "present_key", "present_value")


def layer_cache_keys(step: StepShape | None, index: int, *, mask: bool = True) -> dict[str, str]:
    """The layer-``index`` names of the cache keys of :func:`step_keys` (``past_key`` -> ``past_key_3``).

    >>> layer_cache_keys(StepShape(1, 8), 3)["present_value"]
    'present_value_3'
    """
    return {key: f"{key}_{index}" for key in step_keys(step, mask=mask) if key.startswith(("past", "present"))}


def root_cache_keys(step: StepShape | None, num_layers: int) -> dict[str, IOKey]:
    """The step's keys that a family model's top block shares with the root: ``input``, the caches of every
    layer, ``positions``, ``pads`` and ``beams`` when the step has them.

    >>> sorted(root_cache_keys(StepShape(1, 8, prompt=True), 1))
    ['input', 'present_key_0', 'present_value_0']
    """
    keys = {"input": IOKey("input")}
    if step is None:
        return keys
    names = [name for pair in cache_names(num_layers) for name in pair]
    keys.update({name: IOKey(name) for name in names if not step.prompt or name.startswith("present")})
    for name in step.data_keys(num_layers):
        keys.setdefault(name, IOKey(name))
    return keys


def window_mask(model: Model, positions: Connection | IOKey, window: int) -> Connection:
    """Additive ``[T, T]`` for tokens at ``positions`` ``[T]``: :data:`MASKED` where the key's position is
    ``<= query position - window`` (outside a sliding window), else 0; causality is left to the caller."""
    queries, keys = op(model, "reshape", positions, shape=(-1, 1)), op(model, "reshape", positions, shape=(1, -1))
    far = op(model, "cast", op(model, "less_equal", keys, queries - window), dtype="float")
    mask: Connection = far * MASKED
    return mask


def step_positions(model: Model, tokens: Connection, step: StepShape) -> Connection | IOKey:
    """The positions of a step's tokens (for position embeddings), declared in ``model`` (the family's top
    block) before :func:`slot_tensors`: ``0 .. T-1`` for the prompt step; for a chunk step the slots
    ``positions + 0 .. T-1`` (``positions`` an int ``[1]`` input, itself for one token) less each row's left
    padding when padded (``pads``, ``[batch, 1]``), so ``[T]`` or ``[batch, T]``."""
    if step.prompt:
        return op(model, "positions", tokens, axis=-1)  # [T]: 0 .. T-1
    slots: Connection | IOKey = IOKey("positions", shape=[1], type="int")  # declared where first used
    if step.length != 1:
        slots = op(model, "add", op(model, "positions", tokens, axis=-1), slots)  # [T]
    if not step.padded:
        return slots
    shifted = op(model, "subtract", slots, IOKey("pads", shape=[step.batch, 1], type="int"))
    return op(model, "maximum", shifted, 0)  # [B, T]


def slot_tensors(model: Model, tokens: Connection, step: StepShape, *, window: int | None = None) -> dict[str, Any]:
    """The tensors every attention block of a step takes, computed once in ``model`` (the family's top block,
    after :func:`step_positions`) from ``arange(cache_len)``, the token ids ``tokens`` (``[batch, T]``; only
    their count is used) and the step's inputs (see the module docstring): ``write`` (``[L, T]``, the prompt
    step), ``hit`` (``[L, 1]``, the one-token step), ``start`` (the chunk's first slot, ``[1]``), the
    additive ``mask`` and ``beams``, as the step has them.

    ``window``: hide the slots that fell out of a sliding window of that many positions (Mistral).
    """
    slots = op(model, "arange", stop=step.cache_len)  # [L]
    if step.prompt:
        offsets = op(model, "positions", tokens, axis=-1)  # [T]
        column = op(model, "reshape", slots, shape=(-1, 1))  # [L, 1]
        shared = {"write": op(model, "cast", op(model, "equal", column, offsets), dtype="float")}  # [L, T]
        if window is not None:
            shared["mask"] = window_mask(model, offsets, window)
        return shared
    shared = _one_token(model, slots, step, window) if step.length == 1 else _chunk(model, slots, tokens, step, window)
    if step.reorder:
        shared["beams"] = op(model, "reshape", IOKey("beams", shape=[step.batch], type="int"), shape=(-1,))
    return shared


def _input(model: Model, name: str, shape: list[int]) -> Connection | IOKey:
    """The int input ``name`` of ``model``: its connection once declared (by :func:`step_positions`),
    else the key that declares it."""
    return Connection(model, name) if name in model.input_keys else IOKey(name, shape=shape, type="int")


def _padded(model: Model, visible: Connection, slots: Connection, step: StepShape) -> Connection:
    """``visible`` and not a left-padding slot of the row (``slots >= pads``), ``[B, ...]``."""
    real = op(model, "greater_equal", slots, _input(model, "pads", [step.batch, 1]))  # [B, L]
    if step.length == 1:
        return op(model, "logical_and", visible, real)  # [B, L]
    return op(model, "logical_and", visible, op(model, "reshape", real, shape=(step.batch, 1, 1, -1)))


def _one_token(model: Model, slots: Connection, step: StepShape, window: int | None) -> dict[str, Any]:
    """:func:`slot_tensors` of a one-token step: ``hit`` ``[L, 1]`` (the token's slot) and the additive
    ``mask`` ``[1, L]`` (``[B, 1, 1, L]`` when padded) from ``slots <= position`` (and the window, the rows'
    padding): comparisons over ``[L]``, as the C programs' decode steps have them."""
    hit = op(model, "equal", slots, _input(model, "positions", [1]))
    position = Connection(model, "positions")
    shared = {"hit": op(model, "reshape", hit, shape=(-1, 1))}  # [L, 1]
    visible = op(model, "less_equal", slots, position)  # [L]
    if window is not None:
        visible = op(model, "logical_and", visible, op(model, "greater", slots, position - window))
    if step.padded:
        visible = _padded(model, visible, slots, step)
    blocked = (1.0 - op(model, "cast", visible, dtype="float")) * MASKED
    shared["mask"] = op(model, "reshape", blocked, shape=(step.batch, 1, 1, -1) if step.padded else (1, -1))
    return shared


def _chunk(model: Model, slots: Connection, tokens: Connection, step: StepShape, window: int | None) -> dict[str, Any]:
    """:func:`slot_tensors` of a chunk of ``T > 1`` tokens in slots ``positions + 0 .. T-1``: ``start``
    (``positions``, ``[1]``) and the additive ``mask`` ``[T, L]`` (``[B, 1, T, L]`` when padded)."""
    queries = op(model, "add", op(model, "positions", tokens, axis=-1), _input(model, "positions", [1]))  # [T]
    shared: dict[str, Any] = {"start": Connection(model, "positions")}
    rows, keys = op(model, "reshape", queries, shape=(-1, 1)), op(model, "reshape", slots, shape=(1, -1))
    visible = op(model, "less_equal", keys, rows)  # [T, L]: causal
    if window is not None:
        visible = op(model, "logical_and", visible, op(model, "greater", keys, rows - window))
    if step.padded:
        visible = _padded(model, visible, slots, step)
    shared["mask"] = (1.0 - op(model, "cast", visible, dtype="float")) * MASKED  # [T, L] or [B, 1, T, L]
    return shared


def _write(model: Model, kind: str, new: Connection, step: StepShape, heads: int, head_dim: int) -> Connection:
    """The cache ``present_<kind>`` ``[B, heads, L, D]`` after this step's keys or values ``new`` ``[B, heads,
    T, D]`` (exposed under that name)."""
    if step.prompt:  # slots 0 .. T-1 hold the prompt, the rest zeros
        present = op(model, "matmul", IOKey("write"), new)  # [L, T] @ [B, H, T, D]
    else:
        shape = [step.batch, heads, step.cache_len, head_dim]
        past: Connection | IOKey = IOKey(f"past_{kind}", shape=shape, type="float")
        if step.reorder:  # past[beams]: the rows of the beams being continued
            flat = op(model, "embedding", IOKey("beams"), op(model, "reshape", past, shape=(step.batch, -1)))
            past = op(model, "reshape", flat, shape=tuple(shape))
        if step.length == 1:
            present = op(model, "where", IOKey("hit"), new, past)  # [L, 1] picks the token's slot
        else:  # the chunk's T slots, written in place of the past's
            present = op(model, "dynamic_update_slice", past, new, IOKey("start"), axis=2)
    model.expose(present, f"present_{kind}", canonical=False)
    return present


def cached_attention(
    model: Model,
    q: Connection,
    k: Connection,
    v: Connection,
    step: StepShape,
    *,
    heads: int,
    head_dim: int,
    repeat: Callable[[Connection], Connection] = lambda x: x,
    mask: Any = "mask",
    scale: float | None = None,
) -> Connection:
    """Attention of queries ``q`` ``[B, Hq, T, D]`` in a decode step: the step's keys ``k`` and values ``v``
    ``[B, heads, T, D]`` are written to the caches (``present_key``/``present_value``, exposed in
    ``model``) and the queries attend the cache (the prompt step: the ``T`` tokens, causally).

    ``repeat``: key-value heads -> query heads (grouped-query attention); ``mask``: the additive mask, a
    key name (``"mask"``, shared by the step; ``None``: none in the prompt step) or a connection (T5's
    position bias); ``scale``: of the scores (``None``: ``1/sqrt(D)``). Returns ``[B, Hq, T, D]``.
    """
    keys, values = _write(model, "key", k, step, heads, head_dim), _write(model, "value", v, step, heads, head_dim)
    if not step.prompt:
        k, v = keys, values  # [B, heads, L, D]
    extra = IOKey(mask) if isinstance(mask, str) else mask
    return op(model, "scaled_dot_product_attention", q, repeat(k), repeat(v), extra, causal=step.prompt, scale=scale)


def expose_output(root: Model, block: Model, step: StepShape | None, vocab: int, tied: bool, std: float) -> None:
    """``root``'s ``output`` from a decoder ``block`` added to it (its ``output``, the final hidden state, and
    with tied embeddings its ``logits``): the hidden state for a step built with ``head=False``, else the
    logits: the tied ones, or an ``lm_head`` ``Linear`` (no bias, weights drawn from ``normal(std)``).

    >>> expose_output(root, transformer, None, config.vocab_size, False, 0.02)   # doctest: +SKIP
    """
    if step is not None and not step.head:  # the final hidden state: the head is applied elsewhere
        root.expose(block.output, "output")
    elif tied:
        root.expose(block.logits, "output")
    else:
        head = Linear(vocab, use_bias=False, weight_init=initializers.normal(std), name="lm_head")
        root |= head(input=block.output, output=IOKey("output"))


def lm_head(vocab: int, dims: int, tied: tuple[str, str] | None) -> Model:
    """A decoder's LM head alone, for the hidden states of steps built with ``head=False``: ``input``
    ``[batch, dims]`` (after the final norm) -> ``output`` ``[batch, vocab]``, its weight at the full
    model's path: ``lm_head.weight``, or with tied embeddings (``tied``: the names of the decoder block and
    its embedding) the embedding's.

    >>> lm_head(8, 4, ("transformer", "wte")).output_keys
    ['output']
    """
    root = Model()
    hidden = IOKey("input", shape=[None, dims], type="float")
    if tied is None:
        root |= Linear(vocab, use_bias=False, name="lm_head")(input=hidden, output=IOKey("output"))
        return root
    decoder, embedding = Model(name=tied[0]), Model(name=tied[1])
    weight = IOKey("weight", shape=[vocab, dims], type="float", differentiable=True)
    embedding.expose(op(embedding, "linear", hidden, weight, None), "output")
    decoder |= embedding(input=IOKey("input"), output=IOKey("output"))
    root |= decoder(input=IOKey("input"), output=IOKey("output"))
    return root


_Step = TypeVar("_Step", bound="DecodeStepModel[Any]")


class DecodeStepModel(FamilyModel[ConfigT]):
    """A family's decode step of shape :class:`StepShape` (``prompt``, ``tokens``, ``padded``, ``reorder``
    as there) for ``batch`` sequences with caches of ``cache_len`` slots: a subclass names its ``family``
    and ``config_type`` and builds the graph in :meth:`build` or with its ``builder`` (the full model's
    blocks and child names, so the parameters have its paths); ``class GPTDecodeStep(DecodeStepModel[GPTConfig],
    model=GPT)`` takes all four from the full model's class.

    >>> from mithril_models.gpt.decode import GPTDecodeStep
    >>> from mithril_models.gpt.config import GPTConfig
    >>> config = GPTConfig(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)
    >>> GPTDecodeStep.of(config, StepShape(2, 4, prompt=True)).input_keys
    ['input']
    """

    def __init__(
        self,
        config: ConfigT,
        batch: int,
        cache_len: int,
        *,
        prompt: bool = False,
        tokens: int | None = None,
        padded: bool = False,
        reorder: bool = False,
        head: bool = True,
        name: str | None = None,
    ) -> None:
        where = type(self).__name__
        if not isinstance(config, self.config_type):
            raise validation.fail(where, "config", f"a {self.config_type.__name__}", config)
        batch = validation.positive_int(where, "batch", batch)
        cache_len = validation.positive_int(where, "cache_len", cache_len)
        super().__init__(config, name=name)
        self.shape = StepShape(batch, cache_len, bool(prompt), tokens, bool(padded), bool(reorder), bool(head))
        self.build(config, self.shape)

    def __init_subclass__(cls, model: type[FamilyModel[Any]] | None = None, **kwargs: Any) -> None:
        """``model``: the full model's class, whose ``family``, ``config_type``, ``builder`` and ``layouts``
        the step takes."""
        super().__init_subclass__(**kwargs)
        if model is not None:
            cls.family, cls.config_type, cls.layouts = model.family, model.config_type, model.layouts
            cls.builder = None if model.builder is None else staticmethod(model.builder)

    def _build(self) -> None:
        """Nothing: the step's graph needs its shape, so ``__init__`` builds it with :meth:`build`."""

    def build(self, config: ConfigT, step: StepShape) -> None:
        """Add the step's graph to this (empty) model (the default: ``builder(self, config, step)``)."""
        if self.builder is None:
            raise NotImplementedError(f"{type(self).__name__} does not build a step")
        self.builder(self, config, step)

    @classmethod
    def of(cls: type[_Step], config: Any, step: StepShape) -> _Step:
        """The step of shape ``step``."""
        return cls(config, step.batch, step.cache_len, prompt=step.prompt, tokens=step.tokens, padded=step.padded,
                   reorder=step.reorder, head=step.head)  # fmt: skip


class DecodeSteps:
    """The decode steps of one model configuration compiled on one backend for ``batch`` sequences and caches
    of ``cache_len`` slots: :meth:`compiled` gives (and keeps) the step of any :class:`StepShape`.

    ``build(step)`` builds the logical step (a family model whose parameters have the paths of the full
    model's); ``cache_heads``/``head_dim`` are the caches' sizes. On Python backends the prompt step is
    compiled once with a symbolic length; backends that need static shapes (C, GGML) compile every
    length they are asked for. Parameters of the model the steps serve are matched to a step's names
    through their logical paths (:meth:`step_params`), whichever naming mode compiled them.

    Example:
        >>> steps = KVDecoder(gpt.config, backend, batch=1, cache_len=80)                 # doctest: +SKIP
        >>> one = steps.compiled(StepShape(1, 80, tokens=1, padded=True))                  # doctest: +SKIP
    """

    def __init__(
        self,
        build: Callable[[StepShape], Model],
        backend: Any,
        batch: int,
        cache_len: int,
        *,
        num_layers: int,
        cache_heads: int,
        head_dim: int,
    ) -> None:
        self.build = build
        self.backend = backend
        self.batch = batch
        self.cache_len = cache_len
        self.static = backend.codegen != "python"
        self.num_layers = num_layers
        self.cache_shape = [batch, cache_heads, cache_len, head_dim]
        self.caches = cache_names(num_layers)
        self._steps: dict[tuple[StepShape, tuple[Any, ...]], Any] = {}
        self._positions: list[Any] = []  # [p] as backend int arrays, made once

    def compiled(self, step: StepShape, extra: Mapping[str, Any] | None = None) -> Any:
        """The compiled step ``step`` (``batch`` and ``cache_len`` are this object's); ``extra``: the shapes
        of run-time inputs besides the step's own (T5's cross caches), part of what a compile is kept for."""
        step = replace(step, batch=self.batch, cache_len=self.cache_len)
        if step.prompt and not self.static:
            step = replace(step, tokens=None)  # one compile for every prompt length
        extra = dict(extra or {})
        key = (step, tuple(sorted((name, tuple(shape)) for name, shape in extra.items())))
        compiled = self._steps.get(key)
        if compiled is None:
            names = [present for _, present in self.caches]
            if not step.prompt:
                names += [past for past, _ in self.caches]
            shapes: dict[str, Any] = dict.fromkeys(names, self.cache_shape)
            shapes.update(extra, input=[self.batch, step.length])
            data_keys = {*step.data_keys(self.num_layers), *extra}
            compiled = ml.compile(self.build(step), self.backend, shapes=shapes, data_keys=data_keys, inference=True)
            self._steps[key] = compiled
        return compiled

    def step(self, prompt: bool, length: int = 1) -> Any:
        """The compiled prompt step for ``length`` tokens (``prompt=True``) or the one-token step (no
        padding, no reordering: inputs ``input``, ``positions`` and the past caches)."""
        return self.compiled(StepShape(self.batch, self.cache_len, prompt=prompt, tokens=length if prompt else None))

    def position(self, index: int) -> Any:
        """``[index]`` as a backend int array (created once per slot, so no per-step conversion)."""
        if not self._positions:
            self._positions = [self.backend.array(np.array([p]), "int") for p in range(self.cache_len)]
        return self._positions[index]

    def empty_caches(self) -> dict[str, Any]:
        """Zero ``past_*`` caches for the first chunk step."""
        zeros = self.backend.zeros(self.cache_shape)
        return {past: zeros for past, _ in self.caches}

    def step_params(self, compiled: Any, params: Mapping[str, Any], paths: Mapping[str, str]) -> dict[str, Any]:
        """``params`` (named as in the model ``paths`` comes from) renamed for the step ``compiled``."""
        by_path = {path: name for name, path in paths.items()}
        result = {}
        for name in compiled.param_keys:
            path = compiled.input_paths[name]
            source = by_path.get(path)
            if source is None or source not in params:
                raise ModelKeyError(
                    f"generate: params has no value for {path!r} (expected the parameters of the model)"
                )
            result[name] = params[source]
        return result


class KVCacheConfig(Protocol):
    """A configuration whose decode steps keep KV caches (:class:`FamilyDecodeSteps`)."""

    @property
    def kv_cache_sizes(self) -> tuple[int, int, int]:
        """``(num_layers, cache_heads, head_dim)``: the layers with caches and a cache's heads and width."""
        ...


_CacheConfigT = TypeVar("_CacheConfigT", bound=KVCacheConfig)


class FamilyDecodeSteps(DecodeSteps, Generic[_CacheConfigT]):
    """The :class:`DecodeSteps` of a family's :class:`DecodeStepModel` (``step_type``) for one configuration,
    caches sized by its ``kv_cache_sizes``: ``class KVDecoder(FamilyDecodeSteps[GPTConfig])`` is constructed
    as ``KVDecoder(config: GPTConfig, backend, batch, cache_len)``.
    """

    step_type: ClassVar[type[DecodeStepModel[Any]]]
    """The family's decode step."""
    config: _CacheConfigT

    def __init__(self, config: _CacheConfigT, backend: Any, batch: int, cache_len: int) -> None:
        num_layers, cache_heads, head_dim = config.kv_cache_sizes
        step_type = self.step_type
        super().__init__(
            lambda step: step_type.of(config, step), backend, batch, cache_len, num_layers=num_layers,
            cache_heads=cache_heads, head_dim=head_dim,
        )  # fmt: skip
        self.config = config
