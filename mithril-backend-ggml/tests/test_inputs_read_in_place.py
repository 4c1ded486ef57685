"""Inputs are read in place: each compute points the graph's input tensors (and their views) at the
caller's arrays instead of copying them (a GPT-2 decode step copied its 500 MB of weights per token).
What a copy guaranteed must still hold: refilled arrays are seen, other arrays and layouts work, the
caller's arrays are never written, and threads each get their own numbers."""

from __future__ import annotations

import threading

import mithril as ml
import numpy as np
from mithril.models import Add, Embedding, Linear, Model, Transpose

RTOL, ATOL = 1e-5, 1e-5


def _compiled() -> ml.PhysicalModel:
    """``y = linear(x) + transpose(t)``: ``t`` reaches ggml through a view (the transpose)."""
    model = Model()
    model |= Linear(3)(input="x", output="h")
    model |= Transpose()(input="t", output="tt")
    model |= Add()(left="h", right="tt", output="y")
    return ml.compile(
        model, ml.GGMLBackend(threads=2), shapes={"x": [4, 5], "t": [3, 4]}, trainable_keys={"weight", "bias"}
    )


def _expected(params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> np.ndarray:
    return x @ params["weight"].T + params["bias"] + t.T


def test_refilled_replaced_and_strided_arrays_are_read_as_they_are_at_the_call() -> None:
    pm = _compiled()
    rng = np.random.default_rng(0)
    params = {k: v.astype(np.float32) for k, v in pm.randomize_params(seed=0).items()}
    x = rng.standard_normal((4, 5)).astype(np.float32)
    t = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(pm.evaluate(params, {"x": x, "t": t})["y"], _expected(params, x, t), RTOL, ATOL)

    params["weight"][...] = rng.standard_normal(params["weight"].shape)  # refilled in place
    t[...] = rng.standard_normal(t.shape)  # the viewed input too
    np.testing.assert_allclose(pm.evaluate(params, {"x": x, "t": t})["y"], _expected(params, x, t), RTOL, ATOL)

    x2 = np.asfortranarray(rng.standard_normal((4, 5)).astype(np.float32))  # another array, not C-ordered
    t2 = rng.standard_normal((4, 3)).astype(np.float64).T  # a strided float64 view
    np.testing.assert_allclose(pm.evaluate(params, {"x": x2, "t": t2})["y"], _expected(params, x2, t2), RTOL, ATOL)
    np.testing.assert_allclose(pm.evaluate(params, {"x": x, "t": t})["y"], _expected(params, x, t), RTOL, ATOL)


def test_the_callers_arrays_are_never_written() -> None:
    pm = _compiled()
    params = {k: v.astype(np.float32) for k, v in pm.randomize_params(seed=1).items()}
    data = {"x": np.ones((4, 5), np.float32), "t": np.full((3, 4), 2.0, np.float32)}
    before = {k: v.copy() for k, v in {**params, **data}.items()}
    out, grads = pm.evaluate(params, data, output_gradients={"y": np.ones((4, 3), np.float32)})
    np.testing.assert_allclose(out["y"], _expected(params, data["x"], data["t"]), RTOL, ATOL)
    for key, array in {**params, **data}.items():
        np.testing.assert_array_equal(array, before[key], err_msg=key)
    np.testing.assert_allclose(grads["bias"], np.full(3, 4.0), RTOL, ATOL)

    embed = Model()
    embed |= Embedding(num_embeddings=6, dim=2)(input="ids", output="out")
    compiled = ml.compile(embed, ml.GGMLBackend(threads=2), shapes={"ids": [3]})
    table = {k: v.astype(np.float32) for k, v in compiled.randomize_params(seed=2).items()}
    ids = np.array([5, 0, 2])  # int64: converted to ggml's int32, never aliased
    np.testing.assert_array_equal(compiled.evaluate(table, {"ids": ids})["out"], table["weight"][ids])


def test_threads_each_get_their_own_arrays() -> None:
    pm = _compiled()
    params = {k: v.astype(np.float32) for k, v in pm.randomize_params(seed=3).items()}
    failures: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((4, 5)).astype(np.float32)
        t = rng.standard_normal((3, 4)).astype(np.float32)
        for _ in range(50):
            x[...] = rng.standard_normal(x.shape)
            got = pm.evaluate(params, {"x": x, "t": t})["y"]
            if not np.allclose(got, _expected(params, x, t), RTOL, ATOL):
                failures.append(f"thread {seed}")
                return

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
