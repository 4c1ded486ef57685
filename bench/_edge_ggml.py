"""A GPT-2 decode step written by hand as a ggml graph (through ``ggml-python``), with the block-quantized
weights of an exported program's ``weights.bin``: the reference ``bench/edge.py`` times the program
against.

As ggml's own GPT-2 example does it: one graph per token (the keys and values attended are views of the
caches up to the token's position), the token's key and value copied into the caches first,
``ggml_mul_mat`` with the quantized weights (ggml quantizes the activations to q8_0), ``ggml_norm``,
``ggml_soft_max_ext``, ``ggml_gelu``, ``ggml_get_rows`` of the quantized embeddings; float32 activations.
Only the compute is timed (``ggml_graph_compute_with_ctx``, one thread), not the building of the graph.

Example::

    graph = HandBuiltGPT2(Path("gpt2-q8/weights.bin"), "q8_0")
    seconds_per_token, first_token = graph.time_per_token([464, 3290], 16)
"""

from __future__ import annotations

import ctypes
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

LAYERS, DIMS, HEADS, VOCAB, SLOTS = 12, 768, 12, 50257, 64


class HandBuiltGPT2:
    """GPT-2 small's weights (``fmt``: ``q8_0`` or ``q4_0``, as in ``weights_path``; ``f32``: the float32
    program's weights, its matrices as float32 ggml matrices) in a ggml context, and the decode step built
    as a ggml graph per token."""

    def __init__(self, weights_path: Path, fmt: str) -> None:
        import ggml
        from mithril_models.export import read_weights

        self.ggml = ggml
        ggml.ggml_cpu_init()
        self.fmt = fmt
        self.block_type = {"q8_0": ggml.GGML_TYPE_Q8_0, "q4_0": ggml.GGML_TYPE_Q4_0, "f32": ggml.GGML_TYPE_F32}[fmt]
        weights = [t for t in read_weights(weights_path) if t.data is not None]
        total = sum(t.nbytes for t in weights) + 2 * LAYERS * DIMS * SLOTS * 4 + (len(weights) + 64) * 1024
        self.ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=total, mem_buffer=None, no_alloc=False))
        self.w = {t.name: self._tensor(t) for t in weights}
        self.keys = [ggml.ggml_new_tensor_2d(self.ctx, ggml.GGML_TYPE_F32, DIMS, SLOTS) for _ in range(LAYERS)]
        self.values = [ggml.ggml_new_tensor_2d(self.ctx, ggml.GGML_TYPE_F32, DIMS, SLOTS) for _ in range(LAYERS)]

    def _tensor(self, t: Any) -> Any:
        """A tensor of the context holding the data of ``t`` (quantized matrices as their blocks)."""
        ggml = self.ggml
        if t.quant or (self.fmt == "f32" and len(t.shape) == 2):
            tensor = ggml.ggml_new_tensor_2d(self.ctx, self.block_type, int(np.prod(t.shape[1:])), t.shape[0])
        else:
            tensor = ggml.ggml_new_tensor_1d(self.ctx, ggml.GGML_TYPE_F32, int(np.prod(t.shape)))
        data = np.ascontiguousarray(t.data)
        ctypes.memmove(ggml.ggml_get_data(tensor), data.ctypes.data, data.nbytes)
        return tensor

    def close(self) -> None:
        self.ggml.ggml_free(self.ctx)

    def _layer_norm(self, ctx: Any, x: Any, name: str) -> Any:
        g = self.ggml
        normed = g.ggml_mul(ctx, g.ggml_norm(ctx, x, 1e-5), self.w[f"{name}.weight"])
        return g.ggml_add(ctx, normed, self.w[f"{name}.bias"])

    def _linear(self, ctx: Any, x: Any, name: str) -> Any:
        g = self.ggml
        return g.ggml_add(ctx, g.ggml_mul_mat(ctx, self.w[f"{name}.weight"], x), self.w[f"{name}.bias"])

    def _attention(self, ctx: Any, graph: Any, h: Any, layer: int, position: int) -> Any:
        """Self-attention of the token at ``position`` over the cached slots ``0 .. position``."""
        g, p, n = self.ggml, f"transformer.h.{layer}.attn", position + 1
        qkv = self._linear(ctx, h, f"{p}.c_attn")  # ne = (3 * DIMS, 1)
        row = DIMS * 4
        for cache, offset in ((self.keys[layer], DIMS), (self.values[layer], 2 * DIMS)):
            new = g.ggml_view_1d(ctx, qkv, DIMS, offset * 4)
            g.ggml_build_forward_expand(graph, g.ggml_cpy(ctx, new, g.ggml_view_1d(ctx, cache, DIMS, position * row)))
        q = g.ggml_reshape_3d(ctx, g.ggml_cont(ctx, g.ggml_view_1d(ctx, qkv, DIMS, 0)), 64, 1, HEADS)
        k = g.ggml_view_3d(ctx, self.keys[layer], 64, n, HEADS, row, 64 * 4, 0)
        probs = g.ggml_soft_max_ext(ctx, g.ggml_mul_mat(ctx, k, q), None, 1 / 8, 0.0)  # ne = (n, 1, HEADS)
        v = g.ggml_view_3d(ctx, self.values[layer], 64, n, HEADS, row, 64 * 4, 0)
        v_t = g.ggml_cont(ctx, g.ggml_permute(ctx, v, 1, 0, 2, 3))  # ne = (n, 64, HEADS)
        out = g.ggml_reshape_2d(ctx, g.ggml_cont(ctx, g.ggml_mul_mat(ctx, v_t, probs)), DIMS, 1)
        return self._linear(ctx, out, f"{p}.c_proj")

    def _graph(self, ctx: Any, token: int, position: int) -> tuple[Any, Any]:
        """The graph of one decode step (its logits tensor last)."""
        g = self.ggml
        graph = g.ggml_new_graph(ctx)
        ids = []
        for value in (token, position):
            t = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_I32, 1)
            ctypes.memmove(g.ggml_get_data(t), np.array([value], np.int32).ctypes.data, 4)
            ids.append(t)
        x = g.ggml_add(ctx, g.ggml_get_rows(ctx, self.w["transformer.wte.weight"], ids[0]),
                       g.ggml_get_rows(ctx, self.w["transformer.wpe.weight"], ids[1]))  # fmt: skip
        for layer in range(LAYERS):
            p = f"transformer.h.{layer}"
            x = g.ggml_add(ctx, x, self._attention(ctx, graph, self._layer_norm(ctx, x, f"{p}.ln_1"), layer, position))
            hidden = g.ggml_gelu(ctx, self._linear(ctx, self._layer_norm(ctx, x, f"{p}.ln_2"), f"{p}.mlp.c_fc"))
            x = g.ggml_add(ctx, x, self._linear(ctx, hidden, f"{p}.mlp.c_proj"))
        logits = g.ggml_mul_mat(ctx, self.w["transformer.wte.weight"], self._layer_norm(ctx, x, "transformer.ln_f"))
        g.ggml_build_forward_expand(graph, logits)
        return graph, logits

    def step(self, token: int, position: int) -> tuple[np.ndarray, float]:
        """The logits after ``token`` at ``position`` and the CPU seconds of the compute alone."""
        g = self.ggml
        ctx = g.ggml_init(g.ggml_init_params(mem_size=64 << 20, mem_buffer=None, no_alloc=False))
        try:
            graph, logits = self._graph(ctx, token, position)
            start = time.process_time()
            g.ggml_graph_compute_with_ctx(ctx, graph, 1)
            seconds = time.process_time() - start
            data = ctypes.cast(g.ggml_get_data(logits), ctypes.POINTER(ctypes.c_float))
            return np.ctypeslib.as_array(data, (VOCAB,)).copy(), seconds
        finally:
            g.ggml_free(ctx)

    def last_logits(self, prompt: list[int]) -> np.ndarray:
        """The logits after the last token of ``prompt`` (fed one token at a time)."""
        for position, token in enumerate(prompt):
            logits, _ = self.step(token, position)
        return logits

    def time_per_token(self, prompt: list[int], new: int) -> tuple[float, int]:
        """The median compute time of a step while decoding ``new`` tokens greedily after ``prompt`` (fed
        one token at a time), and the first new token."""
        for position, token in enumerate(prompt):
            logits, _ = self.step(token, position)
        first = token = int(logits.argmax())
        times = []
        for i in range(new):
            logits, seconds = self.step(token, len(prompt) + i)
            times.append(seconds)
            token = int(logits.argmax())
        return statistics.median(times), first
