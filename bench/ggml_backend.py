"""MLP forward and forward+backward on the GGML backend, against the same computation built by hand as a
ggml graph through the ``ggml`` Python bindings, and against NumPy, all in one process.

    python bench/ggml_backend.py [--batch 128] [--width 1024] [--threads N] [--repeats 20]

Prints the median times and the ratios Mithril-GGML / hand-built ggml (target <= 1.1) and
Mithril-GGML / NumPy (reported only; ggml's f32 matmul is slower than NumPy's BLAS here).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time

import ggml
import mithril as ml
import numpy as np
from mithril.models import Linear, Model, Relu


def median_times(fns, repeats: int) -> list[float]:
    """Median time of each function, calls interleaved so machine load hits all of them alike; the order
    reverses every round so that each function follows each other one equally often."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    order = list(range(len(fns)))
    for r in range(repeats):
        for i in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


class HandGGML:
    """y = relu(x W0^T + b0) W1^T + b1 (and its backward), built directly with the ggml bindings."""

    def __init__(self, batch: int, sizes: list[int], threads: int, backward: bool) -> None:
        f32 = ggml.GGML_TYPE_F32
        self.ctx = ggml.ggml_init(
            ggml.ggml_init_params(
                mem_size=256 * ggml.ggml_tensor_overhead() + ggml.ggml_graph_overhead(), mem_buffer=None, no_alloc=True
            )
        )
        ctx = self.ctx
        self.backend = ggml.ggml_backend_cpu_init()
        ggml.ggml_backend_cpu_set_n_threads(self.backend, threads)
        self.x = ggml.ggml_new_tensor_2d(ctx, f32, sizes[0], batch)
        self.params = []
        for k, d in itertools.pairwise(sizes):
            self.params.append((ggml.ggml_new_tensor_2d(ctx, f32, k, d), ggml.ggml_new_tensor_1d(ctx, f32, d)))
        inputs = [self.x] + [t for pair in self.params for t in pair]
        h, pre = self.x, []
        acts = [self.x]
        for i, (w, b) in enumerate(self.params):
            z = ggml.ggml_add(ctx, ggml.ggml_mul_mat(ctx, w, h), b)
            pre.append(z)
            h = ggml.ggml_relu(ctx, z) if i < len(self.params) - 1 else z
            acts.append(h)
        self.outputs = [h]
        if backward:
            self.g = ggml.ggml_new_tensor_2d(ctx, f32, sizes[-1], batch)
            inputs.append(self.g)
            g = self.g
            grads = []
            for i in reversed(range(len(self.params))):
                w, b = self.params[i]
                if i < len(self.params) - 1:
                    g = ggml.ggml_mul(ctx, g, ggml.ggml_step(ctx, pre[i]))
                a_t = ggml.ggml_cont(ctx, ggml.ggml_transpose(ctx, acts[i]))
                g_t = ggml.ggml_cont(ctx, ggml.ggml_transpose(ctx, g))
                grads.append(ggml.ggml_mul_mat(ctx, a_t, g_t))  # dW [d, k]
                grads.append(ggml.ggml_sum_rows(ctx, g_t))  # db [d]
                if i > 0:
                    g = ggml.ggml_mul_mat(ctx, ggml.ggml_cont(ctx, ggml.ggml_transpose(ctx, w)), g)
            self.outputs += grads
        for t in inputs:
            ggml.ggml_set_input(t)
        self.gf = ggml.ggml_new_graph(ctx)
        for t in self.outputs:
            ggml.ggml_set_output(t)
            ggml.ggml_build_forward_expand(self.gf, t)
        self.galloc = ggml.ggml_gallocr_new(ggml.ggml_backend_get_default_buffer_type(self.backend))
        assert ggml.ggml_gallocr_alloc_graph(self.galloc, self.gf)
        self.inputs = inputs

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        for t, a in zip(self.inputs, arrays, strict=True):
            ggml.ggml_backend_tensor_set(t, a.ctypes.data, 0, a.nbytes)
        ggml.ggml_backend_graph_compute(self.backend, self.gf)
        results = []
        for t in self.outputs:
            out = np.empty(ggml.ggml_nelements(t), np.float32)
            ggml.ggml_backend_tensor_get(t, out.ctypes.data, 0, out.nbytes)
            results.append(out)
        return results


def numpy_mlp(params, x, g=None):
    (w0, b0), (w1, b1) = params
    z0 = x @ w0.T + b0
    h = np.maximum(z0, 0)
    y = h @ w1.T + b1
    if g is None:
        return y
    dw1, db1 = g.T @ h, g.sum(0)
    dh = (g @ w1) * (z0 > 0)
    return y, (dh.T @ x, dh.sum(0), dw1, db1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    batch, width = args.batch, args.width
    sizes = [width, width, width]
    model = Model()
    model |= Linear(width)(input="input")
    model += Relu()
    model += Linear(width)
    backend = ml.GGMLBackend(threads=args.threads)
    compiled = ml.compile(model, backend, shapes={"input": [batch, width]})
    params = compiled.randomize_params(seed=0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, width)).astype(np.float32)
    g = rng.standard_normal((batch, width)).astype(np.float32)
    pairs = [(params["weight"], params["bias"]), (params["weight_1"], params["bias_1"])]
    flat = [t for pair in pairs for t in pair]

    hand_fwd = HandGGML(batch, sizes, args.threads, backward=False)
    hand_bwd = HandGGML(batch, sizes, args.threads, backward=True)
    # the three computations agree
    y_ref, grads_ref = numpy_mlp(pairs, x, g)
    out, grads = compiled.evaluate(params, {"input": x}, output_gradients={"output": g})
    assert np.allclose(out["output"], y_ref, atol=1e-3), "Mithril-GGML forward differs from NumPy"
    assert np.allclose(grads["weight"], grads_ref[0], rtol=1e-3, atol=1e-2), "gradients differ from NumPy"
    hand = hand_bwd([x, *flat, g])
    assert np.allclose(hand[0].reshape(batch, width), y_ref, atol=1e-3), "hand-built ggml differs from NumPy"

    flops_fwd = 2 * batch * width * width * 2
    cases = (
        (
            "forward",
            lambda: compiled.evaluate(params, {"input": x}),
            lambda: hand_fwd([x, *flat]),
            lambda: numpy_mlp(pairs, x),
            flops_fwd,
        ),
        (
            "forward+backward",
            lambda: compiled.evaluate(params, {"input": x}, output_gradients={"output": g}),
            lambda: hand_bwd([x, *flat, g]),
            lambda: numpy_mlp(pairs, x, g),
            flops_fwd * 3 - 2 * batch * width * width,  # the first layer's input gradient is not needed
        ),
    )
    # the ggml graphs first, NumPy after: OpenBLAS's worker threads keep spinning for a while after a
    # multithreaded matmul returns, and would slow down whichever ggml graph ran next
    ggml_times = [median_times([mithril_fn, hand_fn], args.repeats) for _, mithril_fn, hand_fn, _, _ in cases]
    numpy_times = [median_times([numpy_fn], args.repeats)[0] for _, _, _, numpy_fn, _ in cases]
    rows = [
        (label, t_m, t_h, t_n, flops)
        for (label, *_, flops), (t_m, t_h), t_n in zip(cases, ggml_times, numpy_times, strict=True)
    ]
    print(f"MLP {width}-{width}-{width}, batch {batch}, {args.threads} threads, libggml {ggml.ggml_version().decode()}")
    print(
        f"{'':18} {'mithril-ggml':>13} {'hand ggml':>10} {'numpy':>9} {'ggml/hand':>10} {'ggml/numpy':>11} "
        f"{'GFLOP/s':>8}"
    )
    for label, t_m, t_h, t_n, flops in rows:
        print(
            f"{label:18} {t_m * 1e3:10.2f} ms {t_h * 1e3:7.2f} ms {t_n * 1e3:6.2f} ms {t_m / t_h:10.2f} "
            f"{t_m / t_n:11.2f}"
            f" {flops / t_m / 1e9:8.1f}"
        )


if __name__ == "__main__":
    main()
