"""One process of ``torchrun --nproc_per_node 2 _distributed_worker.py OUT.json`` (see
test_distributed.py): data- and model-parallel runs of an MLP and a 2-layer GPT on a gloo CPU mesh,
compared with the single-process run; rank 0 writes the figures."""

import importlib.util
import json
import os
import sys

import mithril as ml
import numpy as np
import torch.distributed as dist
from mithril.models import MLP


def mlp():
    return MLP(input_size=16, hidden_sizes=[32, 32], output_size=8), {"input": [8, 16]}, None


def gpt():
    from mithril_models import create_gpt

    return (
        create_gpt(bias=True, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=64),
        {"input": [4, 16]},
        64,
    )


def run(build, mode):
    model, shapes, vocab = build()
    backend = ml.TorchBackend(device_mesh=(2,))
    pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), parallelism=mode)
    ref = ml.compile(model, ml.TorchBackend(), shapes=shapes, data_keys=set(shapes))
    params, ref_params = pm.randomize_params(seed=1), ref.randomize_params(seed=1)
    rng = np.random.default_rng(0)
    shape = shapes["input"]
    x = rng.integers(0, vocab, shape) if vocab else rng.standard_normal(shape).astype(np.float32)
    expected = ref.evaluate(ref_params, {"input": x})["output"]
    cot = {"output": rng.standard_normal(tuple(expected.shape)).astype(np.float32)}
    out, grads = pm.evaluate(params, {"input": x}, output_gradients=cot)
    rout, rgrads = ref.evaluate(ref_params, {"input": x}, output_gradients=cot)

    def rel(a, b):
        return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))

    local = {k: v.to_local().numel() for k, v in params.items()}
    total = {k: v.numel() for k, v in params.items()}
    return {
        "output": rel(backend.to_numpy(out["output"]), ref.backend.to_numpy(rout["output"])),
        "grads": max(rel(backend.to_numpy(grads[k]), ref.backend.to_numpy(rgrads[k])) for k in grads),
        "grads_placed": all(list(grads[k].placements) == list(params[k].placements) for k in grads),
        "split": sorted(k for k in params if local[k] < total[k]),
        "local_fraction": sum(local.values()) / sum(total.values()),
    }


def train(mode, optimizer=None):
    """``optimizer=`` with ``parallelism=``: AdamW steps on the mesh against the single-process steps; the
    state saved and loaded on the mesh trains on as the one kept in memory."""
    import functools
    import tempfile

    import torch
    from mithril import optim
    from mithril.models import SquaredError, TrainModel

    def build():
        train_model = TrainModel(MLP(input_size=16, hidden_sizes=[32], output_size=8))
        train_model.add_loss(SquaredError(), input="output", target="target")
        return train_model

    shapes = {"input": [8, 16], "target": [8, 8]}
    if optimizer == "torch.optim":
        optimizer = functools.partial(torch.optim.AdamW, lr=0.01, weight_decay=0.01)
    else:
        optimizer = optim.AdamW(lr=0.01)
    options = {"shapes": shapes, "data_keys": set(shapes), "optimizer": optimizer}
    pm = ml.compile(build(), ml.TorchBackend(device_mesh=(2,)), parallelism=mode, **options)
    ref = ml.compile(build(), ml.TorchBackend(), **options)
    state, ref_state = pm.init_state(pm.randomize_params(seed=1)), ref.init_state(ref.randomize_params(seed=1))
    rng = np.random.default_rng(0)
    for _ in range(3):
        batch = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        state, _ = pm.train_step(state, batch)
        ref_state, _ = ref.train_step(ref_state, batch)
    params, expected = state.params, ref_state.params
    # copies: a torch.optim optimizer updates the state's tensors in place
    trained = {k: pm.backend.to_numpy(v).copy() for k, v in params.items()}
    slots_placed = isinstance(state.opt_state, torch.optim.Optimizer) or all(
        list(state.opt_state[slot][k].placements) == list(params[k].placements)
        for slot in state.opt_state
        for k in params
    )
    path = os.path.join(tempfile.mkdtemp(), f"state-{os.environ['RANK']}.safetensors")
    ml.save_state(state, path)
    loaded = ml.load_state(pm, path)
    batch = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    after_load, _ = pm.train_step(loaded, batch)
    after_load = {k: pm.backend.to_numpy(v).copy() for k, v in after_load.params.items()}
    kept, _ = pm.train_step(state, batch)
    return {
        "resumed": max(float(np.abs(after_load[k] - pm.backend.to_numpy(kept.params[k])).max()) for k in trained),
        "moved": max(float(np.abs(after_load[k] - trained[k]).max()) for k in trained),
        "params": max(float(np.abs(trained[k] - expected[k].numpy()).max()) for k in trained),
        "slots_placed": slots_placed,
        "step": state.step_count,
    }


def main():
    builds = {"mlp": mlp}
    if importlib.util.find_spec("mithril_models"):
        builds["gpt"] = gpt
    found = {f"{name}-{mode}": run(build, mode) for name, build in builds.items() for mode in ("data", "model")}
    found.update({f"train-{mode}": train(mode) for mode in ("data", "model")})
    found.update({f"train-torch.optim-{mode}": train(mode, "torch.optim") for mode in ("data", "model")})
    found["world"] = dist.get_world_size()
    if int(os.environ["RANK"]) == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(found, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
