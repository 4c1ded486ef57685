"""BatchNorm2d / Mithril's BatchNorm2D against ``torch.nn.BatchNorm2d`` (train and eval), on the backend
that runs PyTorch's kernel (``batch_norm2d``) and on one that runs its decomposition."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.errors import ArgumentError
from mithril.models import BatchNorm2D, BatchNorm2d, IOKey, Model


def _reference(x: np.ndarray, params: dict, training: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bn = torch.nn.BatchNorm2d(x.shape[1], momentum=0.2, dtype=torch.float64).train(training)
    with torch.no_grad():
        bn.weight.copy_(torch.from_numpy(params["weight"]))
        bn.bias.copy_(torch.from_numpy(params["bias"]))
        bn.running_mean.copy_(torch.from_numpy(params["running_mean"]))
        bn.running_var.copy_(torch.from_numpy(params["running_var"]))
        out = bn(torch.from_numpy(x)).numpy()
    return out, bn.running_mean.numpy(), bn.running_var.numpy()


@pytest.mark.parametrize("backend_name", ["TorchBackend", "NumpyBackend"])
@pytest.mark.parametrize("block", ["BatchNorm2d", "BatchNorm2D"])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_equals_torch(backend_name: str, block: str, training: bool) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5, 6)) * 2.0 + 0.5
    params = {"weight": rng.standard_normal(3), "bias": rng.standard_normal(3),
              "running_mean": rng.standard_normal(3), "running_var": rng.uniform(0.5, 2.0, 3)}  # fmt: skip
    norm = (
        BatchNorm2d(3, momentum=0.2, use_batch_stats=training)
        if block == "BatchNorm2d"
        else BatchNorm2D(3, momentum=0.2, inference=not training)
    )
    model = Model()
    model |= norm(
        input="input",
        weight="weight",
        bias="bias",
        running_mean="running_mean",
        running_var="running_var",
        output=IOKey("output"),
    )
    backend = getattr(ml, backend_name)(dtype=ml.float64)
    pm = ml.compile(model, backend, shapes={"input": list(x.shape)}, data_keys={"input"})
    outputs = pm.evaluate({k: backend.array(v) for k, v in params.items()}, {"input": backend.array(x)})
    expected, running_mean, running_var = _reference(x, params, training)
    np.testing.assert_allclose(np.asarray(backend.to_numpy(outputs["output"])), expected, rtol=1e-10, atol=1e-12)
    if training:
        updated = pm.update_buffers(params, outputs)
        np.testing.assert_allclose(
            np.asarray(backend.to_numpy(updated["running_mean"])), running_mean, rtol=1e-10, atol=1e-12
        )
        np.testing.assert_allclose(
            np.asarray(backend.to_numpy(updated["running_var"])), running_var, rtol=1e-10, atol=1e-12
        )
    else:
        assert "running_mean_new" not in outputs


def test_batch_norm_2d_keys_and_checks() -> None:
    assert sorted(BatchNorm2D(4, use_bias=False).input_keys) == ["input", "running_mean", "running_var", "weight"]
    assert sorted(BatchNorm2D(4, use_scale=False, use_bias=False).input_keys) == [
        "input",
        "running_mean",
        "running_var",
    ]
    with pytest.raises(ArgumentError, match="inference"):
        BatchNorm2D(4, inference="yes")  # type: ignore[arg-type]
