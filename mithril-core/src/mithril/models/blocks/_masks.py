"""Masks as numbers, shared by the metric and Gaussian-process blocks."""

from __future__ import annotations

from typing import Any

from ...framework.model import Model
from ._util import op


def as_float(model: Model, mask: Any) -> Any:
    """A bool ``mask`` as 1.0/0.0 in the backend's float dtype. A cast, not ``where(mask, 1.0, 0.0)``: that
    gives float32 on PyTorch whatever the backend's dtype (two Python numbers carry no dtype there)."""
    return op(model, "cast", mask, dtype="float")
