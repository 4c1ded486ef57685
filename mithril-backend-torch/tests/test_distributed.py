"""Parallelism on real ``torch.distributed``: ``torchrun --nproc_per_node 2`` with gloo on 127.0.0.1
runs data- and model-parallel models as DTensors over a ``DeviceMesh`` and gets the single-process
numbers (the worker is ``_distributed_worker.py``); a mesh outside a distributed job is refused."""

from __future__ import annotations

import json
from pathlib import Path

import mithril as ml
import pytest
from mithril.errors import ArgumentError
from mithril_testing.devices import run_torchrun


@pytest.mark.slow
def test_torchrun_data_and_model_parallel_match_one_process(tmp_path: Path) -> None:
    out = tmp_path / "found.json"
    done = run_torchrun(Path(__file__).with_name("_distributed_worker.py"), out, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found.pop("world") == 2
    assert {"mlp-data", "mlp-model"} <= set(found)
    for case in ("train-data", "train-model", "train-torch.optim-data", "train-torch.optim-model"):  # training, mesh
        result = found.pop(case)
        assert result["params"] <= 1e-5 and result["slots_placed"] and result["step"] == 3, (case, result)
        assert result["resumed"] <= 1e-6 and result["moved"] > 1e-4, (case, result)  # a loaded state trains on
    for case, result in found.items():
        assert result["output"] <= 1e-5 and result["grads"] <= 1e-5, (case, result)
        assert result["grads_placed"], case
        if case.endswith("-data"):
            assert result["split"] == [] and result["local_fraction"] == 1.0, (case, result)
        else:
            assert result["split"] and result["local_fraction"] < 0.75, (case, result)
    assert found["mlp-model"]["split"] == ["bias0", "bias2", "weight0", "weight1", "weight2"]


def test_a_mesh_outside_a_distributed_job_says_how_to_launch_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ArgumentError, match=r"needs 2 processes.*torchrun --nproc_per_node 2"):
        ml.TorchBackend(device_mesh=(2,))
    with pytest.raises(ArgumentError, match="device_mesh"):
        ml.TorchBackend().ones(4, 2, device_mesh=(2,), tensor_split=(0,))
    with pytest.raises(ArgumentError, match=r"parallelism='data'.*device mesh"):
        ml.compile(ml.models.Linear(2), ml.TorchBackend(), shapes={"input": [2, 3]}, parallelism="data")


def test_the_manuals_parallel_strategy_points_at_device_mesh() -> None:
    with pytest.raises(
        ArgumentError, match=r"parallel_strategy='data_parallel'.*torchrun --nproc_per_node 2.*device_mesh=\(2,\)"
    ):
        ml.TorchBackend(parallel_strategy="data_parallel", devices=["cuda:0", "cuda:1"])
