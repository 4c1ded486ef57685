"""Models shared by the summary, graph and docs tests: the seeds' CNN and a small GPT-2 (and this folder on
``sys.path``, for the helper modules beside the tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mithril.demo import build_cnn
from mithril.models import Model

sys.path.insert(0, str(Path(__file__).parent))  # the sequence tests' helpers: ``from _sequence_helpers import ...``


def build_seed_cnn() -> Model:
    """The CNN of the JAX migration guide (seed 000, "Mithril CNN"), with ``in_features`` for its
    ``input_size`` (which is not a key of Linear)."""
    return build_cnn(image_size=32)


@pytest.fixture
def seed_cnn() -> Model:
    return build_seed_cnn()


@pytest.fixture
def gpt_block() -> Model:
    """GPT-2 with one transformer block (small sizes), from mithril_models."""
    models = pytest.importorskip("mithril_models", reason="mithril-models is not installed")
    return models.create_gpt(bias=True, block_size=64, dims=32, num_heads=2, num_layers=1, vocab_size=100)


@pytest.fixture
def numpy_backend():
    pytest.importorskip("mithril_backend_numpy", reason="mithril-backend-numpy is not installed")
    import mithril as ml

    return ml.NumpyBackend()
