"""Training: Mithril's compiled training step (``ml.compile(..., optimizer=optim.AdamW(...))``) against the
hand-written loops users would write instead, in one process.

1. ``curves``: a 2-layer character-level GPT-2 (vocabulary: the characters of this repository's own
   documentation, batches drawn from that text) with the same initial weights and batches, 200 AdamW steps
   on every installed backend vs ``transformers.GPT2LMHeadModel`` + ``torch.optim.AdamW``: the largest
   relative loss difference over all steps (goal: 1e-4 in float32, 1e-9 in float64 on NumPy).
2. ``speed``: one training step of a 6-layer, 384-wide GPT-2 (batch 8, sequence 128) vs the hand-written
   PyTorch loop (goal <= 1.0 for Mithril PyTorch) and a hand-written ``jax.jit`` step with ``optax.adamw``
   (goal <= 1.0 for Mithril JAX); NumPy and C reported against PyTorch.
3. ``resnet``: one training step of ResNet-18 (BatchNorm on batch statistics, batch 8, 64x64 images, AdamW)
   vs ``transformers.ResNetForImageClassification`` trained by hand in PyTorch; the losses of the first steps
   are compared before timing.
4. ``fit``: ``ml.fit`` against a bare loop of ``train_step`` calls over the same batches (goal: <= 2%).

    python bench/train.py [curves] [speed] [resnet] [fit] [--backends numpy,torch,jax,c,ggml,mlx] [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

THREADS = 2
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))

import mithril as ml  # noqa: E402
from _timing import interleaved, report  # noqa: E402
from mithril import optim  # noqa: E402
from mithril.plugins.lookup import backend_class  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("numpy", "torch", "jax", "c", "ggml", "mlx")
FLOAT32_ONLY = {"ggml", "mlx"}
LR, WEIGHT_DECAY = 1e-3, 0.01


def corpus() -> tuple[np.ndarray, int]:
    """The repository's documentation as character ids, and the vocabulary size."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return np.array([index[c] for c in text], dtype=np.int64), len(chars)


def batches(ids: np.ndarray, count: int, batch: int, seq: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(ids) - seq - 1, (count, batch))
    windows = [np.stack([ids[s : s + seq + 1] for s in row]) for row in starts]
    return [{"input": w[:, :-1], "target": w[:, 1:]} for w in windows]


def gpt2_config(vocab: int, layers: int, dims: int, heads: int, seq: int):
    """The GPT-2 both sides train: ``transformers``' config (dropout off, so that the losses can agree step by
    step), which Mithril's model is built from too (``mithril_models.from_hf_config``)."""
    from transformers import GPT2Config

    sizes = {"vocab_size": vocab, "n_positions": seq, "n_embd": dims, "n_layer": layers, "n_head": heads}
    no_dropout = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    return GPT2Config(**sizes, **no_dropout, bos_token_id=0, eos_token_id=0)


def hf_model(config, dtype: object):
    import torch
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    return GPT2LMHeadModel(config).to(dtype)


def mithril_step(backend: ml.Backend, config, batch: int, jit: bool | None = None):
    """Mithril's compiled AdamW training step of the GPT-2 of ``config`` on batches ``[batch, n_positions]``."""
    from mithril.models import CrossEntropy, TrainModel
    from mithril_models import from_hf_config

    seq = config.n_positions
    train = TrainModel(from_hf_config(config))
    train.add_loss(CrossEntropy(), input=train.output.transpose((0, 2, 1)), target="target", reduce_steps=[ml.Mean()])
    started = time.perf_counter()
    pm = ml.compile(
        train, backend, shapes={"input": [batch, seq], "target": [batch, seq]}, data_keys={"input", "target"},
        use_short_namings=False, optimizer=optim.AdamW(lr=LR, weight_decay=WEIGHT_DECAY, decay_mask="all"), jit=jit,
    )  # fmt: skip
    return pm, time.perf_counter() - started


def torch_loop(hf, data: list[dict[str, np.ndarray]]) -> list[float]:
    import torch

    optimizer = torch.optim.AdamW(hf.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    losses = []
    for batch in data:
        optimizer.zero_grad()
        logits = hf(torch.from_numpy(batch["input"])).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), torch.from_numpy(batch["target"]).reshape(-1)
        )
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def curves(names: list[str], steps: int) -> None:
    import torch
    from mithril_models import load_hf

    ids, vocab = corpus()
    layers, dims, heads, batch, seq = 2, 64, 2, 4, 32
    data = batches(ids, steps, batch, seq)
    print(
        f"Loss curves: 2-layer char GPT-2 (vocab {vocab}, {dims} wide), batch {batch}, seq {seq}, {steps} AdamW "
        "steps; max relative loss difference vs transformers + torch.optim.AdamW"
    )
    config = gpt2_config(vocab, layers, dims, heads, seq)
    references = {}
    for precision, dtype in (("float64", torch.float64), ("float32", torch.float32)):
        hf = hf_model(config, dtype)
        initial = {k: v.detach().clone() for k, v in hf.state_dict().items()}
        references[precision] = (initial, torch_loop(hf, data))
    for name in names:
        for precision in ("float64", "float32"):
            if precision == "float64" and name in FLOAT32_ONLY:
                continue
            backend = backend_class(name)(dtype=getattr(ml, precision))
            pm, seconds = mithril_step(backend, config, batch)
            initial, expected = references[precision]
            state = pm.init_state(load_hf(pm, initial))
            losses = []
            for b in data:
                state, outputs = pm.train_step(state, b)
                losses.append(float(np.asarray(backend.to_numpy(outputs["final_cost"]))))
            worst = max(abs(a - e) / abs(e) for a, e in zip(losses, expected, strict=True))
            goal = 1e-9 if precision == "float64" else 1e-4
            print(
                f"  Mithril {name:<6} {precision}: compiled in {seconds:5.2f} s; loss {losses[0]:.4f} -> "
                f"{losses[-1]:.4f} (torch {expected[-1]:.4f}); max relative difference {worst:.1e} (goal {goal:.0e}: "
                f"{'OK' if worst <= goal else 'MISSED'})"
            )


def speed(names: list[str]) -> None:
    import jax
    import optax
    import torch
    from _hand_written import jax_gpt2_function
    from mithril_models import from_hf_config, load_hf

    ids, vocab = corpus()
    layers, dims, heads, batch, seq = 6, 384, 6, 8, 128
    data = batches(ids, 4, batch, seq, seed=1)
    config = gpt2_config(vocab, layers, dims, heads, seq)
    hf = hf_model(config, torch.float32)
    initial = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    optimizer = torch.optim.AdamW(hf.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    counter = {"i": 0}

    def next_batch() -> dict[str, np.ndarray]:
        counter["i"] += 1
        return data[counter["i"] % len(data)]

    def torch_step() -> None:
        b = next_batch()
        optimizer.zero_grad()
        logits = hf(torch.from_numpy(b["input"])).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), torch.from_numpy(b["target"]).reshape(-1))
        loss.backward()
        optimizer.step()

    fns = {"hand-written PyTorch (transformers + AdamW)": torch_step}
    title = f"Training step, 6-layer GPT-2 ({dims} wide, vocab {vocab}), batch {batch}, seq {seq}"
    if "jax" in names:
        gpt2 = jax_gpt2_function(layers, heads)
        tx = optax.adamw(LR, weight_decay=WEIGHT_DECAY)
        mithril_gpt2 = from_hf_config(config)
        inference = ml.compile(
            mithril_gpt2, ml.NumpyBackend(), shapes={"input": [batch, seq]}, use_short_namings=False, inference=True
        )
        jparams = {k: jax.numpy.asarray(v) for k, v in load_hf(inference, initial).items()}

        def loss_fn(p, x, y):
            return optax.softmax_cross_entropy_with_integer_labels(gpt2(p, x), y).mean()

        def step(p, s, x, y):
            loss, g = jax.value_and_grad(loss_fn)(p, x, y)
            updates, s = tx.update(g, s, p)
            return optax.apply_updates(p, updates), s, loss

        jstep = jax.jit(step, donate_argnums=(0, 1))
        jstate = {"p": jparams, "s": tx.init(jparams)}

        def jax_step() -> None:
            b = next_batch()
            jstate["p"], jstate["s"], loss = jstep(jstate["p"], jstate["s"], b["input"], b["target"])
            loss.block_until_ready()

        fns["hand-written jax.jit + optax.adamw"] = jax_step
    variants = [(name, None) for name in names if name not in ("mlx", "ggml")]  # MLX, GGML: in curves
    if "torch" in names:
        variants.append(("torch", True))  # the same step under torch.compile
    for name, jit in variants:
        backend = backend_class(name)()
        pm, seconds = mithril_step(backend, config, batch, jit=jit)
        holder = {"state": pm.init_state(load_hf(pm, initial))}
        arrays = [{k: backend.array(v, "int") for k, v in b.items()} for b in data]

        def mithril(pm=pm, holder=holder, arrays=arrays, backend=backend) -> None:
            counter["i"] += 1
            holder["state"], outputs = pm.train_step(holder["state"], arrays[counter["i"] % len(arrays)])
            np.asarray(backend.to_numpy(outputs["final_cost"]))

        label = f"Mithril {name}" + (" (torch.compile)" if jit else "")
        started = time.perf_counter()
        mithril()  # the first call traces and compiles under a JIT
        print(f"  ({label}: ml.compile {seconds:.2f} s, first step {time.perf_counter() - started:.1f} s)")
        fns[label] = mithril
    times = interleaved(fns, rounds=3, repeats=2)
    torch_name, jax_name = "hand-written PyTorch (transformers + AdamW)", "hand-written jax.jit + optax.adamw"
    report(
        title + ", vs PyTorch (goal for Mithril torch <= 1.0; the others reported)",
        {k: v for k, v in times.items() if k != jax_name},
        torch_name,
    )
    for label in ("Mithril torch", "Mithril torch (torch.compile)"):
        if label in times:
            ratio = times[label] / times[torch_name]
            print(f"  {label} / hand-written PyTorch: {ratio:.2f} (goal <= 1.0: {'OK' if ratio <= 1.0 else 'MISSED'})")
    if "jax" in names and "Mithril jax" in times:
        report(title + ", JAX", {k: times[k] for k in (jax_name, "Mithril jax")}, jax_name, 1.0)


def resnet(names: list[str]) -> None:
    import torch
    from mithril.models import CrossEntropy, TrainModel
    from mithril_models import load_hf
    from mithril_models.resnet import from_hf_config
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    config = ResNetConfig(
        embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2], layer_type="basic", num_labels=10
    )
    reference = ResNetForImageClassification(config).train()
    initial = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    rng = np.random.default_rng(0)
    batch, side = 8, 64
    data = [
        {"input": rng.standard_normal((batch, 3, side, side)).astype(np.float32), "label": rng.integers(0, 10, batch)}
        for _ in range(3)
    ]
    optimizer = torch.optim.AdamW(reference.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    counter = {"i": 0}

    def torch_step() -> float:
        b = data[counter["i"] % len(data)]
        counter["i"] += 1
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            reference(torch.from_numpy(b["input"])).logits, torch.from_numpy(b["label"])
        )
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    fns = {"hand-written PyTorch (transformers ResNet-18 + AdamW)": torch_step}
    for name in names:
        if name in ("mlx", "ggml", "jax"):
            continue  # NumPy, C and PyTorch here; JAX's ResNet training step is traced per shape (see speed)
        backend = backend_class(name)()
        train = TrainModel(from_hf_config(config, training=True))
        train.add_loss(CrossEntropy(), reduce_steps=[ml.Mean()], input="output", target="label")
        started = time.perf_counter()
        optimizer = optim.AdamW(lr=LR, weight_decay=WEIGHT_DECAY, decay_mask="all")
        shapes = {"input": [batch, 3, side, side], "label": [batch]}
        pm = ml.compile(
            train, backend, shapes=shapes, data_keys={"input", "label"}, use_short_namings=False, optimizer=optimizer
        )
        print(f"  (Mithril {name}: compiled in {time.perf_counter() - started:.2f} s)")
        holder = {"state": pm.init_state(load_hf(pm, initial)), "i": 0}
        arrays = [{"input": backend.array(b["input"]), "label": backend.array(b["label"], "int")} for b in data]

        def mithril(pm=pm, holder=holder, arrays=arrays, backend=backend) -> float:
            holder["state"], outputs = pm.train_step(holder["state"], arrays[holder["i"] % len(arrays)])
            holder["i"] += 1
            return float(np.asarray(backend.to_numpy(outputs["final_cost"])))

        fns[f"Mithril {name}"] = mithril
    first = {label: [fn() for _ in range(2)] for label, fn in fns.items()}  # same weights, same batches
    print(
        "ResNet-18 losses of the first two steps: "
        + "; ".join(f"{k}: {v[0]:.5f}, {v[1]:.5f}" for k, v in first.items())
    )
    times = interleaved(fns, rounds=3, repeats=2)
    report(
        f"ResNet-18 training step (batch {batch}, {side}x{side}, BatchNorm on batch statistics, AdamW)",
        times,
        "hand-written PyTorch (transformers ResNet-18 + AdamW)",
    )


def fit_overhead() -> None:
    ids, vocab = corpus()
    backend = ml.NumpyBackend()
    pm, _ = mithril_step(backend, gpt2_config(vocab, 2, 64, 2, 32), 4)
    data = batches(ids, 100, 4, 32, seed=2)
    params = pm.randomize_params(seed=0)

    def bare() -> None:  # a loop users write: the step, and the loss read back for logging
        state = pm.init_state(params)
        for b in data:
            state, outputs = pm.train_step(state, b)
            float(outputs["final_cost"])

    def fitted() -> None:
        ml.fit(pm, pm.init_state(params), data, verbose=False)

    times = interleaved({"bare loop of train_step": bare, "ml.fit": fitted}, rounds=9, repeats=1)
    report(
        "ml.fit vs a bare train_step loop, 100 steps of a 2-layer GPT-2 on NumPy (overhead "
        f"{100 * (times['ml.fit'] / times['bare loop of train_step'] - 1):+.1f}%, goal <= 2%)",
        times,
        "bare loop of train_step",
        1.02,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sections = ["curves", "speed", "resnet", "fit"]
    # no choices=: argparse (3.11) checks an empty list of a nargs="*" argument against them and refuses it
    parser.add_argument("sections", nargs="*", help=f"any of {', '.join(sections)} (default: all)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: " + ",".join(BACKENDS))
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        parser.error(f"unknown backends {unknown}; choose from {','.join(BACKENDS)}")
    available = []
    for name in names:
        try:
            backend_class(name)()
            available.append(name)
        except Exception as exc:  # a plugin that is not installed here
            print(f"(skipping {name}: {exc})")
    wrong = [s for s in args.sections if s not in sections]
    if wrong:
        parser.error(f"unknown sections {wrong}; choose from {', '.join(sections)}")
    sections = args.sections or sections
    if "curves" in sections:
        curves(available, args.steps)
    if "speed" in sections:
        speed(available)
    if "resnet" in sections:
        resnet(available)
    if "fit" in sections:
        fit_overhead()


if __name__ == "__main__":
    main()
