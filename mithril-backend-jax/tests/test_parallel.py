"""Parallelism on real ``jax.sharding`` meshes of simulated CPU devices (each case in a fresh
interpreter with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``): every mode gives the
single-device numbers, gradients come back placed like their parameters, bad plans are refused."""

from __future__ import annotations

import importlib.util

import pytest
from mithril_testing.devices import run_with_jax_devices

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")

_MODELS = """
import numpy as np, mithril as ml
from mithril.demo import build_cnn
from mithril.models import MLP

def mlp():
    return MLP(input_size=16, hidden_sizes=[32, 32], output_size=8), {"input": [8, 16]}, {}

def cnn():  # the manual's CNN, at 16x16
    return build_cnn(image_size=16, classes=8), {"input": [8, 3, 16, 16]}, {}

def gpt():
    from mithril_models import create_gpt
    model = create_gpt(bias=True, block_size=16, dims=32, num_heads=4, num_layers=2, vocab_size=64)
    return model, {"input": [8, 16]}, {"input": "int"}

def spec(array):  # a placement as a list of mesh axes, one per dimension
    found = list(array.sharding.spec)
    return found + [None] * (array.ndim - len(found))

def data_for(shapes, kinds, rng):
    return {
        k: rng.integers(0, 64, s) if kinds.get(k) == "int" else rng.standard_normal(s).astype(np.float32)
        for k, s in shapes.items()
    }

def compare(build, mesh, mode):
    model, shapes, kinds = build()
    backend = ml.JaxBackend(device_mesh=mesh)
    pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), parallelism=mode)
    ref = ml.compile(model, ml.JaxBackend(), shapes=shapes, data_keys=set(shapes))
    params, ref_params = pm.randomize_params(seed=3), ref.randomize_params(seed=3)
    rng = np.random.default_rng(0)
    data = data_for(shapes, kinds, rng)
    out_shape = tuple(ref.evaluate(ref_params, data)["output"].shape)
    cot = {"output": rng.standard_normal(out_shape).astype(np.float32)}
    plain = {k: backend.array(v) for k, v in data.items()}  # unplaced arrays: evaluate places them
    out, grads = pm.evaluate(params, plain, output_gradients=cot)
    rout, rgrads = ref.evaluate(ref_params, data, output_gradients=cot)
    def rel(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
    plan = pm.plan.specs if pm.plan is not None else {}
    placed = all(
        grads[k].sharding.is_equivalent_to(params[k].sharding, grads[k].ndim) for k in grads
    )
    params_placed = all(spec(params[k]) == list(plan.get(k, (None,) * params[k].ndim)) for k in params)
    return {
        "output": rel(backend.to_numpy(out["output"]), rout["output"]),
        "grads": max(rel(backend.to_numpy(grads[k]), rgrads[k]) for k in grads),
        "grads_placed": placed,
        "params_placed": params_placed,
        "split_params": sorted(k for k in plan if k in params),
        "split_data": sorted(k for k in plan if k in data),
    }
"""


def _run(code: str) -> dict:
    return run_with_jax_devices(_MODELS + code, devices=8)


@pytest.mark.slow
def test_every_mode_gives_the_single_device_numbers() -> None:
    results = _run('''
import importlib.util
builds = {"mlp": mlp, "cnn": cnn}
if importlib.util.find_spec("mithril_models"):
    builds["gpt"] = gpt
found = {}
for name, build in builds.items():
    for mesh, mode in [((8,), "data"), ((1, 4), "model"), ((2, 2), "mixed"), ((2,), None)]:
        found[f"{name}-{mode}"] = compare(build, mesh, mode)
emit(found)
''')
    assert {"mlp-data", "mlp-model", "mlp-mixed", "cnn-data", "cnn-model", "cnn-mixed"} <= set(results)
    for case, found in results.items():
        assert found["output"] <= 1e-5, (case, found)
        assert found["grads"] <= 1e-5, (case, found)
        assert found["grads_placed"] and found["params_placed"], (case, found)
        mode = case.split("-")[1]
        assert bool(found["split_data"]) == (mode in ("data", "mixed")), (case, found)
        if mode in ("model", "mixed"):
            assert found["split_params"], (case, found)  # something is split in every model-parallel plan
    if "gpt-model" in results:  # attention by heads, MLP column/row, embeddings by vocabulary
        split = set(results["gpt-model"]["split_params"])
        assert len(split) >= 10, split


def test_megatron_plan_alternates_and_splits_bytes() -> None:
    found = _run('''
from mithril.parallel import parameter_bytes_per_device
model, shapes, _ = mlp()
pm = ml.compile(model, ml.JaxBackend(device_mesh=(4,)), shapes=shapes, data_keys={"input"}, parallelism="model")
params = pm.randomize_params()
per_device = {k: v.addressable_shards[0].data.nbytes for k, v in params.items()}
emit({
    "specs": {k: list(v) for k, v in pm.plan.specs.items()},
    "per_device": per_device,
    "total": {k: int(v.nbytes) for k, v in params.items()},
    "ratio": parameter_bytes_per_device(pm.plan, {k: v.shape for k, v in params.items()}, 4),
})
''')
    assert found["specs"] == {
        "weight0": ["mesh_0", None], "bias0": ["mesh_0"],   # column-parallel
        "weight1": [None, "mesh_0"],                         # row-parallel (its input is split)
        "weight2": ["mesh_0", None], "bias2": ["mesh_0"],   # column-parallel again
    }
    for key in found["specs"]:
        assert found["per_device"][key] * 4 == found["total"][key], key
    assert found["per_device"]["bias1"] == found["total"]["bias1"]  # a row-parallel bias is replicated
    per_device, total = found["ratio"]
    assert per_device < total / 2


def test_sharded_arrays_as_in_the_manual() -> None:
    found = _run('''
backend = ml.JaxBackend(device_mesh=(2,))
t = backend.ones(128, 64, device_mesh=(2,), tensor_split=(0,))
r = backend.ones(128, 64, device_mesh=(2,))
z = backend.zeros(4, 6, device_mesh=(2,), tensor_split=(1,))
n = backend.randn(8, 2, device_mesh=(2,), tensor_split=(0,))
a = backend.array(np.arange(6.0).reshape(3, 2), device_mesh=(2,), tensor_split=(None,))
emit({
    "split": [spec(t), t.addressable_shards[0].data.shape],
    "replicated": [spec(r), r.addressable_shards[0].data.shape],
    "cols": [spec(z), z.addressable_shards[0].data.shape],
    "randn": spec(n),
    "whole": backend.to_numpy(t).shape,
    "sum": float(backend.to_numpy(t).sum()),
    "array": backend.to_numpy(a).tolist(),
})
''')
    assert found["split"] == [["mesh_0", None], [64, 64]]
    assert found["replicated"] == [[None, None], [128, 64]]
    assert found["cols"] == [[None, "mesh_0"], [4, 3]]
    assert found["randn"] == ["mesh_0", None]
    assert found["whole"] == [128, 64] and found["sum"] == 128 * 64
    assert found["array"] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


def test_explicit_specs_and_loaded_params_are_placed(tmp_path) -> None:
    found = _run(f"""
model, shapes, _ = mlp()
backend = ml.JaxBackend(device_mesh=(2, 2))
placements = {{"weight1": ("mesh_1", "mesh_0"), "input": (0, None)}}
pm = ml.compile(model, backend, shapes=shapes, data_keys={{"input"}}, parallelism=placements)
params = pm.randomize_params(seed=1)
pm.save_params({str(tmp_path / "p.safetensors")!r}, params)
loaded = pm.load_params({str(tmp_path / "p.safetensors")!r})
ref = ml.compile(model, ml.JaxBackend(), shapes=shapes, data_keys={{"input"}})
x = np.ones((8, 16), np.float32)
out = pm.evaluate(loaded, {{"input": x}})["output"]
emit({{
    "weight1": spec(loaded["weight1"]),
    "weight0": spec(loaded["weight0"]),
    "error": float(np.abs(
        backend.to_numpy(out) - np.asarray(ref.evaluate(ref.randomize_params(seed=1), {{"input": x}})["output"])
    ).max()),
}})
""")
    assert found["weight1"] == ["mesh_1", "mesh_0"]
    assert found["weight0"] == [None, None]
    assert found["error"] <= 1e-5


def test_bad_plans_are_refused_with_the_key_dimension_and_mesh() -> None:
    found = _run("""
from mithril.errors import MithrilError
model, shapes, _ = mlp()
def error(fn):
    try:
        fn()
    except MithrilError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"
big = ml.JaxBackend(device_mesh=(8,))
pm = ml.compile(model, big, shapes={"input": [None, 16]}, data_keys={"input"}, parallelism="data")
params = pm.randomize_params()
other = ml.JaxBackend(device_mesh=(4,))
emit({
    "too_many": error(lambda: ml.JaxBackend(device_mesh=(16,))),
    "batch": error(lambda: pm.evaluate(params, {"input": np.ones((6, 16), np.float32)})),
    "mode": error(lambda: ml.compile(model, big, shapes=shapes, parallelism="pipeline")),
    "axis": error(lambda: ml.compile(model, big, shapes=shapes, parallelism={"weight0": ("mesh_3", None)})),
    "key": error(lambda: ml.compile(model, big, shapes=shapes, parallelism={"nope": (None,)})),
    "mixed_1d": error(lambda: ml.compile(model, big, shapes=shapes, parallelism="mixed")),
    "no_mesh": error(lambda: ml.compile(model, ml.JaxBackend(), shapes=shapes, parallelism="data")),
    "other_mesh": error(lambda: big.ones(8, 2, device_mesh=(4,), tensor_split=(0,))),
    "split_dim": error(lambda: big.ones(8, 2, device_mesh=(8,), tensor_split=(2,))),
    "two_meshes": error(lambda: pm.evaluate(params, {"input": other.ones(8, 16, device_mesh=(4,), tensor_split=(0,))})),
    "fixed_batch": error(lambda: ml.compile(
        model, big, shapes={"input": [6, 16]}, data_keys={"input"}, parallelism={"input": ("mesh_0", None)}
    )),
})
""")
    assert (
        "16" in found["too_many"]
        and "8" in found["too_many"]
        and "xla_force_host_platform_device_count" in found["too_many"]
    )
    assert (
        "ShapeError" in found["batch"]
        and "'input'" in found["batch"]
        and "size 6" in found["batch"]
        and "(8,)" in found["batch"]
    )
    assert "pipeline" in found["mode"] and "'data'" in found["mode"]
    assert "mesh_3" in found["axis"] and "mesh_0" in found["axis"] and "weight0" in found["axis"]
    assert "nope" in found["key"]
    assert "mixed" in found["mixed_1d"] and "two or more" in found["mixed_1d"]
    assert "device mesh" in found["no_mesh"] and "device_mesh=(2,)" in found["no_mesh"]
    assert "(4,)" in found["other_mesh"] and "(8,)" in found["other_mesh"]
    assert "tensor_split" in found["split_dim"] and "2" in found["split_dim"]
    assert "'mesh_0': 4" in found["two_meshes"] and "'mesh_0': 8" in found["two_meshes"]
    assert "size 6" in found["fixed_batch"] and "'input'" in found["fixed_batch"]


@pytest.mark.slow
def test_two_processes_train_data_parallel_on_one_global_mesh(tmp_path) -> None:
    """``jax.distributed.initialize`` with a coordinator on 127.0.0.1: 2 processes x 2 simulated devices
    form a 4-device mesh; the data-parallel step gives the single-process numbers."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import mithril as ml
    import numpy as np
    from mithril.models import MLP
    from mithril_testing.devices import free_port, simulated_devices_env

    worker, port, out = Path(__file__).with_name("_multiprocess_worker.py"), free_port(), tmp_path / "found.json"
    env = simulated_devices_env(2)
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(port), str(i), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-2000:] for log in logs)
    found = json.loads(out.read_text())
    assert found["devices"] == 4 and found["local_devices"] == 2

    model = MLP(input_size=16, hidden_sizes=[32], output_size=4)
    pm = ml.compile(model, ml.JaxBackend(), shapes={"input": [8, 16]}, data_keys={"input"})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    cot = rng.standard_normal((8, 4)).astype(np.float32)
    outputs, grads = pm.evaluate(pm.randomize_params(seed=5), {"input": x}, output_gradients={"output": cot})
    np.testing.assert_allclose(found["output"], np.asarray(outputs["output"]), rtol=1e-5, atol=1e-6)
    assert found["grads"].keys() == grads.keys()
    for key, value in grads.items():
        np.testing.assert_allclose(found["grads"][key], np.asarray(value), rtol=1e-5, atol=1e-6, err_msg=key)


def test_training_step_composes_with_data_and_model_parallelism() -> None:
    """``optimizer=`` with ``parallelism=``: AdamW steps on 4 simulated devices equal one device's; the
    optimizer state is placed as its parameters are."""
    found = run_with_jax_devices(
        """
import numpy as np, mithril as ml
from mithril import optim
from mithril.models import MLP, SquaredError, TrainModel

def build():
    train = TrainModel(MLP(input_size=16, hidden_sizes=[32], output_size=8))
    train.add_loss(SquaredError(), input="output", target="target")
    return train

shapes = {"input": [8, 16], "target": [8, 8]}
options = dict(shapes=shapes, data_keys=set(shapes), optimizer=optim.AdamW(lr=0.01))
rng = np.random.default_rng(0)
batches = [{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()} for _ in range(3)]
results = {}
for mode in ("data", "model"):
    pm = ml.compile(build(), ml.JaxBackend(device_mesh=(4,)), parallelism=mode, **options)
    ref = ml.compile(build(), ml.JaxBackend(), **options)
    state, expected = pm.init_state(pm.randomize_params(seed=0)), ref.init_state(ref.randomize_params(seed=0))
    for batch in batches:
        state, _ = pm.train_step(state, batch)
        expected, _ = ref.train_step(expected, batch)
    results[mode] = {
        "params": max(
            float(np.abs(np.asarray(state.params[k]) - np.asarray(expected.params[k])).max()) for k in state.params
        ),
        "slots_placed": all(
            state.opt_state[s][k].sharding.is_equivalent_to(state.params[k].sharding, state.params[k].ndim)
            for s in state.opt_state for k in state.params
        ),
        "split": sorted(k for k, v in state.params.items() if any(axis is not None for axis in v.sharding.spec)),
    }
emit(results)
""",
        devices=4,
    )
    for mode, result in found.items():
        assert result["params"] <= 1e-5 and result["slots_placed"], (mode, result)
    assert found["data"]["split"] == [] and found["model"]["split"], found
