"""What the sequence-model tests (``test_sequence_models.py``, ``test_sequence_inference.py``) share: PyTorch
(the reference; the tests are skipped without it), their random inputs and PyTorch's parameters and gradients
under the names of Mithril's sequence blocks. ``conftest.py`` puts this folder on ``sys.path``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the sequence models are checked against PyTorch")
nn = torch.nn

_NAMES = {"weight": "weight_out", "bias": "bias_out"}
"""A head's (``nn.Linear``'s) parameters in the sequence blocks."""


def sequence_data(seed: int, batch: int, length: int, features: int, hidden: int) -> dict[str, np.ndarray]:
    """Random ``x [batch, length, features]``, initial states ``h0``/``c0 [batch, hidden]`` and an output
    cotangent ``cot [batch, length, hidden]``."""
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=(batch, length, features)),
        "h0": rng.normal(size=(batch, hidden)),
        "c0": rng.normal(size=(batch, hidden)),
        "cot": rng.normal(size=(batch, length, hidden)),
    }


def torch_initial_state(data: dict[str, np.ndarray]) -> tuple[Any, Any]:
    """``nn.LSTM``'s ``(h_0, c_0)`` (one layer) from :func:`sequence_data`'s ``h0`` and ``c0``."""
    return torch.tensor(data["h0"])[None], torch.tensor(data["c0"])[None]


def seeded_lstm(data: dict[str, np.ndarray], features: int, hidden: int) -> tuple[Any, Any]:
    """The reference: a float64 ``nn.LSTM(features, hidden, batch_first=True)`` drawn after
    ``torch.manual_seed(0)``, and :func:`sequence_data`'s ``x`` as a tensor that collects its gradient."""
    torch.manual_seed(0)
    return nn.LSTM(features, hidden, batch_first=True).double(), torch.tensor(data["x"], requires_grad=True)


def _mithril_name(prefix: str, name: str) -> str:
    return prefix + _NAMES.get(name, name.removesuffix("_l0"))


def torch_params(module: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """``nn.LSTM``/``nn.RNN``/``nn.LSTMCell``/``nn.Linear`` parameters under our names (``weight_ih_l0`` ->
    ``weight_ih``, a head's ``weight`` -> ``weight_out``), each after ``prefix``."""
    return {_mithril_name(prefix, k): v.detach().numpy().copy() for k, v in module.named_parameters()}


def torch_grads(module: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """The gradients of :func:`torch_params`' parameters, under the same names."""
    return {_mithril_name(prefix, k): v.grad.numpy() for k, v in module.named_parameters()}
