"""One LSTM layer (input 256, hidden 256, sequence 64, batch 32, float32): Mithril's
``ManyToMany(TorchLSTMCell)`` against ``torch.nn.LSTM`` on PyTorch (target <= 1.5) and against a hand-written
``jax.lax.scan`` LSTM on JAX (target <= 1.1), forward and forward+backward (gradients of every parameter
and of the input for a given output cotangent), measured in this process (warm-up, interleaved medians).
The layer compiles to one ``lstm_layer`` primitive: on PyTorch ``torch.lstm``, the kernel behind ``nn.LSTM``
(oneDNN's fused RNN on CPU); on JAX its decomposition, one input projection and one ``lstm_recurrence``
(``jax.lax.scan``). The printed compile times are ``ml.compile``'s and, on JAX, the first call's (XLA
compilation).

Run: ``python bench/rnn.py`` (``--torch`` or ``--jax`` for one section; ``--threads N`` sets PyTorch's
intra-op threads, e.g. 1 on a machine whose cores are busy: eager PyTorch's many small ops then wait on
each other's thread pools, which distorts the comparison with one fused ``nn.LSTM`` kernel).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import mithril as ml
from _timing import interleaved, report
from mithril.models import IOKey, ManyToMany, Model, TorchLSTMCell

BATCH, LENGTH, FEATURES, HIDDEN = 32, 64, 256, 256
TITLE = f"LSTM input {FEATURES}, hidden {HIDDEN}, sequence {LENGTH}, batch {BATCH}"
PARAMS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def lstm_model() -> Model:
    """Mithril's LSTM layer: every step's hidden state ``output`` ``[B, T, H]`` from zero initial state."""
    model = Model()
    model |= ManyToMany(TorchLSTMCell, hidden_size=HIDDEN, length=LENGTH)(
        input="input", initial_hidden="h0", initial_cell="c0", output=IOKey("output")
    )
    return model


def numbers() -> dict[str, np.ndarray]:
    """Parameters (PyTorch's uniform +-1/sqrt(H) initialisation), input, zero state and output cotangent."""
    rng = np.random.default_rng(0)
    bound = 1.0 / np.sqrt(HIDDEN)
    shapes = {
        "weight_ih": (4 * HIDDEN, FEATURES),
        "weight_hh": (4 * HIDDEN, HIDDEN),
        "bias_ih": (4 * HIDDEN,),
        "bias_hh": (4 * HIDDEN,),
    }
    values = {k: rng.uniform(-bound, bound, size=s).astype(np.float32) for k, s in shapes.items()}
    values["input"] = rng.normal(size=(BATCH, LENGTH, FEATURES)).astype(np.float32)
    values["cotangent"] = rng.normal(size=(BATCH, LENGTH, HIDDEN)).astype(np.float32)
    values["h0"] = values["c0"] = np.zeros((BATCH, HIDDEN), np.float32)
    return values


def compile_mithril(
    backend: object, values: dict[str, np.ndarray], **options: object
) -> tuple[object, dict, dict, object]:
    """The compiled model, its parameters (and input: differentiated), data and cotangent on ``backend``."""
    start = time.perf_counter()
    pm = ml.compile(
        lstm_model(),
        backend,
        shapes={"input": [BATCH, LENGTH, FEATURES], "h0": [BATCH, HIDDEN], "c0": [BATCH, HIDDEN]},
        data_keys={"h0", "c0"}, trainable_keys={*PARAMS, "input"}, **options,
    )  # fmt: skip
    print(f"Mithril compile ({type(backend).__name__}): {time.perf_counter() - start:.2f} s")
    params = {k: backend.array(values[k]) for k in (*PARAMS, "input")}
    data = {k: backend.array(values[k]) for k in ("h0", "c0")}
    return pm, params, data, {"output": backend.array(values["cotangent"])}


def torch_section(values: dict[str, np.ndarray], threads: int | None = None) -> None:
    import torch

    if threads is not None:
        torch.set_num_threads(threads)

    lstm = torch.nn.LSTM(FEATURES, HIDDEN, batch_first=True)
    with torch.no_grad():
        for k in PARAMS:
            getattr(lstm, f"{k}_l0").copy_(torch.from_numpy(values[k]))
    x = torch.from_numpy(values["input"])
    xg = x.clone().requires_grad_(True)
    state = (torch.from_numpy(values["h0"])[None], torch.from_numpy(values["c0"])[None])
    g = torch.from_numpy(values["cotangent"])
    pm, params, data, cot = compile_mithril(ml.TorchBackend(dtype=ml.float32), values, jit=False)
    out = pm.evaluate(params, data)["output"]
    with torch.no_grad():
        print(
            f"torch threads: {torch.get_num_threads()}; max |Mithril - nn.LSTM| = "
            f"{float((out - lstm(x, state)[0]).abs().max()):.1e}"
        )

    def torch_forward() -> None:
        with torch.no_grad():
            lstm(x, state)

    def torch_backward() -> None:
        lstm.zero_grad(set_to_none=True)
        xg.grad = None
        lstm(xg, state)[0].backward(g)

    def mithril_forward() -> None:
        with torch.no_grad():
            pm.evaluate(params, data)

    fwd = interleaved({"torch.nn.LSTM": torch_forward, "Mithril PyTorch": mithril_forward}, rounds=5, repeats=5)
    report(f"{TITLE}, forward", fwd, "torch.nn.LSTM", 1.5)
    both = interleaved(
        {"torch.nn.LSTM": torch_backward, "Mithril PyTorch": lambda: pm.evaluate(params, data, output_gradients=cot)},
        rounds=5,
        repeats=5,
    )
    report(f"{TITLE}, forward+backward", both, "torch.nn.LSTM", 1.5)


def jax_lstm() -> tuple[object, object]:
    """A hand-written LSTM layer over ``jax.lax.scan`` (PyTorch's gate order), jitted: ``forward(params,
    x, h0, c0)`` and ``forward_backward(params, x, h0, c0, g)`` (the VJP of ``params`` and ``x``)."""
    import jax
    import jax.numpy as jnp

    def layer(params: dict, x: jax.Array, h0: jax.Array, c0: jax.Array) -> jax.Array:
        projected = x @ params["weight_ih"].T + params["bias_ih"] + params["bias_hh"]  # [B, T, 4H]

        def step(carry: tuple, xt: jax.Array) -> tuple:
            h, c = carry
            i, f, g, o = jnp.split(xt + h @ params["weight_hh"].T, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        _, hs = jax.lax.scan(step, (h0, c0), jnp.swapaxes(projected, 0, 1))
        return jnp.swapaxes(hs, 0, 1)

    def forward_backward(params: dict, x: jax.Array, h0: jax.Array, c0: jax.Array, g: jax.Array) -> tuple:
        out, pullback = jax.vjp(lambda p, xs: layer(p, xs, h0, c0), params, x)
        return out, pullback(g)

    return jax.jit(layer), jax.jit(forward_backward)


def jax_section(values: dict[str, np.ndarray], threads: int | None = None) -> None:
    import jax

    forward, forward_backward = jax_lstm()
    backend = ml.JaxBackend(dtype=ml.float32)
    pm, params, data, cot = compile_mithril(backend, values)
    hand = {k: backend.array(values[k]) for k in PARAMS}
    x, h0, c0, g = (backend.array(values[k]) for k in ("input", "h0", "c0", "cotangent"))
    sync = jax.block_until_ready
    start = time.perf_counter()
    sync(pm.evaluate(params, data, output_gradients=cot))
    first_mithril = time.perf_counter() - start
    start = time.perf_counter()
    sync(forward_backward(hand, x, h0, c0, g))
    first_hand = time.perf_counter() - start
    deviation = float(
        np.abs(np.asarray(pm.evaluate(params, data)["output"]) - np.asarray(forward(hand, x, h0, c0))).max()
    )
    print(
        f"first forward+backward call (jit compile): Mithril {first_mithril:.2f} s, lax.scan {first_hand:.2f} s; max "
        f"|Mithril - lax.scan| = {deviation:.1e}"
    )
    fwd = interleaved(
        {
            "jax.lax.scan LSTM": lambda: sync(forward(hand, x, h0, c0)),
            "Mithril JAX": lambda: sync(pm.evaluate(params, data)["output"]),
        },
        rounds=5,
        repeats=5,
    )
    report(f"{TITLE}, forward", fwd, "jax.lax.scan LSTM", 1.1)
    both = interleaved(
        {
            "jax.lax.scan LSTM": lambda: sync(forward_backward(hand, x, h0, c0, g)),
            "Mithril JAX": lambda: sync(pm.evaluate(params, data, output_gradients=cot)[1]),
        },
        rounds=5,
        repeats=5,
    )
    report(f"{TITLE}, forward+backward", both, "jax.lax.scan LSTM", 1.1)


def main() -> None:
    values = numbers()
    args = sys.argv[1:]
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else None
    chosen = {a for a in args if a in ("--torch", "--jax")} or {"--torch", "--jax"}
    for flag, section in (("--torch", torch_section), ("--jax", jax_section)):
        if flag not in chosen:
            continue
        try:
            section(values, threads)
        except (ImportError, AttributeError) as exc:
            print(f"{flag[2:]} section skipped: {exc}")


if __name__ == "__main__":
    main()
