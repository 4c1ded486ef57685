"""Per-call overhead of Mithril against hand-written framework code, measured in one process (float32).

- NumPy: MLP 784-512-256-10, batch 128, vs hand-written NumPy (forward and forward+backward). Target <= 1.10.
- JAX and PyTorch (when installed): the same MLP and a 2-layer GPT-2-small-shaped block stack (768 dims,
  12 heads, seq 128, batch 1), vs hand-written ``jax.jit`` code and PyTorch eager. Target <= 1.05.
  For JAX, compile (first-call jit) time is reported separately from steady-state time.
- Per-call cost of the op tables (``--calls``: this section only): the implementations that generated code
  calls (``backend.implementation(name)``, shared ones from ``mithril.backends.array_api``) against the
  framework function called directly, on 16-element float32 arrays (NumPy, and MLX when installed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import time

import mithril as ml
from _hand_written import jax_models, torch_models
from _timing import interleaved, report
from gpt_blocks import block_stack
from mithril.models import MLP

GPT_LAYERS, GPT_DIMS, GPT_HEADS, GPT_SEQ = 2, 768, 12, 128

SIZES = (784, 512, 256, 10)
BATCH = 128


def hand_written(params: dict[str, np.ndarray]):
    w0, b0, w1, b1, w2, b2 = (params[k] for k in ("weight0", "bias0", "weight1", "bias1", "weight2", "bias2"))

    def forward(x):
        h0 = np.maximum(x @ w0.T + b0, 0)
        h1 = np.maximum(h0 @ w1.T + b1, 0)
        return h1 @ w2.T + b2

    def forward_backward(x, g):
        z0 = x @ w0.T + b0
        h0 = np.maximum(z0, 0)
        z1 = h0 @ w1.T + b1
        h1 = np.maximum(z1, 0)
        out = h1 @ w2.T + b2
        grads = {"weight2": g.T @ h1, "bias2": g.sum(0)}
        g1 = np.where(z1 > 0, g @ w2, 0)
        grads |= {"weight1": g1.T @ h0, "bias1": g1.sum(0)}
        g0 = np.where(z0 > 0, g1 @ w1, 0)
        grads |= {"weight0": g0.T @ x, "bias0": g0.sum(0)}
        return out, grads

    return forward, forward_backward


def numpy_section() -> None:
    backend = ml.NumpyBackend(dtype=ml.float32)
    model = MLP(input_size=SIZES[0], hidden_sizes=list(SIZES[1:-1]), output_size=SIZES[-1])
    pm = ml.compile(model, backend, shapes={"input": [BATCH, SIZES[0]]})
    params = pm.randomize_params(seed=0)
    x = backend.randn(BATCH, SIZES[0])
    g = backend.randn(BATCH, SIZES[-1])
    forward, forward_backward = hand_written(params)

    out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})
    ref_out, ref_grads = forward_backward(x, g)
    assert np.allclose(out["output"], ref_out, atol=1e-4)
    assert all(np.allclose(grads[k], ref_grads[k], atol=1e-3) for k in ref_grads)

    fwd = interleaved(
        {"hand-written NumPy": lambda: forward(x), "Mithril NumPy": lambda: pm.evaluate(params, {"input": x})}
    )
    report(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, forward", fwd, "hand-written NumPy", 1.10)
    both = interleaved(
        {
            "hand-written NumPy": lambda: forward_backward(x, g),
            "Mithril NumPy": lambda: pm.evaluate(params, {"input": x}, output_gradients={"output": g}),
        }
    )
    report(f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, forward+backward", both, "hand-written NumPy", 1.10)


def _models():
    mlp = MLP(input_size=SIZES[0], hidden_sizes=list(SIZES[1:-1]), output_size=SIZES[-1])
    return {
        "mlp": (mlp, [BATCH, SIZES[0]], f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}"),
        "gpt": (
            block_stack(GPT_LAYERS, GPT_DIMS, GPT_HEADS),
            [1, GPT_SEQ, GPT_DIMS],
            f"{GPT_LAYERS}-layer GPT-2-small block stack, seq {GPT_SEQ}, batch 1",
        ),
    }


def autograd_section(name: str, backend: object, hand: dict, sync, jit: bool, baseline: str) -> None:
    """Mithril on ``backend`` vs the hand-written functions ``hand[model] = (forward, forward_backward)``."""

    def compare(key: str, model: object, shape: list[int], title: str) -> None:
        pm = ml.compile(model, backend, shapes={"input": shape}, jit=jit, use_short_namings=False)
        params = pm.randomize_params(seed=0)
        x = backend.randn(*shape)
        g = backend.ones(*pm.shapes["output"])
        forward, forward_backward = hand[key]

        start = time.perf_counter()
        sync(pm.evaluate(params, {"input": x})["output"])
        mithril_first = time.perf_counter() - start
        start = time.perf_counter()
        sync(forward(params, x))
        hand_first = time.perf_counter() - start
        start = time.perf_counter()
        sync(pm.evaluate(params, {"input": x}, output_gradients={"output": g})[1])
        mithril_first_grad = time.perf_counter() - start
        start = time.perf_counter()
        sync(forward_backward(params, x, g)[1])
        hand_first_grad = time.perf_counter() - start

        out = backend.to_numpy(pm.evaluate(params, {"input": x})["output"])
        ref = backend.to_numpy(forward(params, x))
        deviation = float(np.abs(out - ref).max())
        if jit:
            print(
                f"{title}: first call (jit compile) forward {mithril_first:.2f} s Mithril "
                f"vs {hand_first:.2f} s {baseline}; "
                f"forward+backward {mithril_first_grad:.2f} s vs {hand_first_grad:.2f} s"
            )
        print(f"{title}: max |Mithril - {baseline}| = {deviation:.1e}")
        rounds, repeats = (5, 5) if key == "gpt" else (7, 10)
        fwd = interleaved(
            {
                baseline: lambda: sync(forward(params, x)),
                f"Mithril {name}": lambda: sync(pm.evaluate(params, {"input": x})["output"]),
            },
            rounds=rounds,
            repeats=repeats,
        )
        report(f"{title}, forward (steady state)", fwd, baseline, 1.05)
        both = interleaved(
            {
                baseline: lambda: sync(forward_backward(params, x, g)[1]),
                f"Mithril {name}": lambda: sync(pm.evaluate(params, {"input": x}, output_gradients={"output": g})[1]),
            },
            rounds=rounds,
            repeats=repeats,
        )
        report(f"{title}, forward+backward (steady state)", both, baseline, 1.05)

    for key, (model, shape, title) in _models().items():
        compare(key, model, shape, title)


PER_CALL = {  # primitive -> (arguments, attributes, the framework call it should cost as much as)
    "add": (2, {}, lambda xp, a, b: xp.add(a, b)),
    "exp": (1, {}, lambda xp, a: xp.exp(a)),
    "relu": (1, {}, lambda xp, a: xp.maximum(a, 0)),
    "leaky_relu": (1, {"slope": 0.1}, lambda xp, a: xp.where(a > 0, a, xp.multiply(a, 0.1))),
    "sum": (1, {"axis": None, "keepdim": False}, lambda xp, a: xp.sum(a, axis=None, keepdims=False)),
}
"""Primitives timed by :func:`per_call_section`."""


def per_call_section() -> None:
    """The op tables' per-call cost on tiny arrays, next to the framework call they wrap (ratio ~1)."""
    import functools
    import timeit

    frameworks = [("NumPy", ml.NumpyBackend(dtype=ml.float32), np, lambda v: v)]
    try:
        import mlx.core as mx

        frameworks.append(("MLX", ml.MlxBackend(dtype=ml.float32), mx, mx.eval))
    except (ImportError, AttributeError) as exc:
        print(f"MLX per-call section skipped: {exc}")
    for name, backend, xp, sync in frameworks:
        arrays = [backend.array(np.linspace(-1, 1, 16, dtype=np.float32)) for _ in range(2)]
        for primitive, (arity, attrs, direct) in PER_CALL.items():
            impl, args = backend.implementation(primitive), arrays[:arity]
            times = {}
            calls = {
                "direct": functools.partial(lambda f, *a, xp=xp, sync=sync: sync(f(xp, *a)), direct, *args),
                "Mithril": functools.partial(lambda f, *a, sync=sync, **k: sync(f(*a, **k)), impl, *args, **attrs),
            }
            for label, call in calls.items():
                times[label] = min(timeit.repeat(call, number=2000, repeat=7)) / 2000
            framework, table = times["direct"], times["Mithril"]
            print(
                f"{name} {primitive:<11s} direct {framework * 1e6:6.2f} us   op table {table * 1e6:6.2f} us   "
                f"ratio {table / framework:.2f}"
            )


def _jax_framework() -> tuple:
    import jax

    return ml.JaxBackend(dtype=ml.float32), jax_models, jax.block_until_ready, True, "hand-written jax.jit"


def _torch_framework() -> tuple:
    import torch  # noqa: F401  (the section needs PyTorch itself, not only the backend's package)

    return ml.TorchBackend(dtype=ml.float32), torch_models, lambda value: value, False, "PyTorch eager"


AUTOGRAD_FRAMEWORKS = {"JAX": _jax_framework, "PyTorch": _torch_framework}
"""Section name -> (Mithril backend, hand-written models builder, sync, jit, baseline label), for
:func:`autograd_section`; a framework that is not installed raises ImportError/AttributeError."""


def main() -> None:
    if "--calls" in sys.argv[1:]:
        per_call_section()
        return
    per_call_section()
    numpy_section()
    for name, framework in AUTOGRAD_FRAMEWORKS.items():
        try:
            backend, hand_written_models, sync, jit, baseline = framework()
        except (ImportError, AttributeError) as exc:
            print(f"{name} section skipped: {exc}")
        else:
            autograd_section(name, backend, hand_written_models(GPT_LAYERS, GPT_HEADS), sync, jit, baseline)


if __name__ == "__main__":
    main()
