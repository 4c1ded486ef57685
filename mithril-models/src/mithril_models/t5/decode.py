"""Cached decoding of T5: the cross-attention caches (:class:`T5CrossCaches`, the keys and values of the
encoder's states for every decoder layer, computed once), the decoder step (:class:`T5DecodeStep`) and
their compiled runner (:class:`T5Steps`), over the shared decoder-with-KV-cache piece
(:mod:`mithril_models.kv_cache`).

The step takes ``input`` (``[batch, 1]``: the last token), ``positions`` (``[1]``: its slot),
``past_key_<i>``/``past_value_<i>`` (self-attention caches ``[batch, heads, cache_len, d_kv]``),
``cross_key_<i>``/``cross_value_<i>`` (``[batch, heads, S, d_kv]``), ``memory_pads`` (``[batch, 1]``: the
encoder's left padding of each row, hidden from cross-attention) and, for beam search, ``beams``; it
returns ``output`` (logits ``[batch, vocab]``) and ``present_*``. The relative position bias of the
token's slot against every cache slot is computed in the step (a table lookup), so one compiled step
serves every position up to ``cache_len``: JAX traces it once.

Parameters have the paths of :class:`~mithril_models.t5.T5Decoder`'s (``block.0.layer.1.EncDecAttention.k``
in the caches model, the rest in the step), so the decoder's parameters serve both.

Example:
    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4)
    >>> sorted(T5CrossCaches(s).output_keys)
    ['cross_key_0', 'cross_value_0']
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, ClassVar

import mithril as ml
import numpy as np
from mithril.extend import initializers, op
from mithril.models import Connection, Embedding, IOKey, Linear, Model, RMSNorm

from ..checkpoints.layout import Layout
from ..family import FamilyModel
from ..kv_cache import (
    DecodeSteps,
    StepShape,
    cached_attention,
    layer_cache_keys,
    slot_tensors,
    step_keys,
)
from .checkpoint import decoder_layouts
from .config import T5Settings
from .layers import T5LayerFF, _heads, _PreNormResidual
from .position_bias import MASKED, RelativePositionBias

__all__ = ["T5CrossCaches", "T5DecodeStep", "T5Steps"]


def _projection(s: T5Settings, name: str, source: Any, model: Model) -> Connection:
    """The bias-free projection ``name`` (``q``, ``k``, ``v``) of ``source`` to heads ``[B, H, T, d_kv]``,
    initialised as ``T5Attention``'s."""
    std = s.initializer_factor * (s.d_model * (s.d_kv if name == "q" else 1)) ** -0.5
    linear = Linear(s.inner_dim, use_bias=False, in_features=s.d_model, weight_init=initializers.normal(std), name=name)
    model |= linear(input=source)
    return _heads(model, linear.output, s.num_heads, s.d_kv)


def _output(s: T5Settings, model: Model, attended: Connection) -> None:
    """Heads ``[B, H, T, d_kv]`` merged and projected by ``o`` to ``output``."""
    merged = op(model, "reshape", op(model, "transpose", attended, axes=(0, 2, 1, 3)), shape=(None, None, s.inner_dim))
    out = Linear(s.d_model, use_bias=False, in_features=s.inner_dim, name="o",
                 weight_init=initializers.normal(s.initializer_factor * s.inner_dim**-0.5))  # fmt: skip
    model |= out(input=merged, output=IOKey("output"))


def _self_attention(s: T5Settings, step: StepShape, first: bool) -> Model:
    """``SelfAttention`` of a step: the token's keys and values written to the caches, attention over the
    cache with the relative position bias (computed in the first block, an input of the others)."""
    attn = Model(name="SelfAttention")
    x = IOKey("input", shape=[None, None, s.d_model])
    q, k, v = (_projection(s, name, x if name == "q" else attn.input, attn) for name in ("q", "k", "v"))
    if first:
        relative = RelativePositionBias(
            s.num_buckets, s.max_distance, s.num_heads, causal=True, cache_len=step.cache_len,
            init=initializers.normal(s.initializer_factor * s.d_model**-0.5), name="relative_attention_bias",
        )  # fmt: skip
        attn |= relative(input="input", start=IOKey("positions"))
        bias: Any = relative.output
        attn.expose(bias, "position_bias", canonical=False)
    else:
        bias = IOKey("position_bias", type="float")
    _output(s, attn, cached_attention(attn, q, k, v, step, heads=s.num_heads, head_dim=s.d_kv, mask=bias, scale=1.0))
    return attn


def _cross_attention(s: T5Settings, step: StepShape) -> Model:
    """``EncDecAttention`` of a step: queries of the token over the cross caches (no position bias)."""
    attn = Model(name="EncDecAttention")
    q = _projection(s, "q", IOKey("input", shape=[None, None, s.d_model]), attn)
    cache = [step.batch, s.num_heads, None, s.d_kv]
    k, v = IOKey("cross_key", shape=cache, type="float"), IOKey("cross_value", shape=cache, type="float")
    mask = IOKey("memory_mask", type="float")
    _output(s, attn, op(attn, "scaled_dot_product_attention", q, k, v, mask, causal=False, scale=1.0))
    return attn


def _block(s: T5Settings, step: StepShape, index: int) -> Model:
    """``block.<index>`` of a step: self-attention, cross-attention and feed-forward sub-layers."""
    block = Model(name=f"block.{index}")
    shared = [key for key in step_keys(step, mask=False) if key != "mask"]
    shared.append("positions" if index == 0 else "position_bias")
    layer = _PreNormResidual(name="layer.0")
    layer._wire(s, _self_attention(s, step, index == 0), **{key: IOKey(key) for key in [*shared, "position_bias"]})
    block |= layer(input=IOKey("input"), **{key: key for key in shared})
    if index == 0:  # computed here, shared by the other blocks
        block.expose(layer.position_bias, "position_bias", canonical=False)
    cross = _PreNormResidual(name="layer.1")
    cross._wire(
        s, _cross_attention(s, step), **{key: IOKey(key) for key in ("cross_key", "cross_value", "memory_mask")}
    )
    block |= cross(input=layer.output, cross_key="cross_key", cross_value="cross_value", memory_mask="memory_mask")
    ff = T5LayerFF(s, name="layer.2")
    block |= ff(input=cross.output, output=IOKey("output"))
    return block


class T5DecodeStep(FamilyModel[T5Settings]):
    """The T5 decoder (with its LM head) as a decode step of shape ``step`` (see the module docstring).

    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4)
    >>> "cross_key_0" in T5DecodeStep(s, StepShape(batch=1, cache_len=8)).input_keys
    True
    """

    family: ClassVar[str] = "t5"

    def __init__(self, settings: T5Settings, step: StepShape, *, name: str | None = None) -> None:
        super().__init__(settings, name=name)
        s = self.settings = settings
        shared = Embedding(s.vocab_size, s.d_model, init=initializers.normal(s.initializer_factor), name="shared")
        self |= shared(input=IOKey("input", type="int", shape=[step.batch, step.length]))
        slots = slot_tensors(self, Connection(self, "input"), step)
        keys = op(self, "positions", IOKey("cross_key_0", shape=[step.batch, s.num_heads, None, s.d_kv]), axis=2)
        real = op(self, "greater_equal", keys, IOKey("memory_pads", shape=[step.batch, 1], type="int"))  # [B, S]
        visible = op(self, "cast", op(self, "reshape", real, shape=(step.batch, 1, 1, -1)), dtype="float")
        memory_mask = (1.0 - visible) * MASKED
        hidden, bias = shared.output, None
        for i in range(s.num_decoder_layers):
            block = _block(s, step, i)
            connections: dict[str, Any] = {k: v for k, v in slots.items() if k != "mask"}
            connections.update(layer_cache_keys(step, i, mask=False), input=hidden, memory_mask=memory_mask)
            connections.update(cross_key=f"cross_key_{i}", cross_value=f"cross_value_{i}")
            connections.update({"positions": "positions"} if bias is None else {"position_bias": bias})
            self |= block(**connections)
            hidden = block.output
            bias = block.position_bias if bias is None else bias
        norm = RMSNorm(s.d_model, eps=s.eps, name="final_layer_norm")
        self |= norm(input=op(self, "index", hidden, key=(slice(None), -1)))  # [B, d_model]: the last position
        head = Linear(s.vocab_size, use_bias=False, in_features=s.d_model, name="lm_head",
                      weight_init=initializers.normal(s.initializer_factor))  # fmt: skip
        if s.tied:
            self |= head(input=norm.output * (s.d_model**-0.5), weight=shared.weight, output=IOKey("output"))
        else:
            self |= head(input=norm.output, output=IOKey("output"))

    def checkpoint_layouts(self) -> list[Layout]:
        return decoder_layouts(self.settings)


class T5CrossCaches(FamilyModel[T5Settings]):
    """``memory`` ``[batch, S, d_model]`` (the encoder's states) -> ``cross_key_<i>``/``cross_value_<i>``
    ``[batch, heads, S, d_kv]`` for every decoder layer, with the decoder's ``EncDecAttention.k``/``v``.

    >>> from mithril_models.t5.config import T5Settings
    >>> s = T5Settings(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=2, num_heads=4)
    >>> T5CrossCaches(s).input_keys[0]
    'memory'
    """

    family: ClassVar[str] = "t5"

    def __init__(self, settings: T5Settings, *, name: str | None = None) -> None:
        super().__init__(settings, name=name)
        self.settings = s = settings
        memory = IOKey("memory", shape=[None, None, s.d_model], type="float")
        for i in range(s.num_decoder_layers):
            attn = Model(name="EncDecAttention")
            for kind, proj in (("key", "k"), ("value", "v")):
                attn.expose(_projection(s, proj, IOKey("memory", shape=[None, None, s.d_model]), attn), f"cross_{kind}")
            layer = Model(name="layer.1")
            layer |= attn(memory="memory", cross_key=IOKey("cross_key"), cross_value=IOKey("cross_value"))
            block = Model(name=f"block.{i}")
            block |= layer(memory="memory", cross_key=IOKey("cross_key"), cross_value=IOKey("cross_value"))
            self |= block(memory=memory if i == 0 else "memory", cross_key=IOKey(f"cross_key_{i}"),
                          cross_value=IOKey(f"cross_value_{i}"))  # fmt: skip

    def checkpoint_layouts(self) -> list[Layout]:
        return decoder_layouts(self.settings)


class T5Steps(DecodeSteps):
    """The compiled T5 decode steps for ``batch`` rows and self-attention caches of ``cache_len`` slots, and
    the run of a generation: :meth:`encode` (the encoder, once, and the cross caches) then :meth:`decode`
    (one token per call).

    Example:
        >>> steps = T5Steps(settings, backend, batch=1, cache_len=32)                             # doctest: +SKIP
        >>> state = steps.encode(prompts, encoder, encoder_params, params, decoder.input_paths)     # doctest: +SKIP
        >>> logits = steps.decode(state, np.array([0]), None)                                      # doctest: +SKIP
    """

    def __init__(self, settings: T5Settings, backend: Any, batch: int, cache_len: int) -> None:
        super().__init__(
            lambda step: T5DecodeStep(settings, step), backend, batch, cache_len,
            num_layers=settings.num_decoder_layers, cache_heads=settings.num_heads, head_dim=settings.d_kv,
        )  # fmt: skip
        self.settings = settings
        self._cross: dict[int | None, Any] = {}
        self._encoders: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], Any]] = weakref.WeakKeyDictionary()

    def extra_inputs(self, memory_len: int | None) -> dict[str, Any]:
        """The cross caches and ``memory_pads`` (their shapes), inputs of the step besides the KV caches."""
        s = self.settings
        shapes: dict[str, Any] = {"memory_pads": [self.batch, 1]}
        for i in range(s.num_decoder_layers):
            for kind in ("key", "value"):
                shapes[f"cross_{kind}_{i}"] = [self.batch, s.num_heads, memory_len, s.d_kv]
        return shapes

    def cross_caches(self, memory_len: int) -> Any:
        """The compiled :class:`T5CrossCaches` (once per memory length on static-shape backends)."""
        key = memory_len if self.static else None
        compiled = self._cross.get(key)
        if compiled is None:
            shapes = {"memory": [self.batch, key, self.settings.d_model]}
            compiled = ml.compile(T5CrossCaches(self.settings), self.backend, shapes=shapes, data_keys={"memory"},
                                  inference=True)  # fmt: skip
            self._cross[key] = compiled
        return compiled

    def _encoder(self, encoder: Any, rows: int, length: int) -> Any:
        """``encoder`` itself on Python backends; on static-shape ones (C, GGML) its model compiled for
        ``[rows, length]`` tokens (once), unless ``encoder`` already has that shape."""
        if not self.static or encoder.shapes.get("input") == [rows, length]:
            return encoder
        kept = self._encoders.setdefault(encoder, {})
        if (rows, length) not in kept:
            kept[(rows, length)] = ml.compile(encoder.model, self.backend, shapes={"input": [rows, length]},
                                              data_keys={"input"}, inference=True)  # fmt: skip
        return kept[(rows, length)]

    def encode(
        self, ids: np.ndarray, pads: np.ndarray, encoder: Any, encoder_params: Mapping[str, Any],
        params: Mapping[str, Any], paths: Mapping[str, str],
    ) -> dict[str, Any]:  # fmt: skip
        """Run ``encoder`` (a compiled ``t5_encode``) once per prompt length on the real tokens of the
        left-padded ``ids`` ``[batch, S]`` (``pads``: the padding of each row; a row's states are those of
        its prompt alone) and compute the cross caches; returns the state :meth:`decode` continues."""
        backend, batch, width = self.backend, ids.shape[0], ids.shape[1]
        memory = np.zeros((batch, width, self.settings.d_model), dtype=np.float64)
        for pad in sorted(set(pads.tolist())):
            rows = np.flatnonzero(pads == pad)
            compiled = self._encoder(encoder, len(rows), width - pad)
            weights = (
                encoder_params
                if compiled is encoder
                else self.step_params(compiled, encoder_params, encoder.input_paths)
            )
            states = compiled.evaluate(weights, {"input": backend.array(ids[rows, pad:], "int")})["output"]
            memory[rows, pad:] = backend.to_numpy(states)
        cross = self.cross_caches(width)
        caches = cross.evaluate(self.step_params(cross, params, paths), {"memory": backend.array(memory)})
        return {"cross": dict(caches), "memory_pads": backend.array(pads[:, None], "int"), "width": width,
                "caches": self.empty_caches(), "slot": 0, "params": params, "paths": paths}  # fmt: skip

    def decode(
        self, state: dict[str, Any], tokens: np.ndarray, parents: np.ndarray | None, reorder: bool | None
    ) -> np.ndarray:
        """The logits ``[batch, vocab]`` after feeding ``tokens`` ``[batch]`` (``parents``: the rows they
        continue, beam search); ``reorder`` (the first call): whether later calls pass ``parents``."""
        backend = self.backend
        if reorder is not None:  # the first token: the step (and its parameters) for the whole run
            memory_len = state["width"] if self.static else None
            extra = self.extra_inputs(memory_len)
            state["step"] = step = self.compiled(
                StepShape(self.batch, self.cache_len, tokens=1, reorder=reorder), extra
            )
            state["step_params"] = self.step_params(step, state["params"], state["paths"])
            state["reorder"] = reorder
        data = {**state["caches"], **state["cross"], "memory_pads": state["memory_pads"]}
        data.update(input=backend.array(tokens[:, None], "int"), positions=self.position(state["slot"]))
        if state["reorder"]:
            data["beams"] = backend.array(np.arange(self.batch) if parents is None else parents, "int")
        outputs = state["step"].evaluate(state["step_params"], data)
        state["caches"] = {past: outputs[present] for past, present in self.caches}
        state["slot"] += 1
        return np.asarray(backend.to_numpy(outputs["output"]))
