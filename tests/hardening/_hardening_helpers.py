"""What several hardening tests share: the installed backends, those of them that generate Python, and a
backend by name."""

from __future__ import annotations

import mithril as ml
from mithril.plugins.lookup import available_backends, backend_class
from mithril.types import Dtype

BACKENDS = sorted(b for b in available_backends() if b != "*")
PYTHON_BACKENDS = [b for b in BACKENDS if backend_class(b).codegen == "python"]


def make_backend(name: str, dtype: Dtype = ml.float32) -> ml.Backend:
    """The backend ``name`` (``"numpy"``, ``"c"``...) computing in ``dtype``."""
    return backend_class(name)(dtype=dtype)
