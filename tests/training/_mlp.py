"""The small model the training tests share: a 2-layer MLP with a mean squared error, its data, and the
same network hand-written in PyTorch (the independent reference)."""

from __future__ import annotations

import numpy as np
import torch
from mithril.models import Linear, Mean, Model, Relu, SquaredError, TrainModel

SHAPES = {"input": [16, 3], "target": [16, 2]}


def train_model() -> TrainModel:
    model = Model()
    model |= Linear(8)(input="input", output="hidden")
    model |= Relu()(input="hidden", output="relu")
    model |= Linear(2)(input="relu", output="output")
    train = TrainModel(model)
    train.add_loss(SquaredError(), reduce_steps=[Mean()], input="output", target="target")
    return train


def batches(count: int, dtype: type = np.float64, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "input": rng.standard_normal(SHAPES["input"]).astype(dtype),
            "target": rng.standard_normal(SHAPES["target"]).astype(dtype),
        }
        for _ in range(count)
    ]


class TorchMLP:
    """The same network in plain PyTorch, from Mithril's parameter dict (weights are ``[out, in]``)."""

    def __init__(self, params: dict[str, np.ndarray], dtype: torch.dtype = torch.float64) -> None:
        self.tensors = {k: torch.tensor(np.asarray(v), dtype=dtype, requires_grad=True) for k, v in params.items()}

    def loss(self, batch: dict[str, np.ndarray]) -> torch.Tensor:
        t = self.tensors
        x = torch.tensor(batch["input"], dtype=t["weight"].dtype)
        y = torch.tensor(batch["target"], dtype=t["weight"].dtype)
        hidden = torch.relu(x @ t["weight"].T + t["bias"])
        return ((hidden @ t["weight_1"].T + t["bias_1"] - y) ** 2).mean()
