"""Helpers for testing model families: every installed backend, the error measure of the model tests, and
``transformers``' generation of prompts of different lengths (the reference of ``generate``).

Tests compare a family against an implementation nobody here wrote (``transformers``, hand-written
PyTorch, OpenAI's CLIP) built with random weights from a config object; nothing is fetched from a hub.

Example:
    >>> max_relative_error([1.0, 2.0], [1.0, 2.5])
    0.2
"""

from __future__ import annotations

__all__ = [
    "FLOAT32_TOLERANCE",
    "FLOAT64_TOLERANCE",
    "assert_matches",
    "backend_names",
    "backend_params",
    "make_backend",
    "max_relative_error",
    "transformers_generate",
]

from collections.abc import Iterator, Sequence
from typing import Any

import mithril as ml
import numpy as np
from mithril.extend import Backend, available_backends, backend_class

FLOAT32_TOLERANCE = 1e-4
"""Max relative error of float32 backends against the float32 reference (``max|got-ref| / max|ref|``)."""
FLOAT64_TOLERANCE = 1e-9
"""Max relative error of NumPy float64 against the reference run in float64."""


def backend_names() -> list[str]:
    """Installed backends, NumPy first (``*`` is the shared Python table, not a backend)."""
    names = sorted(b for b in available_backends() if b != "*")
    return sorted(names, key=lambda n: n != "numpy")


def backend_params(*, dtypes: tuple[Any, ...] = (ml.float32,)) -> Iterator[Any]:
    """``pytest.param(name, dtype)`` for every installed backend that computes in ``dtype``."""
    import pytest

    for name in backend_names():
        backend: type[Backend[Any]] = backend_class(name)
        for dtype in dtypes:
            if dtype in backend.supported_dtypes:
                yield pytest.param(name, dtype, id=f"{name}-{dtype.value}")


def make_backend(name: str, dtype: Any = ml.float32) -> Any:
    return backend_class(name)(dtype=dtype)


def max_relative_error(got: Any, ref: Any) -> float:
    """``max|got - ref| / max|ref|`` (the issue's measure), in float64."""
    got64, ref64 = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert got64.shape == ref64.shape, f"shape {got64.shape} != reference {ref64.shape}"
    scale = float(np.abs(ref64).max()) or 1.0
    return float(np.abs(got64 - ref64).max()) / scale


def assert_matches(got: Any, ref: Any, dtype: Any, what: str = "") -> None:
    """Fail unless ``got`` is within the tolerance for ``dtype`` of ``ref``."""
    tolerance = FLOAT64_TOLERANCE if dtype == ml.float64 else FLOAT32_TOLERANCE
    error = max_relative_error(got, ref)
    assert error <= tolerance, f"{what}: max relative error {error:.3g} > {tolerance:g}"


def transformers_generate(model: Any, rows: Sequence[Sequence[int]], **options: Any) -> np.ndarray:
    """``model.generate`` (a ``transformers`` model, ``do_sample=False``) of prompts of any lengths, padded as
    ``transformers`` expects: on the left for a decoder-only model, on the right for an encoder-decoder (T5),
    with the attention mask and ``pad_token_id=0`` unless ``options`` say otherwise. The new tokens
    ``[batch, new]`` (an encoder-decoder's without its decoder start token)."""
    import torch

    encoder_decoder = bool(model.config.is_encoder_decoder)
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        where = slice(0, len(row)) if encoder_decoder else slice(width - len(row), width)
        ids[i, where], mask[i, where] = row, 1
    with torch.no_grad():
        out = model.generate(
            torch.tensor(ids), attention_mask=torch.tensor(mask), do_sample=False, **{"pad_token_id": 0, **options}
        )
    new: np.ndarray = out[:, 1:].numpy() if encoder_decoder else out[:, width:].numpy()
    return new
